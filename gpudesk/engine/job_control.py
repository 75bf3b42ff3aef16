"""The user's job control: cancel, hold, release, priority and requeue, one job at a time, each
with an outcome that says what it did (or why it did nothing)."""

from __future__ import annotations

from dataclasses import dataclass

from gpudesk.core.jobs import PRIORITY_RANGE, TERMINAL_STATES, JobState
from gpudesk.core.records import JobRecord
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.backends.slurm import SlurmBackend
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.state import PlacementDue
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import UnknownJob
from gpudesk.policy.queue import JobQueue


@dataclass(frozen=True)
class JobOutcome:
    """What a job-control action did to one job. `ok` is False only when the action was
    refused (holding a running job, say); a no-op such as holding a held job is ok."""

    message: str
    ok: bool = True


def _state_phrase(job: JobRecord) -> str:
    """ "running", or "already failed" for a finished job: the start of a refusal."""
    return f"already {job.state.value}" if job.state.terminal else job.state.value


class JobControl:
    def __init__(
        self,
        store: Store,
        queue: JobQueue,
        attempts: Attempts,
        events: EventPublisher,
        due: PlacementDue,
        slurm: SlurmBackend,
    ) -> None:
        self.slurm = slurm
        self.store = store
        self.queue = queue
        self.attempts = attempts
        self.events = events
        self.due = due

    def find(self, ref: int | str) -> JobRecord:
        """A job by id (int or digits) or by name (the newest job of that name)."""
        if isinstance(ref, int) or (ref.isascii() and ref.isdigit()):  # "²" is a digit too
            return self.store.job(int(ref))
        jobs = self.store.jobs_named(ref)
        if not jobs:
            raise UnknownJob(f"no job with id or name {ref!r}")
        return jobs[-1]

    def cancel(self, job: JobRecord, grace: float) -> JobOutcome:
        if job.state in TERMINAL_STATES:
            return JobOutcome(f"already {job.state.value}")
        if job.spec.cluster is not None:  # Slurm ends it; the job ends when Slurm says so
            return JobOutcome(self.slurm.cancel(job))
        if job.state is JobState.QUEUED:
            self.queue.remove(job.id)
            self.store.finish_queued(job.id, JobState.CANCELLED, "cancelled while queued")
            self.events.job(job.id, "cancelled while queued")
            self.due.mark()
            return JobOutcome("cancelled")
        self.store.request_cancel(job.id, grace)
        self.attempts.terminate_job(job.id, grace)
        return JobOutcome("stopping")

    def hold(self, job: JobRecord) -> JobOutcome:
        if job.spec.cluster is not None:
            return self._on_slurm(job, "hold")
        if job.state is not JobState.QUEUED:
            return JobOutcome(f"{_state_phrase(job)}: only a queued job can be held", ok=False)
        if job.held:
            return JobOutcome("already held")
        self._changed(self.store.set_held(job.id, True), "held by user")
        return JobOutcome("held")

    def release(self, job: JobRecord) -> JobOutcome:
        if job.spec.cluster is not None:
            return self._on_slurm(job, "release")
        if job.state is not JobState.QUEUED:
            return JobOutcome(f"not held ({_state_phrase(job)})")
        if not job.held:
            return JobOutcome("not held")
        self._changed(self.store.set_held(job.id, False), "released by user")
        return JobOutcome("released")

    def set_priority(self, job: JobRecord, priority: int) -> JobOutcome:
        old = job.spec.priority
        if priority == old:
            low, high = PRIORITY_RANGE
            limit = " (the highest)" if old == high else " (the lowest)" if old == low else ""
            return JobOutcome(f"priority stays {old}{limit}")
        message = f"priority {old} -> {priority}"
        self._changed(self.store.set_priority(job.id, priority), f"{message} by user")
        if job.state is JobState.QUEUED:
            return JobOutcome(message)
        later = "a retry" if job.state is JobState.RUNNING else "a requeue"
        return JobOutcome(
            f"{message}; {_state_phrase(job)}, so it changes nothing now "
            f"(it orders the queue after {later})"
        )

    @staticmethod
    def moved_priority(job: JobRecord, delta: int) -> int:
        """The priority `delta` makes: raised (+) or lowered (-), kept in the range."""
        low, high = PRIORITY_RANGE
        return min(high, max(low, job.spec.priority + delta))

    def requeue(self, job: JobRecord) -> JobOutcome:
        if job.spec.cluster is not None:
            return self._on_slurm(job, "requeue")
        if job.state is JobState.QUEUED:
            return JobOutcome("already queued" + (" (held)" if job.held else ""))
        if job.state is JobState.RUNNING:
            return JobOutcome("running: only a finished job can be requeued", ok=False)
        record = self.store.requeue(job.id)
        self._changed(
            record,
            f"requeued by user (was {job.state.value}); attempt "
            f"{record.attempts + 1} next, {record.spec.max_attempts} allowed",
        )
        return JobOutcome("requeued")

    def _on_slurm(self, job: JobRecord, verb: str) -> JobOutcome:
        """Slurm, not the station, holds, releases and requeues a Slurm job: say how."""
        row = self.store.slurm_job(job.id)
        slurm_id = row.slurm_id if row is not None else "?"
        how = {
            "hold": f"scontrol hold {slurm_id}",
            "release": f"scontrol release {slurm_id}",
            "requeue": f"scontrol requeue {slurm_id}",
        }[verb]
        return JobOutcome(
            f"a Slurm job: gpudesk does not {verb} it on the cluster; `{how}` does", ok=False
        )

    def _changed(self, job: JobRecord, message: str) -> None:
        """A user changed a job (its store record and event are written): keep the queue's
        copy current (re-sorted by `add`), tell subscribers, and let the policy look again."""
        if job.state is JobState.QUEUED:
            self.queue.add(job)
        self.events.job(job.id, message, job)
        self.due.mark()
