"""The station's drain (`gpudesk drain`, as Slurm drains a node and pueue pauses its queue): who
drained it, when and why, as `status`, `drain` and `undrain` answer it."""

from __future__ import annotations

import time

from gpudesk.core.wire.base import WireModel
from gpudesk.text import printable_line


class DrainView(WireModel, frozen=True):
    """The station is drained: the engine starts no new job until it is undrained; running
    jobs go on and submissions queue."""

    by: str  # the user name of who drained it
    uid: int
    since: float  # wall clock
    reason: str | None = None

    def line(self) -> str:
        """`drained by ada since 2026-12-01 14:02 (swap a PSU)`: one line, wherever it is shown
        (`queue`, `top`, `engine status`), so a newline or an escape in the admin's reason is
        spelled out (`\\x0a`) rather than breaking the line or the terminal."""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.since))
        reason = f" ({printable_line(self.reason)})" if self.reason else ""
        return f"drained by {printable_line(self.by)} since {when}{reason}"


class DrainResult(WireModel, frozen=True):
    """`drain` / `undrain`: the drain in force after the request (None: not drained), whether
    the request changed it, and the drain `undrain` lifted."""

    drain: DrainView | None = None
    changed: bool = False
    ended: DrainView | None = None
