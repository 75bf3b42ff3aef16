"""A job's umask: the file mode creation mask its command runs with, its submitter's, as Slurm's
sbatch records hers in SLURM_UMASK and the job applies it. So what a job writes in a group's
shared folder is as readable by the group as what she writes there from her shell (docs/shared-
station.md). The client reads it (`current_umask`), the engine checks it (`check_umask`, and
the `submit` request's own bounds) and keeps it in the job's spec, the wrapper applies it."""

from __future__ import annotations

import os
from typing import Any

from gpudesk.core.field_checks import describe

MAX_UMASK = 0o777


def check_umask(value: Any) -> int:
    """A umask as a job's spec holds it: an integer from 0 to 0o777 (a JSON number: 0o027 is
    23). Raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_UMASK:
        raise ValueError(
            "expected a umask, a number from 0 to 0o777 (511) whose bits new files are "
            f"created without, found {describe(value)}"
        )
    return value


def umask_text(mask: int) -> str:
    """A umask as the shell's `umask` prints it: 0027."""
    return f"{mask:04o}"


def current_umask() -> int:
    """This process's umask, left as it is. Linux says it in /proc/self/status (since 4.7);
    elsewhere the classic read, os.umask setting a value while it reads the old one, which is
    set back at once (a file another thread created in between would get no mask at all, hence
    /proc first: the desk submits from a worker thread)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & MAX_UMASK
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # the most private while it is being read
    os.umask(mask)
    return mask
