"""`LiveAttempt`: the engine's handle on one running attempt (its wrapper's pid, where it runs,
whose it is, its time limit and the state of a cancel or of a settle that could not be stored),
and when an ended one ran past its time limit. Apart from `attempts` (which starts, watches and
settles them) because every collaborator that looks at running work reads it: learning, the
requests, the scheduler's view.
"""

from __future__ import annotations

import os
import time

import msgspec

from gpudesk.core.identity import Identity
from gpudesk.core.job_changes import UnsavedEnd
from gpudesk.core.records import AttemptRecord
from gpudesk.hw import boottime
from gpudesk.policy.gpu_states import RunningAttempt
from gpudesk.policy.remaining import UNKNOWN, Remaining


class LiveAttempt(msgspec.Struct):
    attempt: AttemptRecord
    pid: int
    start_time: float | None
    slot: str
    gpus: tuple[int, ...] = ()
    is_child: bool = False  # started by this engine (reaped by it); False when re-adopted
    returncode: int | None = None  # the wrapper's status once reaped
    kill_at: float | None = None  # when to escalate a cancel to SIGKILL
    settle_failures: int = 0  # times recording how it ended failed
    leftovers_killed: int = 0  # processes it left behind, killed when it ended, not yet said
    # After a settle that could not be stored: (returncode, watched) to settle with again, and
    # when; see Attempts.check.
    retry: tuple[int | None, bool] | None = None
    retry_at: float = 0.0
    # Meanwhile, where it ended: why its end is not stored yet (None: it is not waiting for
    # that), and the end it is to be stored with, where the engine got that far.
    unsaved_why: str | None = None
    unsaved: UnsavedEnd | None = None
    owner: Identity | None = None  # its job's owner (None: the engine's own user)
    time_limit_s: float | None = None  # its job's time limit
    timed_out: bool = False  # its time limit passed and it was told to stop
    # When it started on this boot's CLOCK_BOOTTIME (hw/boottime.py), which its time limit
    # runs on; None when unknown (stored before schema 10): then the wall clock, as before.
    started_boot: float | None = None
    # Preemption (engine/preempting.py): the waiting job it gives way to, and when (monotonic)
    # its grace ends and SIGTERM follows (None once sent). Not stored: an engine restarted
    # during the grace settles it as an ordinary ending.
    preemptible: bool = False  # its job's spec says it may be preempted
    preempted_for: int | None = None
    preempt_term_at: float | None = None
    # Suspension (`gpudesk suspend`, backends/local/suspension.py): the seconds it spent suspended
    # before, and when its current suspension began on the clock `elapsed_s` runs on (None:
    # not suspended). Stored (attempts.suspended_s, suspended_boottime): a restarted engine
    # finds it suspended, and its time limit does not count them.
    suspended_s: float = 0.0
    suspended_since: float | None = None

    @property
    def uid(self) -> int:
        return os.getuid() if self.owner is None else self.owner.uid

    def clock(self, wall_now: float | None = None) -> float:
        """Now, on the clock its run is timed on: CLOCK_BOOTTIME where its start is known
        there, else the wall clock (`wall_now`, default now)."""
        if self.started_boot is not None:
            return boottime.now()
        return time.time() if wall_now is None else wall_now

    def suspended_for(self, wall_now: float | None = None) -> float:
        """The seconds it has spent suspended, its current suspension included."""
        if self.suspended_since is None:
            return self.suspended_s
        return self.suspended_s + max(0.0, self.clock(wall_now) - self.suspended_since)

    def elapsed_s(self, wall_now: float | None = None) -> float | None:
        """How long it has run, its time suspended left out (as Slurm's time limit does): on
        CLOCK_BOOTTIME where its start is known there, so a stepped wall clock changes
        nothing; else by the wall clock (`wall_now`, default now)."""
        started = self.started_boot
        if started is None:
            started = self.attempt.started_at
            if started is None:
                return None
        return self.clock(wall_now) - started - self.suspended_for(wall_now)

    @property
    def mode(self) -> str:
        """Its placement mode: "cpu", "exclusive", "naive", "mps" or "mig"."""
        return str(self.attempt.placement.get("mode", "exclusive"))

    @property
    def mig_slice(self) -> str | None:
        value = self.attempt.placement.get("mig_slice")
        return str(value) if value else None

    def running(self, remaining: Remaining = UNKNOWN) -> RunningAttempt:
        """As placement sees it, with its remaining time (engine/learning.py `remaining`)."""
        demand = self.attempt.placement.get("demand") or {}
        return RunningAttempt(
            attempt_id=self.attempt.id,
            job_id=self.attempt.job_id,
            gpus=self.gpus,
            mode=self.mode,
            mig_slice=self.mig_slice,
            memory_mib=float(demand.get("memory_mib", 0.0)),
            sm_pct=float(demand.get("sm_pct", 0.0)),
            peak_known=demand.get("source") == "history",
            uid=self.uid,
            login=self.owner.login if self.owner else None,  # never asked of NSS on the loop
            remaining_s=remaining.seconds,
            measured_remaining_s=remaining.measured_s,
        )


def ran_past_limit(live: LiveAttempt, watched: bool, ended_at: float) -> bool:
    """Did this attempt, which has ended, run past its time limit? Yes when the engine stopped
    it for that; else by how long it ran (`ran_s`: it is settled within a loop's turn of its
    end where this engine watched)."""
    limit = live.time_limit_s
    if limit is None:
        return False
    if live.timed_out:
        return True
    elapsed = ran_s(live, watched, ended_at)
    return elapsed is not None and elapsed >= limit


def ran_s(live: LiveAttempt, watched: bool, ended_at: float) -> float | None:
    """How long an ended attempt ran, its time suspended left out (its time limit's and its
    command family's history's measure, the same before and after an engine restart): by
    CLOCK_BOOTTIME where it ended while this engine watched and its start is known there,
    else by its wall-clock start and end (`ended_at`, its exit record's), less the seconds
    of the suspensions it was resumed from."""
    if watched and live.started_boot is not None:
        return live.elapsed_s()
    started = live.attempt.started_at
    return None if started is None else ended_at - started - live.suspended_s
