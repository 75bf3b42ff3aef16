"""`LocalBackend`: the station's own slots behind the `Backend` protocol. It wraps what runs them
as they are: the store and the queue (submit, hold, release, requeue), the attempts (cancel,
the running attempts a reply shows), the scheduler (why a job waits). `LocalView` is how a
station job shows in the engine's replies: where its attempt runs (`slot`, `gpus`, `mode`,
`mig_slice`, its process group), its log, its wait code, its attempts as stored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from gpudesk.core.identity import Caller
from gpudesk.core.job_edit import JobEdit
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.core.wire.base import PlacementMode
from gpudesk.core.wire.jobs import AttemptView, RemainingView, SubmitResult
from gpudesk.engine.attempts import STOPPING, Attempts
from gpudesk.engine.backends.base import JobOutcome, JobPart, LogFile, OwnerRead, state_phrase
from gpudesk.engine.backends.local import suspension
from gpudesk.engine.backends.local.admission import check_station_fits, waits_for_change
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.scheduler import Scheduler
from gpudesk.engine.state import CurrentStation, PlacementDue
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.hw import runner
from gpudesk.paths import Home
from gpudesk.policy import user_limits
from gpudesk.policy.queue import JobQueue


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

    def fields(self, job: JobRecord) -> JobPart:
        # home.attempt_dir's path, joined as text: pathlib's joins were a quarter of the time a
        # page of 200 jobs took to build on the loop
        log = (
            f"{self.jobs_root}/{job.id}/{job.attempts}/{runner.LOG_FILE}" if job.attempts else None
        )
        live = self.live.get(job.id)
        if live is None:
            return JobPart(log=log)
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
        )

    def wait_code(self, job: JobRecord) -> str | None:
        return "JobHeldUser" if job.held else self.codes.get(job.id)

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
    def admit(self, specs: Sequence[JobSpec]) -> None:
        check_station_fits(specs, self.telemetry, self.scheduler)

    def submit(
        self,
        specs: Sequence[JobSpec],
        base_env: dict[str, str] | None,
        caller: Caller,
        *,
        held: bool = False,
    ) -> SubmitResult:
        """Queued (`held`: held too, in the same transaction: all of it or none)."""
        records = self.store.submit(specs, base_env, owner=caller.identity, held=held)
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
    def cancel(self, job: JobRecord, grace: float) -> JobOutcome:
        if job.state is JobState.QUEUED:
            # stored first: a store that refuses it (a full disk) leaves the job queued here too
            self.store.finish_queued(job.id, JobState.CANCELLED, "cancelled while queued")
            self.queue.remove(job.id)
            self.events.job(job.id, "cancelled while queued")
            self.due.mark()
            return JobOutcome("cancelled")
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

    def hold(self, job: JobRecord) -> JobOutcome:
        if job.state is not JobState.QUEUED:
            return JobOutcome(f"{state_phrase(job)}: only a queued job can be held", ok=False)
        if job.held:
            return JobOutcome("already held")
        self.changed(self.store.set_held(job.id, True), "held by user")
        return JobOutcome("held")

    def release(self, job: JobRecord) -> JobOutcome:
        if job.state is not JobState.QUEUED:  # refused, as hold refuses it
            return JobOutcome(f"{state_phrase(job)}: only a held job can be released", ok=False)
        if not job.held:  # free to start already: what release asks
            return JobOutcome("not held")
        self.changed(self.store.set_held(job.id, False), "released by user")
        return JobOutcome("released")

    def requeue(self, job: JobRecord) -> JobOutcome:
        """Requeue a finished job, unless that would leave its owner more queued jobs than
        `[station] max_queued_per_user` (whoever asks: the limit is the owner's)."""
        if job.state is JobState.QUEUED:
            return JobOutcome("already queued" + (" (held)" if job.held else ""))
        if job.state is JobState.RUNNING:
            return JobOutcome(f"{state_phrase(job)}: only a finished job can be requeued", ok=False)
        refusal = user_limits.queued_refusal(
            self.station.config.max_queued_per_user,
            job.user,
            user_limits.queued_count(self.queue, job.owner.uid),
            1,
            "requeueing",
            f"Job {job.id} was not requeued",
        )
        if refusal:
            return JobOutcome(refusal, ok=False)
        record = self.store.requeue(job.id)
        self.changed(
            record,
            f"requeued by user (was {job.state.value}); attempt "
            f"{record.attempts + 1} next, {record.spec.max_attempts} allowed",
        )
        return JobOutcome("requeued")

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
        copy current (re-sorted by `add`), tell subscribers, and let the policy look again."""
        if job.state is JobState.QUEUED:
            self.queue.add(job)
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
