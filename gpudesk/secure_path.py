"""The "secure path" rule for what root makes and writes (OpenSSH's StrictModes, systemd's
safe path resolution): every folder on the way to a system engine's state folder and socket is
root's and writable by root alone. A member who owns or can write a folder on the way can move
root's folder aside and put one of hers, holding a link, in its place; root would then create
its folders and files (a job's records, her log) wherever that link points.

One exception, as both of those make it: a folder others may write but with the sticky bit
(/tmp, /dev/shm) where the next name on the way is root's, since no one else may rename or
remove root's names there. A link on the way is followed only where it is root's (in such a
folder), and its target is held to the same rule.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

_MAX_LINKS = 40  # as the kernel's ELOOP: links followed on one path


def insecure_step(path: Path, owner_text: Callable[[int], str], make: bool = False) -> str | None:
    """Why `path` (absolute) lies where someone other than this process's user could change
    what it names, as the words that follow it in a sentence ("lies under /home/ada, which
    belongs to ada (uid 1001)"); None when every folder on the way is this user's and writable
    by it alone (or sticky, with the next name this user's). The last name is not followed
    (the caller checks it is no link). `make`: folders missing on the way are made (0755), one
    at a time, each checked before the next is made in it."""
    me = os.geteuid()
    folder, st = Path("/"), os.lstat("/")
    names, links = [*path.parts[1:]], 0
    while names:
        name = names.pop(0)
        if name == "..":
            folder = folder.parent
            st = os.lstat(folder)
            continue
        if st.st_uid != me:
            return f"lies under {folder}, which belongs to {owner_text(st.st_uid)}"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            mode = st.st_mode & 0o7777
            return f"lies under {folder}, which others than its owner may write (mode {mode:o})"
        if not names:
            return None  # the last name: the caller makes it, or checks it is its own
        child, made = folder / name, False
        try:
            child_st = os.lstat(child)
        except FileNotFoundError:
            if not make:
                return None  # nothing below it exists yet
            with contextlib.suppress(FileExistsError):
                os.mkdir(child, 0o700)
            child_st, made = os.lstat(child), True
        except NotADirectoryError:
            return None  # under a file: the caller's own check says so
        # in a sticky folder others may write (/tmp), only a name of this user's is safe to
        # go through; and a link is followed only where it is this user's
        if child_st.st_uid != me and (st.st_mode & 0o022 or stat.S_ISLNK(child_st.st_mode)):
            return f"lies under {child}, which belongs to {owner_text(child_st.st_uid)}"
        if stat.S_ISLNK(child_st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                return f"is reached through more than {_MAX_LINKS} links"
            target = Path(os.readlink(child))
            if target.is_absolute():
                folder, st = Path("/"), os.lstat("/")
            names = [*target.parts[1 if target.is_absolute() else 0 :], *names]
            continue
        if made and stat.S_ISDIR(child_st.st_mode):
            os.chmod(child, 0o755)  # others reach what is below it (a socket, their logs)
        folder, st = child, child_st
    return None


def insecure_text(folder: Path, problem: str, state: bool) -> str:
    """Why a system engine's state folder (else its socket's) is refused: `problem`, from
    `insecure_step`, says where a member could change what the path names."""
    what, option = ("state", "--state-dir") if state else ("socket", "--socket")
    return (
        f"the system engine's {what} folder {folder} {problem}: whoever owns or may write a "
        "folder on the way can move what is in it aside and put a link there, and root would "
        "make the engine's folders and files where it points. Nothing was changed. Name with "
        f"{option} a path whose every folder is root's and writable by root alone (in a sticky "
        f"folder such as /tmp, the next folder root's), as the default {what} folder is."
    )
