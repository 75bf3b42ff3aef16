"""Lines on their way to a tracking worker, written without ever blocking the engine.

The worker's stdin is a non-blocking pipe: what it cannot take now waits here, and the engine's
loop writes more when the pipe has room (POLLOUT). The outbox is bounded: past `max_lines`, the
oldest metric lines ("droppable") are let go and counted, so a worker that stopped reading
costs the engine a bounded amount of memory. The lines that carry a run's life (create, status,
its end) are never dropped: there are few of them, and the store keeps what is needed to send
them again after a restart.
"""

from __future__ import annotations

import os
from collections import deque

MAX_LINES = 10_000  # ~3 MB of metric lines: a few minutes of samples for a busy station


class Outbox:
    def __init__(self, max_lines: int = MAX_LINES) -> None:
        self.max_lines = max_lines
        self.lines: deque[tuple[bytes, bool]] = deque()  # (line, droppable)
        self.partial = b""  # the rest of a line the pipe took only part of: it goes first
        self.dropped = 0  # droppable lines let go since the outbox was made

    def __len__(self) -> int:
        return len(self.lines) + (1 if self.partial else 0)

    @property
    def pending(self) -> bool:
        return bool(self.lines or self.partial)

    def put(self, line: bytes, droppable: bool = False) -> None:
        self.lines.append((line, droppable))
        if len(self.lines) > self.max_lines:
            self._drop_one()

    def put_first(self, lines: list[bytes]) -> None:
        """Lines that must reach a new worker before anything queued for it (what it must know
        of the runs the updates waiting here are for). Only after `restart`: no part line is
        in the way then."""
        assert not self.partial, "a part line must be finished first"
        self.lines.extendleft((line, False) for line in reversed(lines))

    def _drop_one(self) -> None:
        for index, (_line, droppable) in enumerate(self.lines):
            if droppable:
                del self.lines[index]
                self.dropped += 1
                return

    def write_to(self, fd: int) -> int:
        """Write what the pipe takes now; the bytes written. Raises BrokenPipeError (the worker
        is gone) and other OSErrors for the caller to handle."""
        written = 0
        while True:
            if not self.partial:
                if not self.lines:
                    return written
                self.partial = self.lines.popleft()[0]
            try:
                n = os.write(fd, self.partial)
            except BlockingIOError:
                return written
            written += n
            self.partial = self.partial[n:]

    def restart(self) -> None:
        """A new worker: half a line sent to the old one must not reach it."""
        self.partial = b""
