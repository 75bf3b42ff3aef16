"""Whether the station's members can run the gpudesk a system engine was started from.

A station's engine is root's, but its members run the same installation (their `gpudesk`, and
the tracking workers and loader producers the engine starts as them on its own Python). A
virtual environment made from a Python under a folder only root may enter (pyenv's
`/root/.pyenv`, mode 0700) starts the engine fine and leaves every member with `Permission
denied` from her shell, which says nothing of why. `engine start --system` and `print-unit`
say so at once, naming the folder (docs/shared-station.md, "Install it")."""

from __future__ import annotations

import grp
import os
import stat
import sys
from pathlib import Path

from gpudesk.text import printable_message


def _passable(mode: int, gid: int, station_gid: int | None) -> bool:
    """A member (not root, not the owner) may enter the folder or run the file of `mode`:
    by its bits for others, or for its group where that group is the station's."""
    if mode & stat.S_IXOTH:
        return True
    return station_gid is not None and gid == station_gid and bool(mode & stat.S_IXGRP)


def first_closed(path: Path, station_gid: int | None) -> tuple[Path, os.stat_result] | None:
    """The first folder on the way to `path` (links resolved), or `path` itself, that a member
    of the group `station_gid` may not pass; None where she reaches it."""
    real = Path(os.path.realpath(path))
    for step in (*reversed(real.parents), real):
        try:
            info = step.stat()
        except OSError:
            return None  # not there: nothing this check can say (its caller runs from it)
        if not _passable(info.st_mode, info.st_gid, station_gid):
            return step, info
    return None


def members_cannot_run(group: str) -> str | None:
    """One paragraph where the group's members cannot run the Python this gpudesk runs on (or
    reach its environment), None where they can."""
    try:
        station_gid: int | None = grp.getgrnam(group).gr_gid
    except KeyError:
        station_gid = None
    for target in (Path(sys.executable), Path(sys.prefix)):
        closed = first_closed(target, station_gid)
        if closed is None:
            continue
        folder, info = closed
        return printable_message(
            f"warning: the members of {group} cannot run this gpudesk: {folder} (mode "
            f"{stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid}) lies on the way to its "
            f"Python {os.path.realpath(target)}. The engine runs, but each member's `gpudesk` "
            "fails with `Permission denied`, and the tracking workers and loader producers it "
            "starts as them cannot start. Install gpudesk in a virtual environment of a Python "
            "every user can run (`sudo /usr/bin/python3 -m venv /opt/gpudesk/venv`), then "
            "start the engine from it."
        )
    return None
