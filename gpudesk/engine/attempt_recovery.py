"""Re-adopting attempts after an engine restart: each attempt the store has as running is
adopted when its wrapper still runs, settled when it ended while no engine ran, or put back in
the queue when its command never started; what is left of attempts that are over is killed.
Apart from `attempts` because it runs once, at start, and reads the traces a wrapper leaves
(its pid, its launch lock, its exit record) rather than the live attempts.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from typing import TYPE_CHECKING

from gpudesk.core.jobs import JobState
from gpudesk.core.records import AttemptRecord
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.hw import boottime, runner

if TYPE_CHECKING:
    from gpudesk.engine.attempts import Attempts

log = logging.getLogger("gpudesk.engine")

WRAPPER_FIND_S = 5.0  # how long recovery looks for the pid of a wrapper that holds its lock


def recover(attempts: Attempts) -> tuple[int, int]:
    """Re-adopt attempts that are still running, settle those that ended while no engine
    ran, kill what is left of attempts that are over. Returns (adopted, settled)."""
    adopted = settled = 0
    for attempt in attempts.store.live_attempts():
        # One attempt that cannot be recovered must not keep the engine from starting.
        try:
            outcome = _recover_one(attempts, attempt)
        except Exception:
            log.exception(
                "could not recover attempt %d of job %d; it stays as the store has it",
                attempt.number,
                attempt.job_id,
            )
            continue
        adopted += outcome == "adopted"
        settled += outcome == "settled"
    left = attempts.containment.sweep(
        {(a.job_id, a.number) for a in attempts.store.live_attempts()}
    )
    if left:
        log.info("killed %d leftover process(es) of attempts that were over", left)
        with contextlib.suppress(sqlite3.Error):  # best effort: it must not stop a start
            attempts.store.add_event(
                "cleanup", f"killed {left} leftover process(es) of attempts that were over"
            )
    return adopted, settled


def _recover_one(attempts: Attempts, attempt: AttemptRecord) -> str:
    """Re-adopt one attempt ("adopted") or settle it ("settled"); "left" when neither."""
    slot = str(attempt.placement.get("slot", "?"))
    gpus = tuple(int(i) for i in attempt.placement.get("gpus", ()))
    live = LiveAttempt(attempt, attempt.pid or 0, attempt.pid_started, slot, gpus)
    job = attempts.store.job(attempt.job_id)
    live.owner = job.owner  # whose MPS clients, limits; her name, for wait reasons
    live.time_limit_s = job.spec.time_limit_s
    live.preemptible = job.spec.preemptible
    live.started_boot = boottime.start_in_this_boot(attempt.boot_id, attempt.started_boottime)
    live.suspended_s = attempt.suspended_s  # a suspended attempt stays so (its processes too)
    if live.started_boot is not None:  # its suspension's start is on this boot's clock
        live.suspended_since = attempt.suspended_boottime
    if attempt.pid is None:  # the last engine died between starting it and recording it
        return _recover_unrecorded(attempts, live)
    # its wrapper's start counts from the boot it ran in: in another boot no process is it
    this_boot = attempt.boot_id is None or attempt.boot_id == boottime.boot_id()
    if this_boot and runner.is_alive(attempt.pid, attempt.pid_started):
        attempts.adopt(live)
        return "adopted"
    attempts.settle(live, returncode=None)
    return "settled"


def _recover_unrecorded(attempts: Attempts, live: LiveAttempt) -> str:
    """An attempt whose wrapper's pid the store lacks. Its launch lock says whether a wrapper
    lives (adopt it, never start it again) and, when none does, whether the command was
    started (settle it) or not (the queue may start it again: it never ran)."""
    attempt = live.attempt
    held = runner.wrapper_holds_lock(attempt.dir)
    if held:
        pid = _find_wrapper(attempt)
        if pid is None:  # a held lock has a holder; this is for a kernel that hides it
            log.error(
                "attempt %d of job %d: a wrapper holds its launch lock but cannot be found; "
                "left as it is until the next engine start",
                attempt.number,
                attempt.job_id,
            )
            return "left"
        live.pid, live.start_time = pid, runner.process_start_time(pid)
        with contextlib.suppress(sqlite3.Error):  # best effort: the lock finds it again
            attempts.store.attempt_launched(
                attempt.id, pid, live.start_time or 0.0, now=attempt.started_at
            )
        log.info(
            "attempt %d of job %d: its wrapper (pid %d) was started by an engine that died "
            "before recording it; adopted",
            attempt.number,
            attempt.job_id,
            pid,
        )
        attempts.adopt(live)
        return "adopted"
    live.pid = runner.read_wrapper_pid(attempt.dir) or 0  # its process group, to clean up
    if held is None and live.pid and runner.is_alive(live.pid, None):
        attempts.adopt(live)  # started by a gpudesk before launch locks; wrapper.json says
        return "adopted"
    if runner.read_exit(attempt.dir) is None:
        started = runner.command_started(attempt.dir) if held is False else bool(live.pid)
        if not started:
            _requeue_unstarted(attempts, attempt)
            return "settled"
        record = runner.read_wrapper(attempt.dir)
        child = f" (pid {record.child_pid})" if record and record.child_pid else ""
        # best effort: a refused event must not leave the attempt running for ever, unsettled
        with contextlib.suppress(sqlite3.Error):
            attempts.store.add_event(
                "cleanup",
                f"attempt {attempt.number}: its wrapper died after starting the command"
                f"{child}, while no engine ran, and left no exit record",
                job_id=attempt.job_id,
            )
    attempts.settle(live, returncode=None)
    return "settled"


def _find_wrapper(attempt: AttemptRecord) -> int | None:
    """The pid of the wrapper holding the attempt's launch lock: from wrapper.json, else
    the process that has the lock open (a wrapper that has not written anything yet)."""
    deadline = time.monotonic() + WRAPPER_FIND_S
    while True:
        pid = runner.read_wrapper_pid(attempt.dir) or runner.lock_holder(attempt.dir)
        if pid is not None or time.monotonic() >= deadline:
            return pid
        time.sleep(0.05)


def _requeue_unstarted(attempts: Attempts, attempt: AttemptRecord) -> None:
    message = "the engine stopped before this attempt started; back in the queue"
    attempts.store.finish_attempt(
        attempt,
        attempt_state="launch_failed",
        job_state=JobState.QUEUED,
        message=message,
        exit_code=None,
    )
    attempts.events.job(attempt.job_id, message)
