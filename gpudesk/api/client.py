"""`Client`: the typed way to drive a gpudesk engine from Python.

    from gpudesk.api import Client, JobSpec

    with Client.connect() as client:          # starts the engine for GPUDESK_HOME if needed
        [job_id] = client.submit([JobSpec(name="hello", command=("echo", "hi"))])
        for job in client.jobs(ids=[job_id]):
            print(job.id, job.state, job.slot)

Every reply is decoded once, here, strictly into `gpudesk.api.models`: a reply that does not
match its model raises `EngineError` (code "bad_reply") naming the field, instead of a view
failing later on a missing key. Events come from `Client.events()` as `JobEvent` and
`TelemetryEvent` values. The CLI, `top`, the run report and the desk all use this class.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import msgspec

from gpudesk.api.errors import BAD_REPLY, TOO_LARGE, EngineError
from gpudesk.api.models import (
    ActionOutcome,
    ActionResult,
    ConfigureResult,
    DamagedJob,
    DatasetsResult,
    DrainResult,
    DrainView,
    EditResult,
    JobDetail,
    JobEvent,
    JobList,
    JobStateName,
    JobView,
    LogChunk,
    MigApplyResult,
    MigPlanResult,
    ModelObserveResult,
    ModelResetResult,
    ModelShowResult,
    PingResult,
    ShutdownResult,
    StationStatus,
    SubmitResult,
    TelemetryEvent,
    TelemetryResult,
    WireModel,
)
from gpudesk.api.submit_request import submit_args
from gpudesk.core.identity import user_id
from gpudesk.core.protocol import INTERNAL, MAX_LISTING_IDS, PROTOCOL_VERSION, UNKNOWN_OP
from gpudesk.core.record_dict import record_dict
from gpudesk.core.wire.requests import (
    CancelArgs,
    ConfigureArgs,
    DatasetsArgs,
    DrainArgs,
    EditArgs,
    JobRefsArgs,
    JobsArgs,
    LogArgs,
    MigApplyArgs,
    MigPlanArgs,
    ModelObserveArgs,
    ModelResetArgs,
    OpArgs,
    PriorityArgs,
    ShowArgs,
    SignalArgs,
    StatusArgs,
    TelemetryArgs,
)

if TYPE_CHECKING:
    from gpudesk.api.connection import Connection, EventSocket, Outage
    from gpudesk.api.job_pages import JobPages
    from gpudesk.core.datasets import DatasetSpec
    from gpudesk.core.jobs import JobSpec
    from gpudesk.core.station import StationConfig
    from gpudesk.paths import Home
    from gpudesk.policy.interference import Observation

Model = TypeVar("Model", bound=WireModel)
JobRef = int | str  # a job's id, or its name (the caller's newest job of that name, else anyone's)


def one_view_per_job(*reads: Sequence[JobView]) -> list[JobView]:
    """The jobs of listings read one request after another, oldest first, one view per job:
    the latest read's, since a job can change state between two requests (running at one,
    finished by the next) and show up in both. Read the states in the order jobs pass
    through them (queued, running, finished) and a job that moves meanwhile is always in a
    later read, never in none."""
    latest: dict[int, JobView] = {}
    for read in reads:
        for job in read:
            latest[job.id] = job
    return sorted(latest.values(), key=lambda job: job.id)


class _ErrorBody(msgspec.Struct, frozen=True):
    code: str
    message: str


class _Envelope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A reply before its result is decoded: the result stays raw bytes until the version
    and the outcome are known."""

    v: int
    id: int | str | None
    ok: bool
    result: msgspec.Raw = msgspec.Raw()  # empty when absent (Raw cannot be optional)
    error: _ErrorBody | None = None


_envelope_decoder = msgspec.json.Decoder(_Envelope)
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def decode(model: type[Model], raw: bytes | msgspec.Raw, what: str) -> Model:
    """`raw` JSON decoded strictly into `model`, or EngineError(BAD_REPLY) saying where not."""
    decoder = _decoders.get(model)
    if decoder is None:
        decoder = _decoders[model] = msgspec.json.Decoder(model)
    try:
        return decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise EngineError(
            f"the engine's {what} does not match this gpudesk's models ({exc}); are the "
            "engine and this client the same gpudesk version? (`gpudesk engine status`)",
            BAD_REPLY,
        ) from None


def decode_reply(model: type[Model], raw: bytes, op: str) -> Model:
    """A whole reply: the protocol version, then the engine's error or the result."""
    try:
        envelope = _envelope_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise EngineError(
            f"the engine's reply to {op!r} is not a reply ({exc})", BAD_REPLY
        ) from None
    if envelope.v != PROTOCOL_VERSION:
        raise EngineError(
            f"the engine speaks protocol {envelope.v}, this client {PROTOCOL_VERSION}; "
            "restart the engine with this gpudesk (`gpudesk engine stop`)",
            "unsupported_version",
        )
    if not envelope.ok:
        error = envelope.error or _ErrorBody(INTERNAL, "the engine failed without a message")
        raise EngineError(error.message, error.code)
    if not len(envelope.result):
        raise EngineError(f"the engine's reply to {op!r} has no result", BAD_REPLY)
    return decode(model, envelope.result, f"reply to {op!r}")


Event = JobEvent | TelemetryEvent
_EVENT_MODELS: dict[str, type[JobEvent] | type[TelemetryEvent]] = {
    "job": JobEvent,
    "telemetry": TelemetryEvent,
}


class EventStream:
    """The engine's published events, decoded. A subscription misses what was published
    before it was answered: read the current state with a request after subscribing, then
    follow the events."""

    def __init__(self, socket: EventSocket) -> None:
        self._socket = socket

    def wait(self, timeout: float) -> bool:
        """True once an event is ready to read, False after `timeout` seconds without one."""
        return bool(self._socket.poll(int(max(0.0, timeout) * 1000)))

    def next(self, timeout: float = 0.0) -> Event | None:
        """The next event, waiting up to `timeout` seconds; None when none came."""
        event = self.next_raw(timeout)
        return None if event is None else decode_event(*event)

    def next_raw(self, timeout: float = 0.0) -> tuple[bytes, bytes] | None:
        """The next event's (topic, body) as published, undecoded (for recording)."""
        if not self.wait(timeout):
            return None
        return self._socket.recv_event()

    def drain(self) -> list[Event]:
        """Every event already waiting, without blocking."""
        found = []
        while (event := self.next(0.0)) is not None:
            found.append(event)
        return found


def decode_event(topic: bytes, body: bytes) -> Event:
    name = topic.decode(errors="replace")
    model = _EVENT_MODELS.get(name)
    if model is None:
        raise EngineError(f"the engine published an unknown event topic {name!r}", BAD_REPLY)
    return decode(model, body, f"{name!r} event")


class Client:
    """A connection to one engine (one GPUDESK_HOME). Not thread-safe: give each thread its
    own `Client`. Every method raises `EngineError` when the engine refuses or cannot be
    reached; its `code` is one of the protocol's error codes (docs/protocol.md)."""

    def __init__(self, transport: Connection) -> None:
        self._transport = transport

    @classmethod
    def connect(
        cls, home: Home | None = None, *, autostart: bool = True, timeout: float | None = None
    ) -> Client:
        """The engine of `home` (default: GPUDESK_HOME), started first when `autostart` and it
        is not running."""
        from gpudesk.api.connection import connect

        transport = connect(home, autostart=autostart)
        if timeout is not None:
            transport.timeout = timeout
        return cls(transport)

    @classmethod
    def attach(cls, home: Home, *, timeout: float = 30.0) -> Client:
        """A client for `home`'s engine that neither checks nor starts it."""
        from gpudesk.api.connection import Connection

        return cls(Connection(home, timeout=timeout))

    @property
    def home(self) -> Home:
        return self._transport.home

    @property
    def timeout(self) -> float:
        """Seconds each request waits for its reply (then `EngineError`, code "unavailable")."""
        return self._transport.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._transport.timeout = seconds

    def close(self) -> None:
        self._transport.close()

    def outlast(self, outage: Outage | None) -> None:
        """From now on, requests outlast the engine's outages (`Connection.outage`)."""
        self._transport.outage = outage

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def call(self, model: type[Model], op: str, **args: Any) -> Model:
        """One request, its reply decoded into `model`: for ops without a method here."""
        return decode_reply(model, self._transport.exchange(op, args), op)

    def ask(self, model: type[Model], op: str, args: OpArgs) -> Model:
        """One request, its arguments encoded from the op's type (gpudesk.core.wire.requests,
        which the engine decodes them with) and its reply decoded into `model`."""
        return self.call(model, op, **msgspec.to_builtins(args))

    # ----------------------------------------------------------------------- engine
    def ping(self) -> PingResult:
        return self.call(PingResult, "ping")

    def status(self, *, fresh_loaders: bool = False) -> StationStatus:
        """The engine, the station and its loaders; `fresh_loaders` asks each producer now
        instead of using its last report."""
        return self.ask(StationStatus, "status", StatusArgs(fresh_loaders=fresh_loaders))

    def shutdown(self) -> ShutdownResult:
        """Stop the engine; running jobs keep running and the next engine adopts them."""
        return self.call(ShutdownResult, "shutdown")

    def configure(
        self, station: StationConfig, keys: Sequence[str] | None = None
    ) -> ConfigureResult:
        """Ask the engine for these station settings: only `keys` of `station` when given (a
        profile's [station] sends the keys it names), else all of them. The reply says what
        changed and what was not applied, and why (another user's station, GPUDESK_BACKEND)."""
        args = ConfigureArgs(station=station.table(keys))
        return self.ask(ConfigureResult, "configure", args)

    def check_configure(
        self, station: StationConfig, keys: Sequence[str] | None = None
    ) -> ConfigureResult:
        """What `configure` would change, and what it would not apply, changing nothing.
        Raises the EngineError `unknown_op` from an engine older than this check."""
        args = ConfigureArgs(station=station.table(keys))
        return self.ask(ConfigureResult, "check_configure", args)

    def register_datasets(self, datasets: Sequence[DatasetSpec]) -> DatasetsResult:
        """Register shared-loader settings; an empty list lists what is registered."""
        args = DatasetsArgs(datasets=[d.to_dict() for d in datasets])
        return self.ask(DatasetsResult, "datasets", args)

    # ------------------------------------------------------------------------- jobs
    def submit(self, specs: Sequence[JobSpec], env: Mapping[str, str] | None = None) -> list[int]:
        """Queue jobs (one transaction: all or none); returns their ids in order. The engine
        refuses (`invalid_args`) a job it can never run, such as one asking for more GPUs than
        the station has.

        As with `gpudesk submit`, jobs start from the submitter's environment (`env`, by
        default this process's, with this Python's folder first on PATH; each spec's own `env`
        is laid on top) and a spec without a `workdir` runs in the current directory."""
        return self.submit_jobs(specs, env).ids

    def submit_jobs(
        self,
        specs: Sequence[JobSpec],
        env: Mapping[str, str] | None = None,
        *,
        hold: bool = False,
        first_tasks_alone: Sequence[int] = (),
    ) -> SubmitResult:
        """`submit`, with all the engine said: the ids, and whether the station is SIMULATED.
        `hold`: queued held, none starting until `release` (the station's jobs only). A
        submission larger than one request may be (about 2,000 plain jobs) goes in parts that
        start as one, all or none (`gpudesk.api.submit_parts`). An array's id among the jobs'
        dependencies names every task of the array, as in Slurm, but for those of
        `first_tasks_alone`, which name its first task alone (`144_0`)."""
        alone = list(first_tasks_alone)
        args = submit_args(specs, env, hold=hold, first_tasks_alone=alone)
        try:
            return self.ask(SubmitResult, "submit", args)
        except EngineError as exc:
            # more than one request holds (refused whole, nothing queued): in parts that
            # start as one, where its jobs are many rather than each large
            from gpudesk.api.submit_parts import parts_for, submit_in_parts

            parts = parts_for(args.jobs, args.env) if exc.code == TOO_LARGE else None
            if parts is None:
                raise
        return submit_in_parts(
            self, args.jobs, args.env, hold=hold, parts=parts, alone=alone, umask=args.umask
        )

    def check_submit(self, specs: Sequence[JobSpec], env: Mapping[str, str] | None = None) -> bool:
        """Whether the engine would accept these jobs, queueing nothing: raises the EngineError
        `submit` would. False when the engine is older than this check (it cannot say)."""
        args = submit_args(specs, env)
        try:
            self.ask(SubmitResult, "check_submit", args)
        except EngineError as exc:
            if exc.code == UNKNOWN_OP:
                return False
            from gpudesk.api.submit_parts import check_in_parts, parts_for

            parts = parts_for(args.jobs, args.env) if exc.code == TOO_LARGE else None
            if parts is None:
                raise
            check_in_parts(self, args.jobs, args.env, parts, umask=args.umask)
        return True

    def jobs_page(
        self,
        *,
        states: Sequence[JobStateName] | None = None,
        group: str | None = None,
        ids: Sequence[int] | None = None,
        limit: int | None = None,
        after_id: int | None = None,
        before_id: int | None = None,
        usage: bool = False,
        user: str | int | None = None,
        archived: bool = False,
        count: bool = False,
        name: str | None = None,
        actable: bool = False,
    ) -> JobList:
        """One `jobs` request: a page of at most the engine's cap (JOBS_PAGE_CAP) and `limit`,
        oldest first; from the oldest, or after `after_id`; with `limit` alone the newest, or
        with `before_id` the newest before it. The reply says whether more match and where to
        go on (`JobList`). `name`: only jobs whose name matches this shell pattern
        (fnmatchcase's: gpudesk.core.name_pattern), matched by the engine. `actable` (no
        `user`): the jobs the caller may act on (hers, where she is no admin: `own_only`)."""
        if isinstance(user, str) and (uid := user_id(user)) is not None:
            user = uid  # the engine's user database is this machine's: its loop asks it nothing
        args = JobsArgs(
            states=None if states is None else list(states),
            group=group,
            name=name,
            ids=None if ids is None else list(ids),
            limit=limit,
            after_id=after_id,
            before_id=before_id,
            user=user,
            usage=usage,
            archived=archived,
            count=count,
            actable=actable,
        )
        return self.ask(JobList, "jobs", args)

    def job_listing(
        self,
        *,
        states: Sequence[JobStateName] | None = None,
        group: str | None = None,
        ids: Sequence[int] | None = None,
        limit: int | None = None,
        usage: bool = False,
        user: str | int | None = None,
        archived: bool = False,
        name: str | None = None,
        actable: bool = False,
    ) -> JobList:
        """Every job that matches (with `limit`, the newest `limit`), oldest first, in one
        JobList gathered from as many pages as it takes: each page its own request, so other
        clients' requests go between them. `more` (with `limit`): more matched than were
        kept. `damaged`: every page's skipped rows. Ids beyond the engine's per-request limit
        are asked for in several requests. `actable`: as `jobs_page`'s."""
        chunks: list[list[int] | None] = [None]
        if ids is not None:
            ids = list(dict.fromkeys(ids))
            chunks = [
                ids[i : i + MAX_LISTING_IDS] for i in range(0, len(ids), MAX_LISTING_IDS)
            ] or [[]]
        filters: dict[str, Any] = dict(states=states, group=group, usage=usage, user=user)
        filters.update(archived=archived, name=name, actable=actable)
        jobs: list[JobView] = []
        damaged: list[DamagedJob] = []
        more = own = False  # own: `actable` narrowed it to the caller's jobs
        simulated: str | None = None
        drain: DrainView | None = None
        from gpudesk.api.page_run import PageRun

        for chunk in chunks:
            # oldest first, page after page; or newest first until `limit` are kept
            run = PageRun(self, limit=limit, newest_first=limit is not None, ids=chunk, **filters)
            pages = []
            for page in run:
                pages.append(page.jobs)
                damaged += page.damaged
                simulated, drain, own = page.simulated, page.drain, page.own_only
            more = more or run.more
            jobs += [
                job for found in (reversed(pages) if run.newest_first else pages) for job in found
            ]
        if len(chunks) > 1:
            jobs.sort(key=lambda job: job.id)
            if limit is not None and len(jobs) > limit:
                jobs, more = jobs[-limit:], True
        return JobList(
            jobs=jobs, more=more, damaged=damaged, simulated=simulated, drain=drain, own_only=own
        )

    def job_pages(
        self,
        *,
        states: Sequence[JobStateName] | None = None,
        group: str | None = None,
        limit: int | None = None,
        usage: bool = False,
        user: str | int | None = None,
        archived: bool = False,
        name: str | None = None,
    ) -> JobPages:
        """`job_listing`'s pages one at a time, for a caller that uses each as it arrives:
        oldest first, or newest first where `limit` keeps fewer than match (`JobPages`)."""
        from gpudesk.api.job_pages import JobPages

        return JobPages(
            self,
            states=states,
            group=group,
            limit=limit,
            usage=usage,
            user=user,
            archived=archived,
            name=name,
        )

    def jobs(
        self,
        *,
        states: Sequence[JobStateName] | None = None,
        group: str | None = None,
        ids: Sequence[int] | None = None,
        limit: int | None = None,
        usage: bool = False,
        user: str | int | None = None,
        archived: bool = False,
        name: str | None = None,
    ) -> list[JobView]:
        """Jobs, oldest first, filtered by state, group, ids, owner (`user`: a user name or
        uid) or name (a shell pattern, `lr-*`); `limit` keeps the newest. Archived jobs
        (finished longer ago than the station keeps them live) only with `archived`, or when
        named by `ids`. Rows the engine cannot read are left out: `job_listing` says which."""
        return self.job_listing(
            states=states,
            group=group,
            ids=ids,
            limit=limit,
            usage=usage,
            user=user,
            archived=archived,
            name=name,
        ).jobs

    def show(self, job: JobRef, *, env: bool = False, series: bool = False) -> JobDetail:
        """One job with its attempts, events, usage and why it waits; with `series`, its
        telemetry over its life (`JobDetail.series`)."""
        return self.ask(JobDetail, "show", ShowArgs(job=job, env=env, series=series))

    def log(
        self,
        job: JobRef,
        attempt: int | None = None,
        *,
        offset: int = 0,
        max_bytes: int | None = None,
    ) -> LogChunk:
        """A piece of an attempt's output (default: the latest attempt's) from stream position
        `offset`, read by the engine: for a log this process may not read itself."""
        args = LogArgs(job=job, attempt=attempt, offset=offset)
        if max_bytes is not None:
            args = msgspec.structs.replace(args, max_bytes=max_bytes)
        return self.ask(LogChunk, "log", args)

    def cancel(self, jobs: Sequence[JobRef], grace: float | None = None) -> list[ActionOutcome]:
        args = CancelArgs(jobs=list(jobs))
        if grace is not None:
            args = msgspec.structs.replace(args, grace=grace)
        return self._act("cancel", args)

    def hold(self, jobs: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act("hold", JobRefsArgs(jobs=list(jobs)))

    def release(self, jobs: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act("release", JobRefsArgs(jobs=list(jobs)))

    def requeue(self, jobs: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act("requeue", JobRefsArgs(jobs=list(jobs)))

    def set_priority(
        self, jobs: Sequence[JobRef], *, priority: int | None = None, delta: int | None = None
    ) -> list[ActionOutcome]:
        """Set the priority, or move it by `delta` (+1 raises, -1 lowers)."""
        return self._act("priority", PriorityArgs(jobs=list(jobs), priority=priority, delta=delta))

    def edit_job(
        self,
        job: JobRef,
        fields: Mapping[str, Any] | None = None,
        *,
        set_env: Mapping[str, str] | None = None,
        unset_env: Sequence[str] = (),
        first_tasks_alone: Sequence[int] = (),
    ) -> EditResult:
        """Edit a job that has not started (`gpudesk edit`): `fields` replaces its spec's
        fields by `JobSpec` name (`name`, `command`, `time_limit_s`, `gpus`, `after`, ...:
        `gpudesk.core.job_edit.EDITABLE_FIELDS`; None clears one to its default), `set_env`
        sets variables of its environment and `unset_env` removes some. Checked as a new
        submit is; an EngineError `refused` for a job that started or is another's,
        `invalid_args` naming a field, `unknown_job`. The job keeps its id and its place. An
        array's id in a dependency field names every task of it, but those of
        `first_tasks_alone` (as `submit_jobs`)."""
        args = EditArgs(
            job=job,
            fields=dict(fields or {}),
            set_env=dict(set_env or {}),
            unset_env=list(unset_env),
            first_tasks_alone=list(first_tasks_alone),
        )
        return self.ask(EditResult, "edit", args)

    def suspend(self, jobs: Sequence[JobRef]) -> list[ActionOutcome]:
        """Stop running jobs' processes (SIGSTOP); they keep their GPUs (docs/jobs.md)."""
        return self._act("suspend", JobRefsArgs(jobs=list(jobs)))

    def resume(self, jobs: Sequence[JobRef]) -> list[ActionOutcome]:
        """Continue suspended jobs (SIGCONT)."""
        return self._act("resume", JobRefsArgs(jobs=list(jobs)))

    def signal(self, jobs: Sequence[JobRef], signal: str | int) -> list[ActionOutcome]:
        """Send `signal` (`"USR1"`, `"SIGUSR1"` or `10`) to running jobs' processes, which go
        on; one the engine does not send is an EngineError `invalid_args` saying which it
        sends."""
        return self._act("signal", SignalArgs(jobs=list(jobs), signal=signal))

    def drain(self, reason: str | None = None) -> DrainResult:
        """Start no new job until `undrain` (an admin's; a personal engine's owner's)."""
        return self.ask(DrainResult, "drain", DrainArgs(reason=reason))

    def undrain(self) -> DrainResult:
        return self.ask(DrainResult, "undrain", OpArgs())

    def _act(self, op: str, args: JobRefsArgs) -> list[ActionOutcome]:
        return self.ask(ActionResult, op, args).results

    # -------------------------------------------------------------------- telemetry
    def telemetry(self, *, history: int = 0) -> TelemetryResult:
        """The latest snapshot (None before the first sample), the last `history` points of
        each GPU's series, and each GPU's energy since local midnight."""
        return self.ask(TelemetryResult, "telemetry", TelemetryArgs(history=history))

    @contextmanager
    def events(self, topic: str = "") -> Iterator[EventStream]:
        """Follow the engine's events: "job", "telemetry", or "" for both."""
        with self._transport.subscribe(topic) as socket:
            yield EventStream(socket)

    # -------------------------------------------------------------------------- MIG
    def mig_plan(self, gpu: int | None = None) -> MigPlanResult:
        """The MIG layout the queue would want on one GPU (or every MIG-capable one)."""
        return self.ask(MigPlanResult, "mig_plan", MigPlanArgs(gpu=gpu))

    def mig_apply(self, gpu: int, profiles: Sequence[str], *, confirm: bool) -> MigApplyResult:
        """Give an idle MIG-mode GPU this layout (only where `[station] mig_repartition`
        allows it, and only with `confirm`)."""
        args = MigApplyArgs(gpu=gpu, profiles=list(profiles), confirm=confirm)
        return self.ask(MigApplyResult, "mig_apply", args)

    # ----------------------------------------------------------- interference model
    def model_show(self) -> ModelShowResult:
        """The interference model's parameters for each GPU model on the station, and the
        defaults: value, prior, provenance, observations, last update."""
        return self.call(ModelShowResult, "model_show")

    def model_observe(
        self, gpu_model: str, observations: Sequence[Observation], source: str = "calibrated"
    ) -> ModelObserveResult:
        """Feed observations measured on a GPU of `gpu_model` (its NVML name) to the engine's
        learner, stored at once; `source` "calibrated" (probes, `gpudesk calibrate`) marks the
        parameters they move as calibrated, "learned" as learned."""
        args = ModelObserveArgs(
            gpu_model=gpu_model,
            observations=[record_dict(obs) for obs in observations],
            source=cast(Literal["learned", "calibrated"], source),
        )
        return self.ask(ModelObserveResult, "model_observe", args)

    def model_reset(self, gpu_model: str | None = None, *, confirm: bool) -> ModelResetResult:
        """Forget what was learned and calibrated (for one GPU model, or all): back to the
        defaults. Refused without `confirm`."""
        args = ModelResetArgs(gpu_model=gpu_model, confirm=confirm)
        return self.ask(ModelResetResult, "model_reset", args)


__all__ = ["BAD_REPLY", "Client", "Event", "EventStream", "decode", "decode_event"]
