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

import os
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import TYPE_CHECKING

import msgspec

from gpudesk.loader.workers import signal_name

if TYPE_CHECKING:
    from gpudesk.loader.protocol import ProducerInfo
from gpudesk.text import printable_line

RESTART_LIMIT = 5  # restarts in a row without a consumer connecting: then give up
FIRST_DELAY_S = 0.5  # before the second restart in a row; doubled before each after it
# What of the producer's log is read for its last line: its end, at most this much (its
# traceback's last line, the exception, is well within it), and the line cut to LINE_MAX
TAIL_BYTES = 4096
LINE_MAX = 200


class RestartNote(msgspec.Struct, frozen=True):
    """What the engine says, where the producer's waiting consumers look
    (`station_access.say_restarting`), of a producer it is restarting: how it went down and
    which restart in a row this is. They wait on, saying it, rather than in silence until the
    engine gives up."""

    why: str  # `Restarts.down`: "died (pid P, exit N; its log's last line: ...)", or not launched
    attempt: int  # of `limit`
    limit: int = RESTART_LIMIT

    def line(self, name: str) -> str:
        return (
            f"waiting for the shared loader {name!r}: its producer {self.why}; the engine "
            f"restarts it (attempt {self.attempt} of {self.limit})"
        )


def restart_note(said: ProducerInfo | None) -> RestartNote | None:
    """The restart note in what the engine said (`station_access.engines_word`), or None."""
    return None if said is None else said.restarting


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
    log_from: int = 0  # where the latest start's lines begin in its log (its size then)
    note: RestartNote | None = None  # the latest restart's, for its consumers (`take`)

    def served(self) -> bool:
        """A consumer connected: it works, and a later death starts a fresh count. Whether it
        had been failing (a restart note of it is then done with)."""
        failing, self.failing, self.due_at = self.failing, 0, 0.0
        return failing > 0

    def take(self, now: float, why: str, told: str | None = None) -> str | None:
        """The producer is down (`why`: it died, or its restart could not be launched) and not
        `exhausted`: the event's text of a restart now, or None while it waits its delay.
        `told`: why, as its consumers are told it (the restart note; None: `why`)."""
        if now < self.due_at:
            return None
        self.failing += 1
        self.total += 1
        self.due_at = now + FIRST_DELAY_S * 2 ** (self.failing - 1)
        self.problem = f"{why}; restarting it ({self.failing} of {RESTART_LIMIT} at most)"
        self.note = RestartNote(told or why, self.failing)
        return f"{why}; restarting it, attempt {self.failing} of {RESTART_LIMIT}"

    def down(self, pid: int | None, process: Popen[bytes] | None, log: Path) -> str:
        """Why the producer is down: its process `pid` ended (`process`: the engine's child, its
        exit status known; else adopted), with the last line it wrote to its `log`; no `pid`,
        its restart was not launched."""
        return self.down_told(pid, process, log, shared=False)[0]

    def down_told(
        self, pid: int | None, process: Popen[bytes] | None, log: Path, shared: bool
    ) -> tuple[str, str]:
        """`down`, and as the consumers are told it: in a file every member may read where
        `shared` (a station's), which says where to read the line rather than quote it (her
        producer's words are hers, as her jobs' logs are). The log is read once for both."""
        if pid is None:
            why = f"could not be restarted ({self.launch_failed})"
            return why, why
        line = last_line(log, self.log_from)
        how = ended(process.returncode if process else None)

        def said(quoted: str | None) -> str:
            return f"died (pid {pid}, {how}" + (
                f"; its log's last line: {quoted})" if quoted else ")"
            )

        why = said(line)
        if not (shared and line):
            return why, why
        return why, said("`gpudesk engine status` shows it to its owner and the admins")

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


def ended(code: int | None) -> str:
    """A producer's exit status as said: `exit N`, a signal by its name where it has one
    (`killed by SIGKILL`; `killed by signal 40` for a real-time one), or that it is not known
    (a producer the engine adopted, not its child: only a parent is told a process's status)."""
    if code is None:
        return "its exit status not known: adopted, not the engine's child"
    if code < 0:
        return f"killed by {signal_name(-code)}"
    return f"exit {code}"


def last_line(log: Path, since: int) -> str | None:
    """The last line that is not blank in `log` past offset `since` (what the latest start
    wrote), printable (`text.printable_line`) and cut to LINE_MAX, or None. The log is the
    engine's own file (on a station root's, in its state folder), written by the producer
    through the descriptor it was started with: opened as untrusted all the same (no link
    followed, no FIFO waited on) and read at its end only, so the engine's loop reads 4 KiB at
    most."""
    from gpudesk.untrusted import open_untrusted

    try:
        fd = open_untrusted(log, os.geteuid())
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        start = max(since, size - TAIL_BYTES)
        tail = os.pread(fd, size - start, start) if size > start else b""
    except OSError:
        return None
    finally:
        os.close(fd)
    lines = [line.strip() for line in tail.decode(errors="replace").splitlines() if line.strip()]
    if not lines:
        return None
    shown = printable_line(lines[-1])
    return shown if len(shown) <= LINE_MAX else f"{shown[: LINE_MAX - 1]}…"
