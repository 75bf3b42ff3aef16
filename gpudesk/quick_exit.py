"""The end of a process that imported torch, without tearing torch down.

After its atexit handlers, an interpreter's exit clears every module and then runs libtorch's
own static destructors: some 0.3-0.4 s of CPU in each process that imported torch (`python -c
"import torch"`: 1.7 CPU-s, 1.26 without it), paid by every loader producer, pre-pass and
training job gpudesk starts, for nothing a finished process needs. `leave` ends such a process
as the interpreter would up to that point (threading's exit hooks run and its other
non-daemon threads joined, its atexit handlers run, its standard streams flushed), then at
once with the same exit status.

Only for a process's own entry point (`python -m gpudesk`, a workload's `__main__`): never
from a function a host process calls, which it would end."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def leave(code: object) -> None:
    """End the process with `code` (as `sys.exit(code)` would) where it imported torch; return
    where it did not, where `code` is no exit status, where this is not the main thread, or
    where a standard stream cannot be flushed (the usual exit then says so)."""
    if "torch" not in sys.modules or threading.current_thread() is not threading.main_thread():
        return
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        return  # a message: the usual exit prints it
    # What the interpreter's own exit does first, in its order: threading's exit hooks (a
    # ThreadPoolExecutor's, which stop its idle workers), its non-daemon threads joined, then
    # the atexit handlers
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(status & 0xFF)


def run_and_leave(main: Callable[[], object]) -> NoReturn:
    """`sys.exit(main())` for a `__main__`, its exit `leave`'s: also where `main` exits by
    raising SystemExit (a signal's handler)."""
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    leave(code)
    sys.exit(code)  # type: ignore[arg-type]
