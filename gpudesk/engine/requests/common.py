"""What every group of requests shares: the collaborators the handlers hand work to
(`EngineParts`), the base of each group (`Requests`: finding a job by id or name, refusing a
non-admin, whether a caller sees an owner's secrets). Each op's arguments are decoded into
their type (`gpudesk.core.wire.requests`) before its handler is called.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

import msgspec

from gpudesk.core import protocol
from gpudesk.core.field_checks import reads_as_job_id
from gpudesk.core.identity import Caller, Identity, user_arg
from gpudesk.core.job_changes import ended_unsaved
from gpudesk.core.job_ref_checks import checked_ref
from gpudesk.core.jobs import TasksOf
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.jobs import UsageSummary
from gpudesk.core.wire.requests import MAX_ROW_ID, JobRef
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.backends.slurm import SlurmBackend
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.job_control import JobControl
from gpudesk.engine.learning import StationLearning
from gpudesk.engine.offloop import Later, NextTurn, OffLoop
from gpudesk.engine.scheduler import Scheduler
from gpudesk.engine.services.loaders import LoaderSupervisor
from gpudesk.engine.services.metrics.exporter import MetricsExporter
from gpudesk.engine.services.tracking.tracker import Tracking
from gpudesk.engine.state import CurrentStation, PlacementDue
from gpudesk.engine.station.mps_watch import MpsWatch
from gpudesk.engine.station.repartition.control import MigControl
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.metrics.loop_timing import LoopTiming
from gpudesk.paths import Home
from gpudesk.policy.access import Access
from gpudesk.policy.queue import JobQueue
from gpudesk.text import quoted

# An op's handler: its arguments (decoded into the op's type in gpudesk.core.wire.requests) and
# who asks in, its reply (or the work that builds it later, or its next slice) out.
Handler = Callable[[Any, Caller], "msgspec.Struct | Later[Any] | NextTurn"]
# Assumption: a user database silent for 10 s is down (nslcd's default bind_timelimit).
NAME_BOUND_S = 10.0


class EngineParts(msgspec.Struct, frozen=True):
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
    # Who may do what (policy/access.py): a personal engine's callers are all admins.
    access: Access = msgspec.field(default_factory=Access.personal)
    # How long requests and periodic steps held the loop (metrics/loop_timing.py).
    loop: LoopTiming = msgspec.field(default_factory=LoopTiming)


class Requests:
    """The base of each group of ops: the collaborators, and what several groups ask of them."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts

    def _sees_secrets(self, caller: Caller, owner_uid: int) -> bool:
        """Whether `caller` sees the secrets in the URIs of `owner_uid`'s jobs (a tracking
        store's password): the owner and the admins do, as they may read the job's environment;
        anyone else sees them redacted (gpudesk.redact)."""
        return caller.uid == owner_uid or self.parts.access.is_admin(caller)

    def _need_admin(self, caller: Caller, what: str) -> None:
        """Refuse a station-wide action (`what`: "apply MIG layouts") to a caller who is no
        admin, naming the rule."""
        refusal = self.parts.access.admin_refusal(caller, what)
        if refusal:
            raise ProtocolError(protocol.REFUSED, refusal)

    def _usage(self, job_ids: list[int]) -> dict[int, UsageSummary]:
        """Each job's usage summed over its attempts (a running one's live)."""
        return self.parts.telemetry.job_usage(job_ids, self.parts.attempts.attempt_numbers())

    def _tasks_of(self, alone: Collection[int]) -> TasksOf:
        """An array's tasks by its id (JobSpec.with_array_tasks), each read once a request;
        none for an id the client named its first task alone by (`first_tasks_alone`)."""
        tasks = self.parts.store.array_tasks
        return functools.cache(lambda i: {} if i in alone else tasks([i]).get(i, {}))

    def _find(self, ref: JobRef, field: str, caller: Caller) -> JobRecord:
        """A job by id or name (JobControl.find: the caller's, else anyone's newest); `field`
        names the argument in the error for a ref that is neither."""
        return self.parts.control.find(checked_ref(ref, field), caller.uid)

    def _ended(self, job_id: int) -> str | None:
        """Why no action is taken on a job whose attempt ended, its end not yet stored (a full
        disk): it is over, whatever its store still says (`running`); None for any other job."""
        live = self.parts.attempts.unsaved().get(job_id)
        return None if live is None else ended_unsaved(live.unsaved, str(live.unsaved_why))

    def _find_ids(self, refs: Sequence[JobRef], field: str, caller: Caller) -> list[int]:
        """The ids of the jobs `refs` name (`_find`'s way: one that names no job raises), each
        once, in the order first named. The ids named are looked up at once (in the queue, the
        others in one query of ids alone, 1,000 of them in about a millisecond); the jobs are
        read later, a slice at a time (engine/requests/job_actions.py). An array's id names all
        its tasks, as Slurm's `scancel 144` does (`144_0`: its first alone)."""
        digits = (int(r) for r in refs if isinstance(r, str) and reads_as_job_id(r) and len(r) < 20)
        named = {*digits, *(r for r in refs if isinstance(r, int))}
        ids = [i for i in named if -MAX_ROW_ID <= i <= MAX_ROW_ID]
        known = {i for i in ids if i in self.parts.queue}
        known |= self.parts.store.existing_ids([i for i in ids if i not in known])
        found: dict[int, None] = {}
        by_id: set[int] = set()
        for index, ref in enumerate(refs):
            checked = checked_ref(ref, f"{field}[{index}]")
            if isinstance(checked, int) and checked in known:
                by_id.add(checked)
            else:
                checked = self.parts.control.find(checked, caller.uid).id
            found.setdefault(checked)
        arrays = self.parts.store.array_tasks(sorted(by_id))
        return list(dict.fromkeys(j for i in found for j in (i, *arrays.get(i, {}).values())))


def named(handler: Handler, undone: str | None = None) -> Handler:
    """`handler` given its caller named as the user database has it now (`Identity.named`: a
    submit's jobs' owner is stored with it; suspend's "by ada" is asked once, not per job),
    looked up off the loop: NSS may ask LDAP or SSSD, one slow directory stalling every client
    (the caller is read on the loop, from the socket). Counted against no one's PER_USER: it
    takes microseconds where the database is well, and her third `gpudesk submit &` in a turn
    would be refused. Unanswered in NAME_BOUND_S: refused (`undone`: "nothing was queued"; a
    submit's owner must be named, `as_known_now`), its late answer dropped (OffLoop); without
    `undone`, done as "uid N" (suspend: judged by uid and the kernel's groups, named in text)."""

    def named_first(args: Any, caller: Caller) -> Later[Identity]:
        what = f"{undone}: " if undone else ""
        what += f"asking the user database for uid {caller.uid}'s name"
        nameless = replace(caller.identity, login=f"uid {caller.uid}")

        def then(who: Identity) -> Any:  # no name: "uid N", asked no more (a submit's is stored)
            return handler(args, Caller(who if who.login or undone else nameless, caller.pid))

        late = None if undone else lambda: then(nameless)
        return Later(caller.identity.named, then, NAME_BOUND_S, what, counted=False, late=late)

    return named_first


def by_uid(handler: Handler) -> Handler:
    """`handler` given its `user` (JobsArgs') named by its uid, looked up off the loop as
    `named`'s name (`gpudesk` sends the uid: the name an older client or an API user sends)."""

    def uid_first(args: Any, caller: Caller) -> Any:
        if not isinstance(args.user, str):
            return handler(args, caller)
        then = lambda uid: handler(msgspec.structs.replace(args, user=uid), caller)  # noqa: E731
        what = f"asking the user database for the uid of {quoted(args.user)}"
        return Later(functools.partial(user_arg, args.user), then, NAME_BOUND_S, what)

    return uid_first
