"""Suspending, resuming and signalling a station job's attempt. Each signal reaches its
processes as a cancel's SIGTERM does (`Attempts.send`: its cgroup, else its process group),
sent by the engine itself, as for a cancel. A suspended job keeps its placement (GPUs, GPU
memory, slot); its time limit does not count the pause (LiveAttempt.elapsed_s); a cancel
continues it after its SIGTERM (`Attempts.terminate`); a restart finds it suspended."""

from __future__ import annotations

import signal

from gpudesk import diskspace
from gpudesk.core.job_changes import JobOutcome, state_phrase
from gpudesk.core.jobs import JobState
from gpudesk.core.records import JobRecord
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.live_attempt import LiveAttempt


def _live(attempts: Attempts, job: JobRecord, verb: str) -> LiveAttempt | JobOutcome:
    """The job's live attempt, or why it cannot be `verb`ed."""
    if job.state is not JobState.RUNNING:
        return JobOutcome(f"{state_phrase(job)}: only a running job can be {verb}", ok=False)
    if job.cancel_requested:
        return JobOutcome(f"being cancelled: not {verb}", ok=False)
    live = attempts.by_job().get(job.id)
    if live is None or live.retry is not None:
        return JobOutcome(f"its processes have ended: not {verb}", ok=False)
    return live


def suspend(attempts: Attempts, job: JobRecord, by: str) -> JobOutcome:
    if job.suspended_at is not None:
        return JobOutcome("already suspended")
    live = _live(attempts, job, "suspended")
    if isinstance(live, JobOutcome):
        return live
    if not attempts.send(live, signal.SIGSTOP):
        return JobOutcome("its processes have ended: not suspended", ok=False)
    since = live.clock()
    message = f"suspended by {by} (SIGSTOP); its GPUs stay held"
    try:
        attempts.store.set_suspended(job.id, live.attempt.id, since, message)
    except Exception:  # not stored (a full disk): it goes on running, as the store says
        attempts.send(live, signal.SIGCONT)
        raise
    live.suspended_since = since
    attempts.events.job(job.id, message)
    attempts.track()  # top and the desk show it suspended
    return JobOutcome("suspended")


def resume(attempts: Attempts, job: JobRecord, by: str) -> JobOutcome:
    """A queued or finished job is refused, as suspend refuses it; a running one that is not
    suspended goes on as asked."""
    if job.state is not JobState.RUNNING:
        return JobOutcome(f"{state_phrase(job)}: only a suspended job can be resumed", ok=False)
    if job.suspended_at is None:
        return JobOutcome("not suspended")
    live = _live(attempts, job, "resumed")
    if isinstance(live, JobOutcome):
        return live
    attempts.resumed(live, f"resumed by {by} (SIGCONT)")  # stored first: see Attempts.resumed
    attempts.send(live, signal.SIGCONT)
    attempts.track()
    return JobOutcome("resumed")


def send_signal(attempts: Attempts, job: JobRecord, name: str, by: str) -> JobOutcome:
    live = _live(attempts, job, "signalled")
    if isinstance(live, JobOutcome):
        return live
    if not attempts.send(live, signal.Signals[name]):
        return JobOutcome(f"its processes have ended: {name} not sent", ok=False)
    later = " (suspended: it sees it when resumed)" if live.suspended_since is not None else ""
    try:
        attempts.store.add_event("signal", f"{name} sent by {by}{later}", job_id=job.id)
    except Exception as exc:  # sent all the same: said so, lest a retry send it twice
        if not diskspace.is_full(exc, attempts.home.root):
            raise
        later += diskspace.not_recorded_text(attempts.home.root)
    attempts.events.job(job.id, f"{name} sent by {by}")
    return JobOutcome(f"sent {name}{later}")
