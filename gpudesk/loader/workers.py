"""A producer's DataLoader workers, watched: one that dies is a stop or a failure.

torch's DataLoader watches its workers with a SIGCHLD handler of its own, which raises
RuntimeError from wherever the main thread is when one dies by a signal or exits non-zero: a
traceback, whatever the cause. A producer stopped by a SIGTERM to its whole process group
(`timeout`, `kill -- -PGID`, systemd's stop of a unit) loses its workers to that SIGTERM too
(torch's workers end quietly only on a SIGTERM from their parent), and the processes of a group
take such a signal in no set order: the SIGCHLD may come before the producer's own SIGTERM, or
alone (a SIGTERM to a worker by hand).

So the producer replaces torch's handler with this one, which tells the two apart by how the
worker ended:
- killed by SIGTERM, SIGINT or SIGHUP: a stop, as if the producer had been told itself
  (`on_stop`); it stops cleanly, exit status 0;
- anything else (SIGKILL, as the kernel's out-of-memory killer sends; SIGSEGV; a non-zero exit
  status): a failure, kept in `failure` for the producer to report, one paragraph and a non-zero
  exit status, unless it is stopping anyway.
A clean exit (status 0: the producer's own shutdown of its workers) is neither.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


@dataclass(frozen=True)
class WorkerEnd:
    """How a worker ended: killed by `signal`, or exited with `status`."""

    pid: int
    signal: int | None = None
    status: int | None = None

    @property
    def is_stop(self) -> bool:
        return self.signal in STOP_SIGNALS

    def how(self) -> str:
        if self.signal is None:
            return f"exited with status {self.status}"
        return f"was killed by {signal_name(self.signal)}"

    def failure(self, name: str) -> str:
        """What the producer says, failing for it."""
        hint = (
            " (the kernel's out-of-memory killer sends that: see `dmesg` or "
            "`journalctl -k`, and try fewer --workers or a smaller --batch-size)"
            if self.signal == signal.SIGKILL
            else ""
        )
        return (
            f"loader {name}: its DataLoader worker (pid {self.pid}) {self.how()}{hint}; "
            "the producer stops: start it again (a managed one is started again by the engine)"
        )


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def ended(pid: int) -> WorkerEnd | None:
    """How child `pid` ended, if it has and is not reaped yet (it is left to be reaped)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already: by the DataLoader's own shutdown
        return None
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return WorkerEnd(pid, status=info.si_status)
    return WorkerEnd(pid, signal=info.si_status)  # CLD_KILLED, CLD_DUMPED


class WorkerWatch:
    """SIGCHLD for a DataLoader's workers (`pids`): a worker stopped by a signal calls
    `on_stop(end)` once; one that failed is kept in `failure` (the first). Inside
    `interruptible()` (the producer waiting for its DataLoader's next batch, which a dead worker
    never makes) either also raises WorkerGone, ending that wait at once."""

    def __init__(self, pids: tuple[int, ...], on_stop: Callable[[WorkerEnd], None]) -> None:
        self.pids = pids
        self.on_stop = on_stop
        self.stopped: WorkerEnd | None = None
        self.failure: WorkerEnd | None = None
        self.waiting = False

    @classmethod
    def of(cls, batches: Any, on_stop: Callable[[WorkerEnd], None]) -> WorkerWatch | None:
        """The watch of a DataLoader iterator's workers, installed in place of torch's; None
        where it has no worker processes, or off the main thread (where neither can be)."""
        workers = getattr(batches, "_workers", None)
        if not workers or threading.current_thread() is not threading.main_thread():
            return None
        watch = cls(tuple(int(w.pid) for w in workers), on_stop)
        signal.signal(signal.SIGCHLD, watch.on_child)
        return watch

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        self.waiting = True
        try:
            yield
        finally:
            self.waiting = False

    def on_child(self, _signum: int, _frame: object) -> None:
        if self.look() and self.waiting:
            self.waiting = False
            raise WorkerGone()

    def look(self) -> bool:
        """Look at the workers: whether one was found stopped or failed just now."""
        news = False
        for pid in self.pids:
            end = ended(pid)
            if end is None or (end.signal is None and end.status == 0):
                continue
            if end.is_stop and self.stopped is None:
                self.stopped = end
                self.on_stop(end)
                news = True
            elif not end.is_stop and self.failure is None:
                self.failure = end
                news = True
        return news


class WorkerGone(Exception):
    """A worker died while the producer waited for a batch (`WorkerWatch.interruptible`)."""
