"""A full disk under GPUDESK_HOME: telling it apart from other failures, and saying so.

SQLite says "database or disk is full" (SQLITE_FULL), the OS ENOSPC or EDQUOT; opening the
database on a full tmpfs can also fail as a plain "disk I/O error" (the shared-memory file cannot
grow), which counts as a full disk when the file system has (almost) no space left.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

EXIT_DISK_FULL = 5  # the engine's exit status when it cannot start because the disk is full
LOW_BYTES = 1 << 20  # under this much free space an I/O error is taken for a full disk
_SQLITE_FULL = 13


def free_bytes(path: str | Path) -> int | None:
    """Space left for an unprivileged writer on the file system holding `path`."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def is_full(exc: BaseException, path: str | Path) -> bool:
    """Did `exc` (or what caused it) come from a full disk? `path`: where the state lives."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(current, sqlite3.Error):
            if getattr(current, "sqlite_errorcode", None) == _SQLITE_FULL:
                return True
            if "disk is full" in str(current):
                return True
            if "disk I/O error" in str(current):
                free = free_bytes(path)
                return free is not None and free < LOW_BYTES
        current = current.__cause__ or current.__context__
    return False


def _where(home_root: Path) -> str:
    """The full disk, named by the folder it holds: the engine's state folder, which
    GPUDESK_HOME names for a personal engine and --state-dir for a system one."""
    free = free_bytes(home_root)
    left = "" if free is None else f", {free // 1024} KiB free"
    return f"the disk holding gpudesk's state folder ({home_root}{left}) is full"


def not_recorded_text(home_root: Path) -> str:
    """What a reply adds where it did what it was asked but the event saying so could not be
    stored (a signal, sent all the same: a retry would send it twice)."""
    return f" (not in its events: {_where(home_root)})"


def running_text(home_root: Path) -> str:
    """For the engine's log, once while the disk stays full."""
    return (
        f"{_where(home_root)}: job outcomes cannot be recorded in the database now. Running jobs "
        "keep running and each finished one's outcome waits in its attempt folder; no job is "
        "marked failed or started again meanwhile. The engine retries every few seconds: free "
        "some space and it catches up."
    )


def unsaved_text(home_root: Path) -> str:
    """The mark of a job whose end is known but not yet stored, for the views."""
    return f"not yet saved: {_where(home_root)}; saved when there is room"


def store_text(home_root: Path, unsaved: int) -> str | None:
    """What `gpudesk engine status` says of a store it cannot write now: the disk holding it
    is (almost) full, or `unsaved` job ends wait to be stored; None where neither."""
    free = free_bytes(home_root)
    full = free is not None and free < LOW_BYTES
    if not full and not unsaved:
        return None
    why = _where(home_root) if full else "the last write was refused (the engine log says why)"
    waiting = (
        f"; {unsaved} ended job(s) not yet saved (shown as they ended, marked; their outcomes "
        "wait in memory and in their attempt folders, and are saved when there is room)"
        if unsaved
        else "; a job's end or a submission cannot be saved now"
    )
    return f"cannot be written: {why}{waiting}"


def request_text(home_root: Path, nothing: str = "nothing was changed") -> str:
    """What a request that could not write the store (a full disk) is answered: one paragraph.
    `nothing`: what did not happen ("nothing was queued")."""
    return (
        f"the store could not be written: {_where(home_root)}, so {nothing}. Free some space "
        "on that disk and try again."
    )


def job_text(home_root: Path) -> str:
    """A job-control outcome (cancel, hold, …) where the store could not be written."""
    return (
        f"nothing changed: the store could not be written: {_where(home_root)}; free some "
        "space and retry"
    )


def start_text(home_root: Path) -> str:
    """Why the engine would not start, for whoever started it."""
    return (
        f"the engine cannot start: {_where(home_root)}. Running jobs keep running and each "
        "finished one's outcome waits in its attempt folder; nothing is lost. Free some space "
        "and start the engine again (gpudesk engine start)."
    )
