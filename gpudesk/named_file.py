"""A file the user names (a trace, a truth or calibration file, a config file), read in full but
never without bound.

What a user names on her own command line is read as she gave it: a link is followed, a pipe is
read (`gpudesk simulate <(zcat day.json.gz)`), as `cat` would. But a device or a pipe reports no
size up front, and `gpudesk simulate /dev/zero` read until memory ran out and ended in a
MemoryError traceback. So at most `limit` + 1 bytes are read; more is `FileTooLarge`, one
sentence with the size and the limit. (A file root reads from where a member can write is
`gpudesk.untrusted`'s: no link followed, no FIFO waited on, the owner checked.)

A leaf module (stdlib only): the policy, the CLI and the profile reader use it alike.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class FileTooLarge(ValueError):
    """The file holds more than its kind may: one sentence saying how much and the limit."""


def size_text(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MiB ({n:,} bytes)"
    return f"{n:,} bytes"


def read_named(path: str | os.PathLike[str], limit: int, kind: str) -> bytes:
    """The bytes of `path`, at most `limit` of them (`kind` names what it is in the sentence:
    "a trace"). Raises OSError as `open` does (missing, permission denied, a directory) and
    FileTooLarge: a regular file's size is checked before reading, a pipe's or a device's as
    it is read."""
    info = os.stat(path)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(21, "Is a directory", os.fsdecode(path))
    if stat.S_ISREG(info.st_mode) and info.st_size > limit:
        raise FileTooLarge(too_large(info.st_size, limit, kind))
    with open(Path(path), "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"it holds more than {size_text(limit)}, the most {kind} may be")
    return data


def too_large(size: int, limit: int, kind: str) -> str:
    return f"the file is {size_text(size)}; {kind} may be at most {size_text(limit)}"
