"""A file the user names (a trace, a truth or calibration file, a config file), read in full but
never without bound.

What a user names on her own command line is read as she gave it: a link is followed, a pipe is
read (`gpudesk simulate <(zcat day.json.gz)`), as `cat` would. Unlike `cat`, a named pipe that no
program has open for writing is not waited on (`gpudesk run fifo.toml` waited for ever): it is
opened without blocking, and one that gives nothing is an OSError saying so. A device or a
pipe reports no size up front, and `gpudesk simulate /dev/zero` read until memory ran out and
ended in a MemoryError traceback. So at most `limit` + 1 bytes are read, a chunk at a time; more is
`FileTooLarge`, one sentence with the size and the limit. (A file root reads from where a
member can write is `gpudesk.untrusted`'s: no link followed, no FIFO waited on, the owner
checked.)

A leaf module (the stdlib and `gpudesk.units`): the policy, the CLI and the profile reader use
it alike.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any

from gpudesk.units import exact_byte_size

CHUNK_BYTES = 1 << 20  # a pipe or a device is read this much at a time


class FileTooLarge(ValueError):
    """The file holds more than its kind may: one sentence saying how much and the limit."""


def read_named(path: str | os.PathLike[str], limit: int, kind: str) -> bytes:
    """The bytes of `path`, at most `limit` of them (`kind` names what it is in the sentence:
    "a trace"). Raises OSError as `open` does (missing, permission denied, a directory; a
    named pipe that gives nothing: ENODATA) and FileTooLarge: a regular file's size is checked
    before it is read, a pipe's or a device's counted as it is read. Read a chunk at a time, so
    that what is held is what the file has (`read(limit + 1)` allocates the whole limit up
    front, for a 22 KB trace too)."""
    # O_NONBLOCK: the open does not wait for a named pipe's writer; the reads then block, as
    # a pipe with a writer (`<(zcat ...)`) needs, and one with none gives end-of-file at once
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
        os.set_blocking(handle.fileno(), True)
        info = os.fstat(handle.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise FileTooLarge(too_large(info.st_size, limit, kind))
        data = bytearray()
        while len(data) <= limit:
            chunk = handle.read(min(CHUNK_BYTES, limit + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    if not data and stat.S_ISFIFO(info.st_mode):
        raise OSError(errno.ENODATA, "it is a named pipe (FIFO) that gave nothing to read")
    if len(data) > limit:
        raise FileTooLarge(f"it holds more than {exact_byte_size(limit)}, the most {kind} may be")
    return bytes(data)


def read_named_json(
    path: str | os.PathLike[str],
    limit: int,
    kind: str,
    *,
    called: str = "",
    json_kind: str = "JSON",
) -> Any:
    """The JSON value in `path` (`read_named`'s way: at most `limit` bytes). Raises ValueError,
    one sentence: "cannot read {called}{path}: …" (missing, a folder, too large, a FIFO that gave
    nothing), or "{path} is not {json_kind}: …" (not UTF-8, saying where; not JSON). `kind`
    names the file in both ("a trace")."""
    try:
        return json.loads(read_named(path, limit, kind))
    except OSError as exc:
        raise ValueError(f"cannot read {called}{path}: {exc.strerror or exc}") from None
    except FileTooLarge as exc:
        raise ValueError(f"cannot read {called}{path}: {exc}") from None
    except UnicodeDecodeError as exc:  # JSON is UTF-8 (json also reads UTF-16 and -32)
        raise ValueError(
            f"{path} is not {json_kind}: {not_utf8(exc)} is not UTF-8, and {kind} is UTF-8 "
            "text; save it as UTF-8"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not {json_kind}: {exc}") from None
    except RecursionError:  # json recurses once per level: `[[[[…` 100,000 deep
        raise ValueError(f"{path} is not {json_kind}: it is nested too deeply to read") from None


def too_large(size: int, limit: int, kind: str) -> str:
    return f"the file is {exact_byte_size(size)}; {kind} may be at most {exact_byte_size(limit)}"


def not_utf8(exc: UnicodeDecodeError) -> str:
    """Where the bytes a decode refused stop being text, for a sentence that says the file is
    not UTF-8: "byte 0xe9 at offset 15 (line 2, column 12)". (The codec's own words, "'utf-8'
    codec can't decode byte 0xe9 in position 15: invalid continuation byte", tell a user
    neither the line nor what to do.)"""
    data = bytes(exc.object)
    line = data.count(b"\n", 0, exc.start) + 1
    column = exc.start - data.rfind(b"\n", 0, exc.start)
    return f"byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line}, column {column})"
