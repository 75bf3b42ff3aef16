"""The engine's requests: the table of operations (op name -> handler), each handler's argument
checks, and the shape of its reply. Handlers check what a client sent and hand the work to the
collaborator that owns it; a bad argument is a ProtocolError naming it.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudesk import __version__, joblog
from gpudesk.core import protocol
from gpudesk.core.datasets import DatasetSpec
from gpudesk.core.identity import Caller, user_id, user_name
from gpudesk.core.jobs import (
    DEFAULT_CANCEL_GRACE_S,
    PRIORITY_RANGE,
    JobSpec,
    JobState,
    SpecError,
    check_env,
    check_priority,
)
from gpudesk.core.mig_layout import LayoutError, MigError, MigUsageError
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.engine import reconfigure, runner, user_limits
from gpudesk.engine.access import Access
from gpudesk.engine.attempts import Attempts, LiveAttempt
from gpudesk.engine.backends import slurm_views
from gpudesk.engine.backends.slurm import Prepared, Sent, SlurmBackend, SubmitRefused
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.job_control import JobControl, JobOutcome
from gpudesk.engine.learning import SOURCES, StationLearning
from gpudesk.engine.loaders import LoaderSupervisor, Statuses
from gpudesk.engine.loop_timing import LoopTiming
from gpudesk.engine.metrics.exporter import MetricsExporter
from gpudesk.engine.mps_watch import MpsWatch
from gpudesk.engine.offloop import Busy, Later, OffLoop, Pending
from gpudesk.engine.repartition.control import MigControl
from gpudesk.engine.repartition.station import MigApplyRefused
from gpudesk.engine.scheduler import Scheduler
from gpudesk.engine.state import CurrentStation, PlacementDue
from gpudesk.engine.store.damage import is_damage, request_text
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import UnknownJob
from gpudesk.engine.store.slurm import SlurmRow
from gpudesk.engine.telemetry_sink import TelemetrySink
from gpudesk.engine.tracking.tracker import Tracking
from gpudesk.paths import Home
from gpudesk.policy.interference import LearnedParam
from gpudesk.policy.observation_wire import MAX_OBSERVATIONS, observation_from_dict
from gpudesk.policy.policies import make_policy
from gpudesk.policy.policy import gpu_job_impossible
from gpudesk.policy.queue import JobQueue
from gpudesk.redact import redact_secrets
from gpudesk.slurm import logs as slurm_logs
from gpudesk.slurm.as_owner import acts_for_other
from gpudesk.slurm.commands import TIMEOUT_S as SLURM_TIMEOUT_S
from gpudesk.text import ends_in_c1_lead, is_text, printable_bytes, safe_text
from gpudesk.tracking.available import missing_for
from gpudesk.trust import UntrustedFileError
from gpudesk.units import MIB_PER_GB

log = logging.getLogger("gpudesk.engine")

MAX_JOBS_PER_REQUEST = 10_000
MAX_CANCEL_GRACE_S = 3600.0
MAX_HISTORY_POINTS = 600
STATION_EVENT = "station"  # the kind of event a change of station settings is stored as
STATION_CHANGES_SHOWN = 5  # how many of the latest `status` carries
# How many job shapes of one submit are judged for waiting on a station change: a sweep's
# jobs share a few, and the loop does not weigh thousands of different ones at submit.
CHANGE_CHECKS = 100
# A Slurm submit's first step runs up to four clients (the slurm.conf check, sinfo twice,
# scontrol), each bounded by Slurm's client timeout; one more of margin.
PREPARE_BOUND_S = 5 * SLURM_TIMEOUT_S
MAX_ROW_ID = 2**63 - 1  # the largest id SQLite stores: a larger int is no job's
# Station settings that need a fresh telemetry monitor when they change.
TELEMETRY_KEYS = ("backend", "sample_interval", "grid_intensity", "mig")

Args = dict[str, Any]
Reply = dict[str, Any]


@dataclass(frozen=True)
class EngineParts:
    """The collaborators the handlers hand work to, and the engine's own facts."""

    home: Home
    store: Store
    station: CurrentStation
    queue: JobQueue
    attempts: Attempts
    control: JobControl
    scheduler: Scheduler
    learning: StationLearning
    telemetry: TelemetrySink
    mps: MpsWatch
    mig: MigControl
    loaders: LoaderSupervisor
    metrics: MetricsExporter
    events: EventPublisher
    due: PlacementDue
    tracking: Tracking  # MLflow runs: their stores' health, a job's run
    slurm: SlurmBackend  # jobs submitted to a Slurm cluster
    started_at: float
    cores: int
    stop: Callable[[], None]  # ends the engine's loop
    offloop: OffLoop  # where a handler's slow work runs (engine/offloop.py)
    # Who may do what (engine/access.py): a personal engine's callers are all admins.
    access: Access = field(default_factory=Access.personal)
    # How long requests and periodic steps held the loop (engine/loop_timing.py).
    loop: LoopTiming = field(default_factory=LoopTiming)


class RequestHandlers:
    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts
        self._jobs_root = str(parts.home.jobs_dir)
        self.table: dict[str, Callable[[Args, Caller], Reply | Later[Any]]] = {
            "ping": self.ping,
            "status": self.status,
            "submit": self.submit,
            "check_submit": self.check_submit,
            "jobs": self.jobs,
            "show": self.show,
            "log": self.log,
            "cancel": self.cancel,
            "hold": self.hold,
            "release": self.release,
            "priority": self.priority,
            "requeue": self.requeue,
            "configure": self.configure,
            "check_configure": self.check_configure,
            "shutdown": self.shutdown,
            "telemetry": self.telemetry,
            "datasets": self.datasets,
            "mig_plan": self.mig_plan,
            "mig_apply": self.mig_apply,
            "model_show": self.model_show,
            "model_observe": self.model_observe,
            "model_reset": self.model_reset,
        }

    def handle(self, raw: bytes, caller: Caller) -> bytes | Pending:
        """One request's reply: its result, or an error with its code and message. `caller` is
        who sent it, as the kernel says (the control socket's peer credentials). A handler
        whose work may wait answers `Later`: the reply then comes through the `Pending`."""
        request_id = None
        started, op = time.perf_counter(), "invalid"  # how long it held the loop, per op
        try:
            request = protocol.decode_request(raw)
            request_id = request.id
            handler = self.table.get(request.op)
            op = request.op if handler is not None else "unknown"
            if handler is None:
                raise ProtocolError(
                    protocol.UNKNOWN_OP,
                    f"unknown operation {request.op!r}; known: {', '.join(sorted(self.table))}",
                )
            result = handler(request.args, caller)
            if isinstance(result, Later):
                return self._pending(request_id, caller, result, op)
            return protocol.encode_result(request_id, result)
        except Exception as exc:
            return _error_reply(request_id, exc)
        finally:
            self.parts.loop.request(op, time.perf_counter() - started, caller.uid)

    def _pending(self, request_id: Any, caller: Caller, later: Later[Any], op: str) -> Pending:
        def start(post: Callable[[bytes], None]) -> None:
            def run(step: Later[Any]) -> None:
                def done(result: Any, error: BaseException | None) -> None:
                    started = time.perf_counter()  # `finish` holds the loop too: counted as op
                    try:
                        if error is not None:
                            post(_error_reply(request_id, error))
                            return
                        try:
                            reply = step.finish(result)
                        except Exception as exc:
                            post(_error_reply(request_id, exc))
                            return
                        if isinstance(reply, Later):  # a next step off the loop (a Slurm submit)
                            run(reply)
                        else:
                            post(protocol.encode_result(request_id, reply))
                    finally:
                        self.parts.loop.request(op, time.perf_counter() - started, caller.uid)

                try:
                    self.parts.offloop.submit(caller.uid, step.what, step.work, done, step.bound_s)
                except Busy as exc:
                    post(protocol.encode_error(request_id, protocol.REFUSED, str(exc)))

            run(later)

        return Pending(start)

    # ---------------------------------------------------------------- engine
    def ping(self, _args: Args, _caller: Caller) -> Reply:
        return {"pid": os.getpid(), "version": __version__, "protocol": protocol.PROTOCOL_VERSION}

    def status(self, args: Args, caller: Caller) -> Reply | Later[Statuses]:
        """The engine, the station and its loaders; `fresh_loaders`: the producers asked now,
        off the loop (one that does not answer is waited for up to a second), the reply built
        once they have answered."""
        loaders = self.parts.loaders
        if args.get("fresh_loaders") and loaders.producers:

            def finish(statuses: Statuses) -> Reply:
                loaders.apply_status(statuses)
                return self._status(caller)

            return Later(
                loaders.ask_status(),
                finish,
                loaders.status_bound_s(),
                "asking the shared loaders for their status",
            )
        return self._status(caller)

    def _status(self, caller: Caller) -> Reply:
        parts = self.parts
        view = parts.scheduler.station_view()
        monitor = parts.telemetry.monitor
        config = parts.station.config
        faults = [fault.to_dict() for fault in parts.mps.fault_list()]
        return {
            "pid": os.getpid(),
            "version": __version__,
            "protocol": protocol.PROTOCOL_VERSION,
            "home": str(parts.home.root),
            "started_at": parts.started_at,
            "station": {
                **config.view(),
                "effective_backend": monitor.backend.name,
                "simulated": monitor.simulated,
                "gpu_problem": view.gpu_problem,
                "effective_slots": config.effective_slots,
                "cores": parts.cores,
                "gpus": view.gpu_count,
                "mps": {"available": parts.mps.available, "faults": faults},
                "metrics_url": parts.metrics.url,
                "metrics_problem": parts.metrics.problem,
            },
            "slots": {"total": len(view.slots), "busy": len(view.busy_slots)},
            "gpus": {
                "total": view.gpu_count,
                "busy": len(view.busy_gpus),
                "lost": len(view.lost_gpus),
            },
            "counts": parts.store.counts(),
            "loaders": parts.loaders.summary(),
            "users": self._user_shares(),
            "station_changes": [
                event.to_dict()
                for event in parts.store.events_of_kind(STATION_EVENT, STATION_CHANGES_SHOWN)
            ],
            "tracking": parts.tracking.health_list(lambda uid: self._sees_secrets(caller, uid)),
            "loop": parts.loop.summary(),
        }

    def _user_shares(self) -> list[Reply]:
        """Each user with recent usage, running GPUs or waiting jobs: what fair share weighs."""
        parts = self.parts
        usage = parts.scheduler.usage_by_user()
        running = parts.scheduler.running_gpus_by_user()
        waiting: dict[int, int] = {}
        for job in parts.queue.ordered():
            waiting[job.owner.uid] = waiting.get(job.owner.uid, 0) + 1
        uids = sorted(set(usage) | set(running) | set(waiting), key=lambda u: usage.get(u, 0.0))
        return [
            {
                "user": user_name(uid),
                "uid": uid,
                "usage_gpu_h": round(usage.get(uid, 0.0), 6),
                "running_gpus": running.get(uid, 0),
                "waiting": waiting.get(uid, 0),
            }
            for uid in uids
        ]

    def shutdown(self, _args: Args, caller: Caller) -> Reply:
        self._need_admin(caller, "stop the engine")
        self.parts.stop()
        return {"running_attempts": len(self.parts.attempts)}

    def configure(self, args: Args, caller: Caller) -> Reply:
        """{"station": a [station] table}: weigh it key by key (engine/reconfigure.py). Only
        the keys it names count; an admin's differing keys are applied, each recorded as an
        event; anyone else's are reported as not applied (never an error: a profile's run goes
        on with the station as it is). Returns the config in force, `changed`, and the
        `changes` and `not_applied`, each with its message."""
        parts = self.parts
        old = parts.station.config
        weighed = self._weigh(args, caller)
        try:
            policy = make_policy(weighed.config.policy)
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None
        for item in weighed.not_applied:
            log.info("station setting from %s %s", caller.name, item.message)
        config = weighed.config
        changes = list(weighed.changes)
        if changes:
            for change in changes:
                message = f"station: {change.message} (by {caller.name})"
                log.info("%s", message)
                parts.store.add_event(STATION_EVENT, message)
            telemetry_changed = any(getattr(config, k) != getattr(old, k) for k in TELEMETRY_KEYS)
            parts.station.replace(config)
            parts.scheduler.policy = policy
            if telemetry_changed:
                parts.telemetry.restart()
            if config.metrics_listen != old.metrics_listen:
                changes = [
                    self._metrics_moved(c) if c.key == "metrics_listen" else c for c in changes
                ]
            parts.due.mark()
        return _settings_reply(config, changes, weighed.not_applied, changed=bool(changes))

    def _settings_refusal(self, caller: Caller) -> str | None:
        """Why `caller` may change no station setting; None for an admin."""
        access = self.parts.access
        if access.is_admin(caller):
            return None
        return f"only {access.admin_role} changes station settings"

    def _weigh(self, args: Args, caller: Caller) -> reconfigure.Reconfiguration:
        """The [station] table of `args` weighed against the config in force, for `caller`:
        what `configure` applies, and what `check_configure` says it would."""
        parts = self.parts
        queued_gpu_jobs = sum(1 for job in parts.queue.ordered() if job.spec.gpus)
        try:
            return reconfigure.weigh(
                parts.station.config,
                args.get("station"),
                refusal=self._settings_refusal(caller),
                queued_gpu_jobs=queued_gpu_jobs,
            )
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None

    def check_configure(self, args: Args, caller: Caller) -> Reply:
        """`configure`'s weighing without applying anything: what the [station] table would
        change and what would not be applied (a profile run that leaves the station as it is
        says what differs). An op of its own, not a flag on `configure`, so that an engine
        from before it answers `unknown_op` instead of applying the table."""
        weighed = self._weigh(args, caller)
        config = self.parts.station.config
        return _settings_reply(config, weighed.changes, weighed.not_applied, changed=False)

    def _simulated(self) -> str | None:
        """The station's backend when its GPUs are simulated (`sim:MODEL`), for replies that
        must say so; None on a real (or CPU-only) station."""
        monitor = self.parts.telemetry.monitor
        return monitor.backend.name if monitor.simulated else None

    def _metrics_moved(self, change: reconfigure.SettingChange) -> reconfigure.SettingChange:
        """Start, move or stop the metrics endpoint; the change says what came of it (a port in
        use is said here, in engine.log and as an engine event, and the engine goes on)."""
        metrics = self.parts.metrics
        problem = metrics.apply()
        if problem is not None:
            note = problem.removeprefix("metrics: ")
        elif metrics.url is not None:
            note = f"serving {metrics.url}"
        else:
            note = "metrics no longer served"
        return dataclasses.replace(change, note=note)

    def datasets(self, args: Args, caller: Caller) -> Reply:
        """Register datasets' shared-loader settings (a profile's [datasets] tables); an empty
        list only lists the registered ones. Registering a new dataset or new settings is an
        admin's: the engine's producer imports the factory module and reads the data as the
        engine's user (root, on a system engine). Anyone may repeat what is registered."""
        loaders = self.parts.loaders
        raw = args.get("datasets")
        if not isinstance(raw, list):
            raise ProtocolError(protocol.INVALID_ARGS, "'datasets' must be a list")
        try:
            specs = [DatasetSpec.from_dict(d) for d in raw]
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, f"datasets: {exc}") from None
        new = [spec.name for spec in specs if loaders.specs.get(spec.name) != spec]
        if new:
            self._need_admin(
                caller, f"register shared-loader datasets or change their settings ({new[0]})"
            )
        try:
            loaders.register(specs)
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, f"datasets: {exc}") from None
        self.parts.store.set_setting("datasets", [s.to_dict() for s in loaders.specs.values()])
        return {
            "datasets": sorted(loaders.specs),
            "specs": [s.to_dict() for _, s in sorted(loaders.specs.items())],
        }

    def telemetry(self, args: Args, _caller: Caller) -> Reply:
        """The latest station view (None before the first sample) and, on request, the last
        `history` points of each GPU's series.

        `energy_today_j` is {GPU index: joules} (the index a string on the wire, as JSON keys
        are): what each GPU used since local midnight, from the energy points the store keeps
        (one per STORE_SAMPLES_EVERY_S window, so across engine restarts) plus what the monitor
        counted since the last of them. It counts only while an engine samples, and a window
        that spans midnight counts for the new day."""
        telemetry = self.parts.telemetry
        points = _whole_number(args.get("history", 0), 0, MAX_HISTORY_POINTS)
        if points is None:
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'history' must be 0 to {MAX_HISTORY_POINTS} points"
            )
        telemetry.ingest()  # anything the sampler delivered since the loop last looked
        snapshot = telemetry.snapshot()
        history = list(telemetry.monitor.history)[-points:] if points else []
        return {
            "snapshot": snapshot,
            "history": history,
            "energy_today_j": telemetry.energy_today(),
        }

    # ------------------------------------------------------------------ jobs
    def submit(self, args: Args, caller: Caller) -> Reply | Later[Any]:
        specs, base_env = self._accepted(args, caller)
        if specs and specs[0].cluster is not None:
            return self._submit_to_slurm(specs, base_env, caller)
        records = self.parts.store.submit(specs, base_env, owner=caller.identity)
        for record in records:
            self.parts.queue.add(record)
            self.parts.events.job(record.id, "submitted", record)
        self.parts.due.mark()
        reply: Reply = {"ids": [r.id for r in records], "simulated": self._simulated()}
        changes = self._waits_for_change(records)
        if changes:
            reply["waits_for_change"] = changes
        return reply

    def _waits_for_change(self, records: Sequence[JobRecord]) -> dict[int, str]:
        """The new GPU jobs that can start only once the station changes (an admin leaving MIG
        mode, a lost GPU coming back, a GPU set in MIG mode under policy mig), with the policy's
        reason: the submitter hears it at once, not from `queue` later. Judged once per shape
        (what the policy weighs of a new job: its GPUs and hints), for at most CHANGE_CHECKS
        shapes (a huge sweep is not judged job by job on the loop); a job of a shape judged is
        always told."""
        gpu_jobs = [r for r in records if r.spec.gpus]
        if not gpu_jobs or not self.parts.telemetry.monitor.opened:
            return {}
        view = self.parts.scheduler.station_view(queued_demands=False)
        policy = self.parts.scheduler.policy
        reasons: dict[tuple[int, float | None, float | None], str] = {}
        changes = {}
        for record in gpu_jobs:
            spec = record.spec
            shape = (spec.gpus, spec.memory_gb, spec.sm_pct)
            reason = reasons.get(shape)
            if reason is None:
                if len(reasons) >= CHANGE_CHECKS:
                    continue
                reason = reasons[shape] = policy.change_needed(record, view)
            if reason:
                changes[record.id] = reason
        return changes

    def _submit_to_slurm(
        self, specs: list[JobSpec], base_env: dict[str, str] | None, caller: Caller
    ) -> Later[Prepared]:
        """A Slurm submit in the backend's three steps (gpudesk.engine.backends.slurm): its
        Slurm commands run off the loop, so a slow cluster keeps only its submitter waiting."""
        backend, owner = self.parts.slurm, caller.identity
        backend.check_after(specs)
        prepare = backend.prepared(specs, base_env, owner)

        def prepared(ready: Prepared) -> Later[Sent]:
            ids, work, bound = backend.record_intent(specs, base_env, owner, ready)

            def sent(outcome: Sent) -> Reply:
                records = backend.record_sent(ids, outcome)
                for record in records:
                    self.parts.events.job(record.id, "submitted to Slurm", record)
                return {"ids": ids}

            return Later(work, sent, bound, f"submitting job(s) {ids[0]}-{ids[-1]} to Slurm")

        return Later(prepare, prepared, PREPARE_BOUND_S, "asking the Slurm cluster what it has")

    def check_submit(self, args: Args, caller: Caller) -> Reply | Later[Prepared]:
        """`submit`'s checks without queueing anything: whether these jobs would be accepted.
        An op of its own, not a flag on `submit`, so that an engine from before it answers
        `unknown_op` instead of queueing the jobs."""
        specs, base_env = self._accepted(args, caller)
        if specs and specs[0].cluster is not None:
            backend = self.parts.slurm
            backend.check_after(specs)
            prepare = backend.prepared(specs, base_env, caller.identity)
            return Later(
                prepare, lambda _ready: {"ids": []}, PREPARE_BOUND_S, "asking the Slurm cluster"
            )
        return {"ids": []}

    def _accepted(self, args: Args, caller: Caller) -> tuple[list[JobSpec], dict[str, str] | None]:
        """The jobs of a submit request and the submitter's environment, once every check
        passed; raises ProtocolError naming the first that failed."""
        raw_jobs = _job_list(args, "jobs")
        specs: list[JobSpec] = []
        for index, raw in enumerate(raw_jobs):
            try:
                specs.append(JobSpec.from_dict(raw))
            except SpecError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"jobs[{index}].{exc}") from None
            for job_id in specs[-1].after:
                if job_id < 0:  # -k: the k-th job of this request, which must come before it
                    if -job_id > index:
                        raise ProtocolError(
                            protocol.INVALID_ARGS,
                            f"jobs[{index}].after: {job_id} names job {-job_id} of this request; "
                            "a job can run only after jobs before it in the request",
                        )
                elif not self.parts.store.job_exists(job_id):
                    raise ProtocolError(
                        protocol.UNKNOWN_JOB,
                        f"jobs[{index}].after: there is no job {job_id} to run after "
                        "(gpudesk queue --all lists the jobs)",
                    )
        base_env = args.get("env")
        if base_env is not None:
            try:
                base_env = check_env(base_env, inherited=True)
            except ValueError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"env: {exc}") from None
        self._check_one_place(specs)
        self._check_station_fits([s for s in specs if s.cluster is None])
        self._check_tracking(specs)
        self._check_priorities(specs, caller)
        self._check_queued_limit(caller, len(specs))
        return specs, base_env

    @staticmethod
    def _check_one_place(specs: list[JobSpec]) -> None:
        """One request's jobs all run on the station or all on one cluster: a run is followed,
        and refused, as a whole."""
        places = {spec.cluster for spec in specs}
        if len(places) > 1:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "one request's jobs go to one place: some of these name a Slurm cluster and "
                "some do not (or name another); submit them separately",
            )

    @staticmethod
    def _check_tracking(specs: list[JobSpec]) -> None:
        """Refuse, whole, jobs tracked to a store this engine's Python cannot reach (the mlflow
        extra is missing): each would run untracked while the user believes otherwise."""
        for uri in sorted({s.tracking.mlflow_uri for s in specs if s.tracking is not None}):
            missing = missing_for(uri)
            if missing:
                raise ProtocolError(protocol.REFUSED, missing)

    def _check_station_fits(self, specs: list[JobSpec]) -> None:
        """Refuse, at once and whole, jobs this station could never run, whatever an admin
        changes on its GPUs: more GPUs than it has, more memory than its largest GPU offers
        (placement.policy.gpu_job_impossible). They could only wait and then fail. A job that
        fits only after such a change (leaving MIG mode on a GPU) is accepted and waits, its
        reason naming the change (placement.station_fit). Not while the GPUs cannot be read
        (they may come back): placement fails an impossible job then."""
        if not any(spec.gpus for spec in specs):
            return
        monitor = self.parts.telemetry.monitor
        if not monitor.opened:
            return  # never waited for: the engine's one loop serves every client
        view = self.parts.scheduler.station_view(queued_demands=False)
        kept_free = self.parts.scheduler.policy.kept_free_mib
        for spec in specs:
            if not spec.gpus:
                continue
            need = spec.memory_gb * MIB_PER_GB if spec.memory_gb is not None else 0.0
            impossible = gpu_job_impossible(spec.gpus, need, view, kept_free)
            if impossible:
                others = len(specs) - 1
                raise ProtocolError(
                    protocol.INVALID_ARGS,
                    f"job {safe_text(spec.name)!r} {impossible}. It could never "
                    "run here, so nothing was submitted"
                    + (
                        f" (nor the {others} other job{'s' if others != 1 else ''})"
                        if others
                        else ""
                    )
                    + ".",
                )

    def _check_queued_limit(self, caller: Caller, adding: int) -> None:
        """Refuse a submit that would leave the caller more queued jobs than `[station]
        max_queued_per_user` (engine/user_limits.py says what counts). All of a request's jobs
        or none."""
        queued = user_limits.queued_count(self.parts.queue, caller.uid)
        refusal = user_limits.queued_refusal(
            self.parts.station.config.max_queued_per_user,
            caller.name,
            queued,
            adding,
            "submitting",
            "Nothing was submitted",
        )
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)

    def _check_priorities(self, specs: list[JobSpec], caller: Caller) -> None:
        """Refuse, whole, a member's submit that asks a priority above the default: only an
        admin may raise one (engine/user_limits.py)."""
        if self.parts.access.is_admin(caller):
            return
        for index, spec in enumerate(specs):
            refusal = user_limits.priority_refusal(
                user_limits.DEFAULT_PRIORITY, spec.priority, self.parts.access.admins
            )
            if refusal:
                raise ProtocolError(
                    protocol.REFUSED,
                    f"jobs[{index}] ({safe_text(spec.name)!r}).priority: {refusal} "
                    "Nothing was submitted.",
                )

    def jobs(self, args: Args, caller: Caller) -> Reply:
        """One page of jobs, oldest first, at most `limit` (and at most JOBS_PAGE_CAP): from
        the oldest, or after `after_id`; with `limit` alone the newest, or with `before_id` the
        newest before it. `more` says rows match beyond the page, and `after_id` or
        `before_id` where to go on; `total` (with `count`) how many match; `damaged` the rows
        skipped because the store cannot read them. Archived jobs only with `archived`, or
        when named by `ids`."""
        states = None
        if args.get("states") is not None:
            try:
                states = [JobState(s) for s in args["states"]]
            except (TypeError, ValueError):
                raise ProtocolError(
                    protocol.INVALID_ARGS,
                    f"'states' must list states among {', '.join(s.value for s in JobState)}",
                ) from None
        group = args.get("group")
        if group is not None and not (isinstance(group, str) and is_text(group)):
            raise ProtocolError(protocol.INVALID_ARGS, "'group' must be a string (UTF-8 text)")
        ids = args.get("ids")
        if ids is not None and (
            not isinstance(ids, list)
            or not all(_whole_number(i, -MAX_ROW_ID, MAX_ROW_ID) is not None for i in ids)
        ):
            raise ProtocolError(protocol.INVALID_ARGS, "'ids' must be a list of job ids")
        if ids is not None and len(ids) > protocol.MAX_LISTING_IDS:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"'ids': at most {protocol.MAX_LISTING_IDS} job ids per request, found "
                f"{len(ids)}; ask for the rest in further requests (the client does)",
            )
        limit = args.get("limit")
        if limit is not None and _whole_number(limit, 1, MAX_ROW_ID) is None:
            raise ProtocolError(protocol.INVALID_ARGS, "'limit' must be a positive integer")
        cursors = {}
        for key in ("after_id", "before_id"):
            if args.get(key) is not None:
                if _whole_number(args[key], 0, MAX_ROW_ID) is None:
                    raise ProtocolError(protocol.INVALID_ARGS, f"'{key}' must be a job id")
                cursors[key] = args[key]
        if len(cursors) > 1:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "give 'after_id' (oldest first) or 'before_id' (newest first), not both",
            )
        owner = _user_arg(args.get("user"))
        # newest first: with `before_id`, or with `limit` and no `after_id` (the newest N)
        descending = "before_id" in cursors or (limit is not None and "after_id" not in cursors)
        page = self.parts.store.jobs_page(
            limit=min(limit or protocol.JOBS_PAGE_CAP, protocol.JOBS_PAGE_CAP),
            states=states,
            group=group,
            ids=ids,
            owner_uid=owner,
            after_id=cursors.get("after_id"),
            before_id=cursors.get("before_id"),
            newest=descending,
            archived=bool(args.get("archived")),
            count=bool(args.get("count")),
        )
        jobs = page.jobs
        live_by_job = self.parts.attempts.by_job()
        # one query for every Slurm job listed, not one per job: a run can list thousands
        on_slurm = self.parts.store.slurm_jobs([j.id for j in jobs if j.spec.cluster is not None])
        result = [
            self.job_reply(job, caller, live_by_job.get(job.id), on_slurm.get(job.id))
            for job in jobs
        ]
        self._add_wait_reasons(jobs, result, on_slurm)
        if args.get("usage"):
            usage = self._usage([job.id for job in jobs])
            allocations = self.parts.store.allocations([job.id for job in jobs], time.time())
            for job, data in zip(jobs, result, strict=True):
                data["usage"] = usage.get(job.id)
                data["last_slot"], data["gpu_s"] = allocations.get(job.id, (None, 0.0))
                row = on_slurm.get(job.id)
                if row is not None and job.started_at is not None:
                    # Slurm allocated it: the GPUs it asked for, over its wall time
                    data["last_slot"] = slurm_views.slot(row)
                    ended = job.ended_at or time.time()
                    data["gpu_s"] = job.spec.gpus * (ended - job.started_at)
        reply: Reply = {"jobs": result, "more": page.more, "simulated": self._simulated()}
        if page.more:
            reply["before_id" if descending else "after_id"] = page.cursor
        if page.total is not None:
            reply["total"] = page.total
        if page.damaged:
            reply["damaged"] = [{"id": d.id, "reason": d.reason} for d in page.damaged]
        return reply

    def show(self, args: Args, caller: Caller) -> Reply:
        parts = self.parts
        job = self._find(args.get("job"), "job")
        row = parts.store.slurm_job(job.id) if job.spec.cluster is not None else None
        result: Reply = {
            "job": self.job_reply(job, caller, parts.attempts.by_job().get(job.id), row),
            "attempts": [self.attempt_reply(a) for a in parts.store.attempts(job.id)],
            "events": [e.to_dict() for e in parts.store.events(job.id)],
            "waiting": None,
            "usage": self._usage([job.id]).get(job.id),
            "tracking": parts.tracking.job_view(job, self._sees_secrets(caller, job.owner.uid)),
        }
        self._add_wait_reasons([job], [result["job"]], {job.id: row} if row else {})
        if row is not None and job.attempts:  # Slurm ran it: its one attempt, as Slurm tells
            result["attempts"] = [slurm_views.attempt(job, row)]
        if job.state is JobState.QUEUED and job.held:
            result["waiting"] = f"held: it will not start until released (gpudesk release {job.id})"
        elif job.state is JobState.QUEUED and row is not None:
            result["waiting"] = slurm_views.explain_wait(row)
        elif job.state is JobState.QUEUED:
            result["waiting"] = parts.scheduler.explain_wait(job)
        if args.get("env"):
            # The environment can hold secrets: the owner's and the admins' to read only.
            refusal = parts.access.job_refusal(caller, job, "see the environment of")
            if refusal:
                raise ProtocolError(protocol.REFUSED, refusal)
            result["env"] = {**parts.store.base_env(job.id), **job.spec.env}
        if args.get("series"):
            # what `gpudesk show --plot` draws; anyone may read it, as the usage
            result["series"] = parts.telemetry.job_series(job.id).to_dict()
        return result

    def log(self, args: Args, caller: Caller) -> Reply | Later[slurm_logs.LogRead]:
        """{"job", "attempt"?, "offset"?, "max_bytes"?}: at most `max_bytes` of an attempt's
        output (default: its latest) from stream position `offset`, read by the engine, for a
        client that may not read the file itself (an admin reading another user's job on a
        system engine; the owner where the state folder is not theirs to enter). The owner's
        and the admins' only (engine/access.py). `data` is base64; `skipped` the bytes before it
        that were rotated away; `next` the position after it; `end` the stream's end now."""
        parts = self.parts
        job = self._find(args.get("job"), "job")
        refusal = parts.access.job_refusal(caller, job, "read the logs of")
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)
        number = args.get("attempt", job.attempts)
        if job.attempts == 0:
            raise ProtocolError(protocol.INVALID_ARGS, f"job {job.id} has not started yet")
        if _whole_number(number, 1, job.attempts) is None:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"'attempt': job {job.id} has attempts 1 to {job.attempts}",
            )
        offset = args.get("offset", 0)
        if _whole_number(offset, 0, MAX_ROW_ID) is None:
            raise ProtocolError(
                protocol.INVALID_ARGS, "'offset' must be a stream position (0 or more)"
            )
        limit = args.get("max_bytes", joblog.CHUNK_BYTES)
        if _whole_number(limit, 0, joblog.CHUNK_BYTES) is None:
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'max_bytes' must be from 0 to {joblog.CHUNK_BYTES}"
            )
        path = parts.home.attempt_dir(job.id, number) / runner.LOG_FILE
        # whose files the log and its parts must be: its owner's where the job ran as them,
        # else the engine's own (gpudesk.joblog reads them as files a user may have planted)
        owner_uid = runner.log_owner_uid(job.owner)
        row = parts.store.slurm_job(job.id) if job.spec.cluster is not None else None
        spelled_out = caller.uid != job.owner.uid

        def reply(data: bytes, skipped: int, position: int, end: int) -> Reply:
            if spelled_out:
                # someone else's output (an admin reading it) never drives their terminal: its
                # control characters are spelled out (gpudesk.text); a \xc2 that ends the piece
                # waits for the next one, which may make it a C1 control
                if ends_in_c1_lead(data):
                    data, position = data[:-1], position - 1
                data = printable_bytes(data)
            return {
                "job": job.id,
                "attempt": number,
                "data": base64.b64encode(data).decode("ascii"),
                "skipped": skipped,
                "next": position,
                "end": end,
            }

        if row is not None and acts_for_other(job.owner):
            # in her folder, every name of whose path is hers: read by a process run as her,
            # off the loop (the process may take up to slurm_logs.READ_S)
            output, owner = row.output, job.owner

            def read_hers() -> slurm_logs.LogRead:
                try:
                    return slurm_logs.read_as_owner(owner, output, offset, limit)
                except slurm_logs.LogUnreadable as exc:
                    raise ProtocolError(protocol.REFUSED, f"job {job.id}'s log: {exc}") from None

            return Later(
                read_hers,
                lambda read: reply(read.data, 0, offset + len(read.data), read.end),
                slurm_logs.READ_S + 5.0,
                f"reading job {job.id}'s log as {job.owner.name}",
            )
        if row is not None:
            path, owner_uid = Path(row.output), job.owner.uid
        # On the loop, never waiting on the log's lock (wait=False): a job can hold its own
        # output.log locked for good, and a wait here stalled every client 2 x 3 s per request
        # (issue 36). Reading it is safe unlocked: the loop is what rotates it (gpudesk.joblog).
        # Not moved off the loop: the files are opened O_NONBLOCK and regular, so a read of
        # at most `limit` bytes does not wait on anyone.
        stream = joblog.LogStream(path, offset, owner_uid, wait=False)
        try:
            piece = stream.read(limit) if limit else None
            end = joblog.stream_end(path, owner_uid, wait=False)
        except UntrustedFileError as exc:
            raise ProtocolError(protocol.REFUSED, joblog.refusal(job.id, exc)) from None
        data = piece.data if piece else b""
        skipped = piece.skipped if piece else 0
        return reply(data, skipped, stream.position, end)

    @staticmethod
    def attempt_reply(attempt: AttemptRecord) -> Reply:
        """An attempt on the wire: its record, and what contains its processes (its wrapper
        says, in wrapper.json)."""
        data = attempt.to_dict()
        wrapper = runner.read_wrapper(attempt.dir)
        if wrapper is not None and wrapper.containment:
            data["containment"] = wrapper.containment
        return data

    def _sees_secrets(self, caller: Caller, owner_uid: int) -> bool:
        """Whether `caller` sees the secrets in the URIs of `owner_uid`'s jobs (a tracking
        store's password): the owner and the admins do, as they may read the job's environment;
        anyone else sees them redacted (gpudesk.redact)."""
        return caller.uid == owner_uid or self.parts.access.is_admin(caller)

    def job_reply(
        self,
        job: JobRecord,
        caller: Caller,
        live: LiveAttempt | None,
        slurm: SlurmRow | None = None,
    ) -> Reply:
        """A job on the wire, as `caller` may see it: its record, and while it runs, where
        (`slot`, a label; `gpus`, `mode` and `mig_slice`, the same as data); a Slurm job's
        `slurm` row (the store's, which the caller reads, in one query for a whole listing)
        gives its Slurm part."""
        data = job.to_dict()
        tracking = data["spec"].get("tracking")
        if tracking and not self._sees_secrets(caller, job.owner.uid):
            tracking["mlflow_uri"] = redact_secrets(tracking["mlflow_uri"])
        data["slot"] = live.slot if live else None
        data["gpus"] = list(live.gpus) if live else []
        data["mode"] = live.mode if live else None
        data["mig_slice"] = live.mig_slice if live else None
        data["pgid"] = live.pid if live else None  # the attempt's process group, while it runs
        # home.attempt_dir's path, joined as text: pathlib's joins were a quarter of the time
        # a page of 200 jobs took to build on the loop
        data["log"] = (
            f"{self._jobs_root}/{job.id}/{job.attempts}/{runner.LOG_FILE}" if job.attempts else None
        )
        if slurm is not None:
            data.update(slurm_views.job_fields(job, slurm))
        # the shared loader it reads: its dataset's, or the dataset's variant for its selection
        data["loader"] = self.parts.loaders.loader_for(job.spec.dataset, job.spec.selection)
        return data

    def _add_wait_reasons(
        self, jobs: list[JobRecord], replies: list[Reply], on_slurm: dict[int, SlurmRow]
    ) -> None:
        """Each queued job's `wait_reason`, the short code `gpudesk queue` shows as squeue
        does (Scheduler.wait_codes; a Slurm job's is Slurm's own), for the whole page at once."""
        queued = [job for job in jobs if job.state is JobState.QUEUED]
        codes = self.parts.scheduler.wait_codes(job.id for job in queued)
        for job, data in zip(jobs, replies, strict=True):
            if job.state is not JobState.QUEUED:
                continue
            row = on_slurm.get(job.id)
            if row is not None:
                data["wait_reason"] = slurm_views.wait_code(row)
            else:
                data["wait_reason"] = "JobHeldUser" if job.held else codes.get(job.id)

    def _need_admin(self, caller: Caller, what: str) -> None:
        """Refuse a station-wide action (`what`: "apply MIG layouts") to a caller who is no
        admin, naming the rule."""
        refusal = self.parts.access.admin_refusal(caller, what)
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)

    def _usage(self, job_ids: list[int]) -> dict[int, dict[str, Any]]:
        return self.parts.telemetry.job_usage(job_ids, self.parts.attempts.attempt_numbers())

    def _find(self, ref: Any, field: str) -> JobRecord:
        """A job by id (int or digits) or by name (the newest job of that name); `field` names
        the argument in the error for a ref that is neither."""
        if isinstance(ref, bool) or not isinstance(ref, (int, str)) or ref == "":
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'{field}': a job is named by its id or its name"
            )
        if isinstance(ref, str) and ref.isascii() and ref.isdigit():  # "12", not "²"
            ref = int(ref) if len(ref) <= 19 else MAX_ROW_ID + 1  # int() stops at 4300 digits
        if isinstance(ref, int) and not -MAX_ROW_ID <= ref <= MAX_ROW_ID:
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'{field}': a job id is at most {MAX_ROW_ID}"
            )
        if isinstance(ref, str) and not is_text(ref):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"'{field}': a job name is UTF-8 text; {safe_text(ref)!r} holds bytes that are not",
            )
        return self.parts.control.find(ref)

    # ----------------------------------------------------------- job control
    def act_on_jobs(
        self,
        args: Args,
        caller: Caller,
        verb: str,
        action: Callable[[JobRecord], JobOutcome],
    ) -> Reply:
        """The shape of every job-control op: resolve all of `args["jobs"]` (ids or names)
        first, so one unknown job fails the request with none touched, then act on each job
        once, in the order given. A job the caller may not `verb` (not theirs, and they are no
        admin) is refused on its own: its outcome names the rule, the others go on. Returns
        {"results": [{"id", "name", "outcome", "ok"}]}."""
        jobs: dict[int, JobRecord] = {}
        for index, ref in enumerate(_job_list(args, "jobs")):
            job = self._find(ref, f"jobs[{index}]")
            jobs.setdefault(job.id, job)
        results = []
        for job in jobs.values():
            refusal = self.parts.access.job_refusal(caller, job, verb)
            outcome = JobOutcome(refusal, ok=False) if refusal else action(job)
            results.append(
                {"id": job.id, "name": job.name, "outcome": outcome.message, "ok": outcome.ok}
            )
        return {"results": results}

    def cancel(self, args: Args, caller: Caller) -> Reply:
        grace = args.get("grace", DEFAULT_CANCEL_GRACE_S)
        if (
            isinstance(grace, bool)
            or not isinstance(grace, (int, float))
            or not 0 <= grace <= MAX_CANCEL_GRACE_S
        ):
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'grace' must be 0 to {MAX_CANCEL_GRACE_S:g} seconds"
            )
        control = self.parts.control
        return self.act_on_jobs(args, caller, "cancel", lambda job: control.cancel(job, grace))

    def hold(self, args: Args, caller: Caller) -> Reply:
        """{"jobs": [refs]}: hold queued jobs. The placement policy never starts a held job; it
        keeps its place in the queue. Outcomes: "held", "already held", or (ok false) why
        not, e.g. "running: only a queued job can be held"."""
        return self.act_on_jobs(args, caller, "hold", self.parts.control.hold)

    def release(self, args: Args, caller: Caller) -> Reply:
        """{"jobs": [refs]}: release held jobs. Outcomes: "released", "not held" (also for a
        job that is not queued, e.g. "not held (running)")."""
        return self.act_on_jobs(args, caller, "release", self.parts.control.release)

    def priority(self, args: Args, caller: Caller) -> Reply:
        """{"jobs": [refs], "priority": int} sets the priority (submit's range), or
        {"jobs": [refs], "delta": int} moves it (+1 raises, -1 lowers; kept in the range).
        A queued job moves in the queue at once; a running or finished one keeps the new
        priority for a retry or a requeue, and its outcome says it changes nothing now."""
        control = self.parts.control
        priority, delta = args.get("priority"), args.get("delta")
        if (priority is None) == (delta is None):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "give either 'priority' (the new value) "
                "or 'delta' (+1 raises, -1 lowers), not both",
            )
        if priority is not None:
            try:
                wanted = check_priority(priority)
            except ValueError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"'priority': {exc}") from None
            return self.act_on_jobs(
                args, caller, "re-prioritize", lambda job: self._reprioritize(caller, job, wanted)
            )
        low, high = PRIORITY_RANGE
        step = _whole_number(delta, -(high - low), high - low)
        if step is None:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"'delta' must be a whole number from {low - high} to {high - low}, e.g. 1 or -1",
            )
        return self.act_on_jobs(
            args,
            caller,
            "re-prioritize",
            lambda job: self._reprioritize(caller, job, control.moved_priority(job, step)),
        )

    def _reprioritize(self, caller: Caller, job: JobRecord, wanted: int) -> JobOutcome:
        """Set `job`'s priority to `wanted`, unless the caller is no admin and that raises it
        above the default (engine/user_limits.py): then the outcome is the refusal."""
        if not self.parts.access.is_admin(caller):
            refusal = user_limits.priority_refusal(
                job.spec.priority, wanted, self.parts.access.admins
            )
            if refusal:
                return JobOutcome(refusal, ok=False)
        return self.parts.control.set_priority(job, wanted)

    def requeue(self, args: Args, caller: Caller) -> Reply:
        """{"jobs": [refs]}: put finished jobs (failed, cancelled, or succeeded to rerun them)
        back in the queue as the same job, with a fresh attempt budget; attempt numbers
        continue. Outcomes: "requeued", "already queued", or (ok false)
        "running: only a finished job can be requeued"."""
        return self.act_on_jobs(args, caller, "requeue", self._requeue)

    def _requeue(self, job: JobRecord) -> JobOutcome:
        """Requeue `job` unless that would leave its owner more queued jobs than `[station]
        max_queued_per_user` (whoever asks: the limit is the owner's); then the outcome is the
        refusal. Only a finished station job would enter the queue: the others' outcomes say
        why nothing happens."""
        control = self.parts.control
        if job.state.terminal and job.spec.cluster is None:
            refusal = user_limits.queued_refusal(
                self.parts.station.config.max_queued_per_user,
                job.user,
                user_limits.queued_count(self.parts.queue, job.owner.uid),
                1,
                "requeueing",
                f"Job {job.id} was not requeued",
            )
            if refusal:
                return JobOutcome(refusal, ok=False)
        return control.requeue(job)

    # ------------------------------------------------------------------- MIG
    def mig_plan(self, args: Args, _caller: Caller) -> Reply:
        """{"gpu": int | null}: the MIG plan of one or every MIG-capable GPU (MigPlan.to_dict):
        the layout the queue would want, the job each slice is for, the nvidia-smi commands
        applying it would run, whether the engine may apply it, or why not, and in "auto" what
        auto's own repartitioning predicts of it now (null where it would not weigh it)."""
        gpu = _mig_gpu_arg(args, required=False)
        try:
            plans = self.parts.mig.plans(gpu)
        except MigError as exc:
            raise _mig_protocol_error(exc) from None
        return {
            "plans": [{**p.to_dict(), "auto": auto} for p, auto in plans],
            "simulated": self.parts.telemetry.monitor.simulated,
        }

    def mig_apply(self, args: Args, caller: Caller) -> Reply:
        """{"gpu": int, "profiles": [str, ...], "confirm": true}: give an idle MIG-mode GPU this
        layout, destroying its instances, only where [station] mig_repartition allows it and
        only with confirm. A simulated station's `mig` table changes (telemetry and placement
        see the new slices); a real GPU is repartitioned through nvidia-smi. The queue is not
        touched. Never enables MIG mode or resets a GPU. An admin's only."""
        self._need_admin(caller, "apply MIG layouts")
        gpu = _mig_gpu_arg(args, required=True)
        assert gpu is not None
        profiles = args.get("profiles")
        if (
            not isinstance(profiles, list)
            or not profiles
            or not all(isinstance(p, str) and p.strip() for p in profiles)
        ):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "'profiles' must be a non-empty list of "
                'MIG profile names, e.g. ["3g.20gb", "2g.10gb"]',
            )
        confirm = args.get("confirm", False)
        if not isinstance(confirm, bool):
            raise ProtocolError(protocol.INVALID_ARGS, "'confirm' must be true or false")
        try:
            return self.parts.mig.apply(gpu, profiles, confirm).to_dict()
        except MigError as exc:
            raise _mig_protocol_error(exc) from None

    # ------------------------------------------------------- interference model
    def model_show(self, _args: Args, _caller: Caller) -> Reply:
        """The interference model's parameters for each GPU model on the station (and any
        other the store learned about), then the defaults (gpu_model ""), each with its
        prior, provenance and observations."""
        learning = self.parts.learning
        models = [
            {
                "gpu_model": gpu_model,
                "gpus": learning.gpus_of(gpu_model),
                "params": [_param_reply(p) for p in learning.describe(gpu_model)],
            }
            for gpu_model in [m for m in learning.gpu_models() if m]
        ]
        defaults = learning.describe("")
        models.append({"gpu_model": "", "gpus": [], "params": [_param_reply(p) for p in defaults]})
        monitor = self.parts.telemetry.monitor
        return {
            "backend": monitor.backend.name,
            "simulated": monitor.simulated,
            "observe_min_s": learning.min_s,
            "commands_with_rate_alone": len(learning.alone),
            "models": models,
        }

    def model_observe(self, args: Args, caller: Caller) -> Reply:
        """{"gpu_model": str, "observations": [observation], "source": "calibrated"|"learned"}:
        feed measured observations (`gpudesk calibrate`'s probes) to the learner, stored at
        once. Validated all first: one bad observation fails the request with none kept.
        An admin's only: the model places everyone's jobs."""
        self._need_admin(caller, "feed observations to the interference model")
        gpu_model = args.get("gpu_model")
        if not isinstance(gpu_model, str) or not gpu_model.strip() or not is_text(gpu_model):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "'gpu_model' must name the GPU model, as NVML does (\"NVIDIA A100-SXM4-40GB\")",
            )
        source = args.get("source", "calibrated")
        if source not in SOURCES:
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'source' must be one of {', '.join(SOURCES)}"
            )
        raw = args.get("observations")
        if not isinstance(raw, list) or not raw or len(raw) > MAX_OBSERVATIONS:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"'observations' must be a list of 1 to {MAX_OBSERVATIONS} observations",
            )
        try:
            observations = [
                observation_from_dict(o, f"observations[{i}]") for i, o in enumerate(raw)
            ]
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None
        learning = self.parts.learning
        moved: dict[str, int] = {}
        for name in learning.observe_many(gpu_model, observations, source):
            if name is not None:
                moved[name] = moved.get(name, 0) + 1
        return {
            "gpu_model": gpu_model,
            "accepted": sum(moved.values()),
            "ignored": len(observations) - sum(moved.values()),
            "moved": moved,
            "params": [_param_reply(p) for p in learning.describe(gpu_model)],
        }

    def model_reset(self, args: Args, caller: Caller) -> Reply:
        """{"confirm": true, "gpu_model": str | null}: forget what was learned and calibrated
        for one GPU model (or all): its parameters go back to the defaults. An admin's only."""
        self._need_admin(caller, "reset the interference model")
        gpu_model = args.get("gpu_model")
        if gpu_model is not None and not (isinstance(gpu_model, str) and is_text(gpu_model)):
            raise ProtocolError(
                protocol.INVALID_ARGS, "'gpu_model' must be a GPU model's name, or null for all"
            )
        if args.get("confirm") is not True:
            raise ProtocolError(
                protocol.REFUSED, "resetting the model drops what was learned: send confirm: true"
            )
        dropped = self.parts.learning.reset(gpu_model)
        message = f"interference model reset ({gpu_model or 'every GPU model'}): {dropped} dropped"
        log.info(message)
        self.parts.store.add_event("model", message)
        return {"gpu_model": gpu_model, "dropped": dropped}


def _error_reply(request_id: Any, exc: BaseException) -> bytes:
    """The error reply for what a handler (or its work off the loop) raised."""
    if isinstance(exc, ProtocolError):
        return protocol.encode_error(exc.request_id or request_id, exc.code, exc.message)
    if isinstance(exc, UnknownJob):
        return protocol.encode_error(request_id, protocol.UNKNOWN_JOB, str(exc))
    if isinstance(exc, (TimeoutError, SubmitRefused)):
        return protocol.encode_error(request_id, protocol.REFUSED, str(exc))
    log.error("request failed", exc_info=exc)
    if is_damage(exc):  # a page of the database past its header (gpudesk.engine.store.damage)
        return protocol.encode_error(request_id, protocol.INTERNAL, request_text(str(exc)))
    return protocol.encode_error(
        request_id, protocol.INTERNAL, f"the engine failed on this request: {exc}"
    )


def _param_reply(param: LearnedParam) -> Reply:
    return {
        "name": param.name,
        "value": param.value,
        "prior": param.prior,
        "kind": param.kind,
        "source": param.source,
        "observations": param.observations,
        "calibrated": param.calibrated,
        "updated_at": param.updated_at,
    }


def _job_list(args: Args, key: str) -> list[Any]:
    refs = args.get(key)
    if not isinstance(refs, list) or not refs:
        raise ProtocolError(protocol.INVALID_ARGS, f"'{key}' must be a non-empty list")
    if len(refs) > MAX_JOBS_PER_REQUEST:
        raise ProtocolError(
            protocol.INVALID_ARGS,
            f"at most {MAX_JOBS_PER_REQUEST} jobs per request, found {len(refs)}",
        )
    return refs


def _user_arg(value: Any) -> int | None:
    """The `user` argument: a user name, or a uid as digits or a number; its uid."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32:
        return value
    if isinstance(value, str) and is_text(value) and value:
        uid = user_id(value)
        if uid is not None:
            return uid
        raise ProtocolError(
            protocol.INVALID_ARGS, f"'user': no user named {safe_text(value)!r} on this station"
        )
    raise ProtocolError(protocol.INVALID_ARGS, "'user' must be a user name or a uid")


def _whole_number(value: Any, low: int, high: int) -> int | None:
    """`value` when it is an int (not a bool) from `low` to `high`, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _mig_gpu_arg(args: Args, *, required: bool) -> int | None:
    gpu = args.get("gpu")
    if gpu is None and not required:
        return None
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
        raise ProtocolError(
            protocol.INVALID_ARGS,
            "'gpu' must be a GPU index (0, 1, ...)"
            + ("" if required else ", or null for every GPU"),
        )
    return gpu


def _mig_protocol_error(exc: MigError) -> ProtocolError:
    """Refused (config, MIG mode, a busy GPU, not confirmed), a bad request (no such GPU, a
    layout that does not fit), or nvidia-smi failing: each its own code, with MigError's
    one-paragraph message."""
    if isinstance(exc, MigApplyRefused):
        return ProtocolError(protocol.REFUSED, str(exc))
    if isinstance(exc, (MigUsageError, LayoutError)):
        return ProtocolError(protocol.INVALID_ARGS, str(exc))
    return ProtocolError(protocol.MIG_FAILED, str(exc))


def _settings_reply(
    config: StationConfig,
    changes: Sequence[reconfigure.SettingChange],
    not_applied: Sequence[reconfigure.SettingNotApplied],
    *,
    changed: bool,
) -> Reply:
    """`configure`'s and `check_configure`'s reply: the config in force and what the table
    changed (or would), and what it did not apply."""
    return {
        "station": config.view(),
        "changed": changed,
        "changes": [change.to_dict() for change in changes],
        "not_applied": [item.to_dict() for item in not_applied],
    }
