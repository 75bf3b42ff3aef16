"""When the engine starts a shared loader's producer again after it died, or after a restart that
itself failed (its launch refused, or the new process gone at once), and when it gives up.

A death is restarted at once: a producer the OOM killer took is back before its consumers
notice. A restart that dies again (or cannot be launched) is tried again after a delay that
doubles from FIRST_DELAY_S, RESTART_LIMIT restarts in a row at most; the next death after the
last gives up, and the engine tells the consumers why (`station_access.say_not_started`), so
none waits for a producer that is not coming. The bound: the delays add up to 7.5 s (0.5 + 1 +
2 + 4), which with five producers' own start-up (importing torch and building the dataset, a
few seconds each) stays within the 30 s a resuming consumer waits (engine RESUME_S): its last
try is made while they still wait. A consumer connecting again ends the run of failures. (The
doubling is the one a tracking worker backs off a failing store with, tracking/worker.py; the
engine had no helper of it to share.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

RESTART_LIMIT = 5  # restarts in a row without a consumer connecting: then give up
FIRST_DELAY_S = 0.5  # before the second restart in a row; doubled before each after it


@dataclass
class Restarts:
    """A producer's restarts, as the engine counts them. Two counts, as they answer two
    questions: `total`, every restart since the engine started it (what status reports);
    `failing`, the restarts since a consumer last connected (what RESTART_LIMIT bounds)."""

    total: int = 0
    failing: int = 0
    due_at: float = 0.0  # monotonic: the next restart not before
    problem: str | None = None  # why it is down while a restart waits its turn (status says)
    launch_failed: str | None = None  # why its latest start was not launched, if it was not

    def served(self) -> None:
        """A consumer connected: it works, and a later death starts a fresh count."""
        self.failing, self.due_at = 0, 0.0

    def take(self, now: float, why: str) -> str | None:
        """The producer is down (`why`: it died, or its restart could not be launched) and not
        `exhausted`: the event's text of a restart now, or None while it waits its delay."""
        if now < self.due_at:
            return None
        self.failing += 1
        self.total += 1
        self.due_at = now + FIRST_DELAY_S * 2 ** (self.failing - 1)
        self.problem = f"{why}; restarting it ({self.failing} of {RESTART_LIMIT} at most)"
        return f"{why}; restarting it, attempt {self.failing} of {RESTART_LIMIT}"

    def down(self, pid: int | None, process: Popen[bytes] | None) -> str:
        """Why the producer is down: its process `pid` ended (`process`: the engine's child, its
        exit status known; else adopted); no `pid`, its restart was not launched."""
        if pid is None:
            return f"could not be restarted ({self.launch_failed})"
        return f"died (pid {pid}, exit {process.returncode if process else None})"

    def given_up(self, why: str, log: Path) -> str:
        """Why the engine starts it no more (`why`: how it is down), for its consumers; the
        engine keeps that as its reason from now on (the restart's `problem` is done)."""
        self.problem = None
        return (
            f"its producer {why} after {RESTART_LIMIT} restarts in a row that did not serve; "
            f"not restarted until its dataset is registered again (its log: {log})"
        )

    @property
    def exhausted(self) -> bool:
        return self.failing >= RESTART_LIMIT
