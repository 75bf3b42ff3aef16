"""Ctrl-C that Python swallowed, noticed.

Python raises KeyboardInterrupt from its SIGINT handler in whatever code runs when the signal
arrives. When that code is a callback Python calls for itself — a weakref callback, such as the
one importlib uses to drop a module's import lock, a `__del__`, a finalizer — the exception
cannot propagate: Python prints "Exception ignored in: …" and goes on. A `gpudesk run` hit so
would keep following its jobs as if the Ctrl-C had never come (seen once in CI, with the
interrupt landing on an import half a second into the run).

The ledger counts the interrupts its handler raised; code that handles KeyboardInterrupt says
`seen()`, and the long loops call `check()`, which raises KeyboardInterrupt again for one that
nobody saw. Only Python's own handler is replaced, only on the main thread (where signal
handlers run), so a caller that set SIGINT otherwise (ignored, as a shell's background job is
started) keeps its choice.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


class InterruptLedger:
    """SIGINT → KeyboardInterrupt, as Python's default handler, with a count of those raised
    and not yet seen."""

    def __init__(self) -> None:
        self._unseen = 0
        self._installed = False

    def install(self) -> None:
        """Handle SIGINT here when Python's own handler has it (else leave it as it is)."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._interrupted)
            self._installed = True

    def uninstall(self) -> None:
        """Python's own handler back (tests; a CLI process keeps the ledger to its end)."""
        if self._installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self._installed = False
        self._unseen = 0

    def _interrupted(self, signum: int, frame: FrameType | None) -> None:
        self._unseen += 1
        raise KeyboardInterrupt

    def seen(self) -> None:
        """Called where a KeyboardInterrupt is handled: every interrupt so far reached code."""
        self._unseen = 0

    def check(self) -> None:
        """Raise KeyboardInterrupt for an interrupt raised where no code could catch it."""
        if self._unseen:
            self._unseen = 0
            raise KeyboardInterrupt


# The process's one: installed by the CLI's entry point, read by the loops that wait long.
INTERRUPTS = InterruptLedger()
