"""`LocalBackend`: the station's own slots behind the `Backend` protocol. It wraps what runs them
as they are: the store and the queue (submit, hold, release, requeue), the attempts (cancel,
the running attempts a reply shows), the scheduler (why a job waits). `LocalView` is how a
station job shows in the engine's replies: where its attempt runs (`slot`, `gpus`, `mode`,
`mig_slice`, its process group), its log, its wait code, its attempts as stored."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial
from typing import cast

from gpudesk import diskspace
from gpudesk.core.identity import Caller
from gpudesk.core.job_changes import CancelQueued, JobOutcome, Planned
from gpudesk.core.job_edit import JobEdit
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.core.wire.base import PlacementMode
from gpudesk.core.wire.jobs import AttemptView, RemainingView, SubmitResult
from gpudesk.core.wire.requests import InParts
from gpudesk.engine.attempts import STOPPING, Attempts
from gpudesk.engine.backends.base import JobPart, LogFile, OwnerRead
from gpudesk.engine.backends.local import suspension
from gpudesk.engine.backends.local.admission import check_station_fits, waits_for_change
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.scheduler import Scheduler
from gpudesk.engine.state import CurrentStation, PlacementDue
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.hw import runner
from gpudesk.paths import Home
from gpudesk.policy import job_changes, user_limits
from gpudesk.policy.queue import JobQueue

log = logging.getLogger("gpudesk.engine")


def attempt_reply(attempt: AttemptRecord) -> AttemptView:
    """An attempt on the wire: its record, and what contains its processes (its wrapper says,
    in wrapper.json)."""
    wrapper = runner.read_wrapper(attempt.dir)
    return attempt.view(wrapper.containment if wrapper is not None else None)


class LocalView:
    """A page of station jobs: their running attempts and their queued jobs' wait codes, read
    once for the page (Scheduler.wait_codes makes one pass over the queue)."""

    def __init__(
        self,
        jobs: Sequence[JobRecord],
        jobs_root: str,
        store: Store,
        attempts: Attempts,
        scheduler: Scheduler,
    ) -> None:
        self.jobs_root = jobs_root
        self.store = store
        self.live = attempts.by_job()
        self.learning = scheduler.learning
        queued = [job.id for job in jobs if job.state is JobState.QUEUED]
        self.codes = scheduler.wait_codes(queued) if queued else {}
        self.suspended = store.suspended_s([job.id for job in jobs if job.attempts])

    def fields(self, job: JobRecord) -> JobPart:
        # home.attempt_dir's path, joined as text: pathlib's joins were a quarter of the time a
        # page of 200 jobs took to build on the loop
        log = (
            f"{self.jobs_root}/{job.id}/{job.attempts}/{runner.LOG_FILE}" if job.attempts else None
        )
        live, suspended_s = self.live.get(job.id), self.suspended.get(job.id, 0.0)
        if live is None:
            return JobPart(log=log, suspended_s=suspended_s)
        remaining = None
        if job.state is JobState.RUNNING:  # (a suspended job's rate says nothing now)
            r = self.learning.remaining(live)
            remaining = RemainingView(
                seconds=r.seconds,
                source=r.source,
                done=r.done,
                total=r.total,
                rate_per_s=r.rate_per_s,
                typical_s=r.typical_s,
                elapsed_s=r.elapsed_s,
            )
        return JobPart(
            slot=live.slot,
            gpus=tuple(live.gpus),
            mode=cast(PlacementMode, live.mode),  # one the engine placed
            mig_slice=live.mig_slice,
            pgid=live.pid,  # the attempt's process group, while it runs
            log=log,
            remaining=remaining,
            suspended_s=suspended_s,
        )

    def wait_code(self, job: JobRecord) -> str | None:
        return self.codes.get(job.id)

    def attempts(self, job: JobRecord) -> list[AttemptView]:
        return [attempt_reply(a) for a in self.store.attempts(job.id)]

    def allocation(
        self, job: JobRecord, stored: tuple[str | None, float]
    ) -> tuple[str | None, float]:
        return stored


class LocalBackend:
    """Jobs queued on this station and run in its slots."""

    def __init__(
        self,
        home: Home,
        store: Store,
        station: CurrentStation,
        queue: JobQueue,
        attempts: Attempts,
        scheduler: Scheduler,
        telemetry: TelemetrySink,
        events: EventPublisher,
        due: PlacementDue,
    ) -> None:
        self.home = home
        self.jobs_root = str(home.jobs_dir)
        self.store = store
        self.station = station
        self.queue = queue
        self.attempts = attempts
        self.scheduler = scheduler
        self.telemetry = telemetry
        self.events = events
        self.due = due

    # ----------------------------------------------------------- submitting
    def admit(self, specs: Sequence[JobSpec], undone: str = "nothing was submitted") -> None:
        check_station_fits(specs, self.telemetry, self.scheduler, undone)

    def submit(
        self,
        specs: Sequence[JobSpec],
        base_env: dict[str, str] | None,
        caller: Caller,
        *,
        held: bool = False,
        in_parts: InParts | None = None,
    ) -> SubmitResult:
        """Queued (`held`: held too, in the same transaction: all of it or none; by the client
        sending a submission `in_parts`, or by the user)."""
        owner = caller.identity
        records = self.store.submit(specs, base_env, owner=owner, held=held, in_parts=in_parts)
        for record in records:
            self.queue.add(record)
            self.events.job(record.id, "submitted", record)
        self.due.mark()
        return SubmitResult(
            ids=[r.id for r in records],
            simulated=self.simulated(),
            waits_for_change=waits_for_change(records, self.telemetry, self.scheduler),
        )

    def check_submit(
        self, specs: Sequence[JobSpec], base_env: dict[str, str] | None, caller: Caller
    ) -> SubmitResult:
        return SubmitResult(ids=[])

    def simulated(self) -> str | None:
        """The station's backend when its GPUs are simulated (`sim:MODEL`), for replies that
        must say so; None on a real (or CPU-only) station."""
        monitor = self.telemetry.monitor
        return monitor.backend.name if monitor.simulated else None

    # ----------------------------------------------------------- job control
    # `*_all`: a request's jobs at once, their changes stored in one transaction
    # (engine/store/job_changes.py), then followed here; the one-job forms are a request of one
    def cancel(self, job: JobRecord, grace: float) -> JobOutcome:
        if job.state is JobState.QUEUED:
            return self.cancel_all([job])[job.id]
        # Stored first, with the resumes of its suspended attempts (continued to see their
        # SIGTERM) in one transaction; then signalled. A store that refuses it (a full disk)
        # leaves the job running, or suspended, and not cancelled, here as in the store.
        live = self.attempts.by_job().get(job.id)
        stopped = live is not None and live.suspended_since is not None
        resume = self.attempts.resume_of(live, STOPPING) if live and stopped else None
        self.store.request_cancel(job.id, grace, resumes=[resume] if resume else [])
        if live is not None:
            self.attempts.terminate(live, grace, resume)
        return JobOutcome("stopping")

    def cancel_all(self, jobs: Sequence[JobRecord]) -> dict[int, JobOutcome]:
        """The queued ones of `jobs` cancelled (a running one's cancel is `cancel`'s)."""
        said = "cancelled while queued"
        queued = [job for job in jobs if job.state is JobState.QUEUED]
        return self.change_all([(CancelQueued(job, said), said, "cancelled") for job in queued])

    def hold(self, job: JobRecord) -> JobOutcome:
        return self.set_held_all([job], True)[job.id]

    def release(self, job: JobRecord) -> JobOutcome:
        return self.set_held_all([job], False)[job.id]

    def requeue(self, job: JobRecord) -> JobOutcome:
        return self.requeue_all([job])[job.id]

    def set_held_all(
        self, jobs: Sequence[JobRecord], held: bool, in_parts: InParts | None = None
    ) -> dict[int, JobOutcome]:
        """Hold (`held`) or release queued jobs (policy/job_changes.py); `in_parts`: the release
        of a submission sent in parts, by its client."""
        outcomes, planned = job_changes.held(jobs, held, in_parts)
        return self.change_all(planned, outcomes)

    def requeue_all(self, jobs: Sequence[JobRecord]) -> dict[int, JobOutcome]:
        """Requeue finished jobs, within each owner's `[station] max_queued_per_user`
        (policy/job_changes.py)."""
        limit = self.station.config.max_queued_per_user
        queued = partial(user_limits.queued_count, self.queue)
        outcomes, planned = job_changes.requeued(jobs, limit, queued)
        return self.change_all(planned, outcomes)

    def change_all(
        self, planned: list[Planned], outcomes: dict[int, JobOutcome] | None = None
    ) -> dict[int, JobOutcome]:
        """`outcomes`, and each planned job's: the changes stored in one transaction, then each
        followed here (`changed`) only where the store took it, even past a listener that
        raised (raised after), so the queue and the store agree. One the store refused (a full
        disk; a refused commit: all) is left as it was, and its outcome says why."""
        outcomes = {} if outcomes is None else outcomes
        if not planned:
            return outcomes
        now, root = time.time(), self.home.root
        try:
            errors = self.store.change_jobs([p[0] for p in planned], self._full, now)
        except Exception as exc:
            if not self._full(exc):
                raise
            errors = [exc] * len(planned)
        failures: list[Exception] = []
        for (change, said, outcome), error in zip(planned, errors, strict=True):
            if error is not None:
                log.warning("job %d left as it was: %s", change.job.id, error)
                outcomes[change.job.id] = JobOutcome(diskspace.job_text(root), ok=False)
                continue
            outcomes[change.job.id] = JobOutcome(outcome)
            try:
                self.changed(change.applied(now), said)
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]
        return outcomes

    def _full(self, exc: BaseException) -> bool:
        return diskspace.is_full(exc, self.home.root)

    def edit(self, job: JobRecord, edit: JobEdit) -> JobOutcome:
        """Swapped on the loop, as placement runs, and by the store only while queued: the job
        starts as it was or as edited, never between."""
        if edit.changes:
            self.changed(self.store.edit(job.id, edit), edit.message)
        return JobOutcome("edited" if edit.changes else "nothing to change")

    def suspend(self, job: JobRecord, by: str) -> JobOutcome:
        return suspension.suspend(self.attempts, job, by)

    def resume(self, job: JobRecord, by: str) -> JobOutcome:
        return suspension.resume(self.attempts, job, by)

    def signal(self, job: JobRecord, name: str, by: str) -> JobOutcome:
        return suspension.send_signal(self.attempts, job, name, by)

    def changed(self, job: JobRecord, message: str) -> None:
        """A user changed a job (its store record and event are written): keep the queue's
        copy current (re-sorted by `add`; one no longer queued leaves it), tell subscribers,
        and let the policy look again."""
        if job.state is JobState.QUEUED:
            self.queue.add(job)
        else:
            self.queue.remove(job.id)
        self.events.job(job.id, message, job)
        self.due.mark()

    # ----------------------------------------------------------- views
    def explain(self, job: JobRecord) -> str:
        return self.scheduler.explain_wait(job)

    def view(self, jobs: Sequence[JobRecord]) -> LocalView:
        return LocalView(jobs, self.jobs_root, self.store, self.attempts, self.scheduler)

    def log(self, job: JobRecord, attempt: int) -> LogFile | OwnerRead:
        # whose files the log and its parts must be: its owner's where the job ran as them,
        # else the engine's own (gpudesk.joblog reads them as files a user may have planted)
        return LogFile(
            self.home.attempt_dir(job.id, attempt) / runner.LOG_FILE,
            runner.log_owner_uid(job.owner),
        )
