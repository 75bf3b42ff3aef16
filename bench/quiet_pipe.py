"""A bench's output piped into `head` (or any reader that leaves early) ends quietly: the
script's exit, not a BrokenPipeError traceback (the same as gpudesk's training workloads,
gpudesk/workloads/common.py). Imported by each script's `__main__` block (bench/ is on
sys.path when a script runs)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn

from gpudesk.quick_exit import leave

EXIT_BROKEN_PIPE = 141  # what a shell reports for a writer killed by SIGPIPE (128 + 13)


def run_main(main: Callable[[], int | str | None]) -> NoReturn:
    """`sys.exit(main())`, with a reader gone from stdout taken as the end of the run; a
    script that imported torch ends without tearing it down (gpudesk.quick_exit)."""
    try:
        try:
            code = main()
        except SystemExit as done:  # argparse's --help and its errors end so
            code = done.code
        sys.stdout.flush()  # inside the try: the interpreter's own last flush would raise
    except BrokenPipeError:
        # point stdout at /dev/null so the interpreter's final flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)
    leave(code)  # a script that imported torch: not torn down (~0.4 CPU-s)
    sys.exit(code)
