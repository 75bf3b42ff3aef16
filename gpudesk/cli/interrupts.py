"""Ctrl-C that Python swallowed, noticed.

Python raises KeyboardInterrupt from its SIGINT handler in whatever code runs when the signal
arrives. When that code is a callback Python calls for itself — a weakref callback, such as the
one importlib uses to drop a module's import lock, a `__del__`, a finalizer — the exception
cannot propagate: Python prints "Exception ignored in: …" and goes on. A `gpudesk run` hit so
would keep following its jobs as if the Ctrl-C had never come (seen in CI, with the interrupt
landing on an import 0.1-0.5 s into the run).

The ledger counts the interrupts its handler raised; code that handles KeyboardInterrupt says
`seen()`, and the long loops call `check()`, which raises KeyboardInterrupt again for one that
nobody saw. Python's report of such a swallowed interrupt ("Exception ignored in: …", with a
traceback through the handler) is not printed: the user pressed Ctrl-C, nothing went wrong, and
the ledger has it (`sys.unraisablehook`; any other exception Python cannot raise is reported as
Python would). Only Python's own handler is replaced, only on the main thread (where signal
handlers run), so a caller that set SIGINT otherwise (ignored, as a shell's background job is
started) keeps its choice.

The entry points install it before they import anything else, so this module imports nothing
Python has not loaded as it started: Python's own `_signal`, which `signal` wraps in enums it
builds as it is imported (about 1 ms, ten times that on a loaded machine), a window in which a
Ctrl-C would be swallowed uncounted or print a traceback from a frame of ours.
"""

from __future__ import annotations

# Python's C module, set up as the interpreter starts (it installs the SIGINT handler): no stubs
import _signal  # type: ignore[import-not-found]
import sys
from types import FrameType


class InterruptLedger:
    """SIGINT → KeyboardInterrupt, as Python's default handler, with a count of those raised
    and not yet seen."""

    def __init__(self) -> None:
        self._unseen = 0
        self._installed = False
        self._python_hook = sys.unraisablehook

    def install(self) -> None:
        """Handle SIGINT here when Python's own handler has it (else leave it as it is)."""
        if self._installed or _signal.getsignal(_signal.SIGINT) is not _signal.default_int_handler:
            return
        try:
            _signal.signal(_signal.SIGINT, self._interrupted)
        except ValueError:  # not the main thread, where Python runs signal handlers
            return
        self._installed = True
        self._python_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable

    def uninstall(self) -> None:
        """Python's own handler back (tests; a CLI process keeps the ledger to its end)."""
        if self._installed:
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
            sys.unraisablehook = self._python_hook
            self._installed = False
        self._unseen = 0

    def _unraisable(self, unraisable: sys.UnraisableHookArgs) -> None:
        """Python's report of an exception it could not raise: not printed for an interrupt
        the ledger counted (check() raises it where code can take it)."""
        if unraisable.exc_type is KeyboardInterrupt and self._unseen:
            return
        self._python_hook(unraisable)

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
