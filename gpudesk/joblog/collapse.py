"""Cutting the head off a file that a job is still appending to, without losing a byte.

Copy-truncate (copy the log, then truncate it) loses whatever the job writes between the end
of the copy and the truncation: logrotate's `copytruncate` documents the same window. Linux's
`fallocate(FALLOC_FL_COLLAPSE_RANGE)` removes a range of a file and shifts the rest down
under the inode's lock, the same lock every write() takes, so an O_APPEND write lands wholly
before the cut (and is shifted down with the rest) or wholly after it, at the new end: nothing
is lost, and the job notices nothing. The range must start at 0 here, be a multiple of the
file system's block size and end before the file's end (fallocate(2)).

ext4 and XFS support it; tmpfs, NFS and others do not (EOPNOTSUPP). Most of those can punch a
hole instead (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: tmpfs; NFS 4.2 as its DEALLOCATE):
the head's blocks are freed, so the disk use stays capped, but nothing moves and the file's
size stays as it was; its data then begins at the hole's end, which the caller records (readers
start there). A write is never lost either: an O_APPEND write lands at the end, always past the
hole. The price: the file's apparent size (`ls -l`) keeps growing, and reading it from 0 reads
the hole as NUL bytes. Where neither call works the caller falls back to copy-truncate. A file
system found not to support a call is remembered for the process's life, so a rotation there
does not copy twice each time.
"""

from __future__ import annotations

import errno
import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

FALLOC_FL_KEEP_SIZE = 0x01  # linux/falloc.h
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_COLLAPSE_RANGE = 0x08

# What fallocate says where collapsing is not possible (no support, alignment, no such call):
# the caller then rotates the old way.
UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, errno.ENOTSUP})

_unsupported_devices: set[int] = set()  # cannot collapse
_unpunchable_devices: set[int] = set()  # cannot punch a hole either


@functools.cache
def _fallocate() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's fallocate, found at the first cut: the engine and most commands import the job
    log (and ctypes, ~2 ms) without ever cutting one."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    call = getattr(libc, "fallocate64", None) or getattr(libc, "fallocate", None)
    if call is not None:
        call.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
        call.restype = ctypes.c_int
    return call


def collapsible_end(fd: int, size: int) -> int | None:
    """Where a head of the file of `size` bytes may be cut: the last block boundary before its
    end; None where it cannot be (a file system known not to support it, or under a block)."""
    return _head_end(fd, size, _unsupported_devices)


def punchable_end(fd: int, size: int) -> int | None:
    """Where a hole over the head of the file of `size` bytes may end, as `collapsible_end`
    (a block boundary, so that every block before it is freed, none zeroed in part); None on
    a file system known not to punch holes."""
    return _head_end(fd, size, _unpunchable_devices)


def _head_end(fd: int, size: int, unsupported: set[int]) -> int | None:
    if _fallocate() is None or os.fstat(fd).st_dev in unsupported:
        return None
    block = os.fstatvfs(fd).f_bsize
    if block <= 0:
        return None
    end = (size - 1) // block * block
    return end if end > 0 else None


def collapse_head(fd: int, length: int) -> bool:
    """Remove the file's first `length` bytes (a `collapsible_end`), shifting the rest down.
    False where the file system does not support it (remembered); other errors raise."""
    return _call(fd, FALLOC_FL_COLLAPSE_RANGE, length, _unsupported_devices)


def punch_head(fd: int, length: int) -> bool:
    """Free the file's first `length` bytes (a `punchable_end`): they read as NULs from now
    on, and the file's size and the rest of it stay as they are. From 0, not from the end of
    an earlier hole: punching one again is cheap, and no reader reads before its end. False
    where the file system does not support it (remembered); other errors raise."""
    return _call(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, length, _unpunchable_devices)


def _call(fd: int, mode: int, length: int, unsupported: set[int]) -> bool:
    import ctypes  # loaded by _fallocate

    fallocate = _fallocate()
    assert fallocate is not None
    if fallocate(fd, mode, 0, length) == 0:
        return True
    code = ctypes.get_errno()
    if code in UNSUPPORTED:
        unsupported.add(os.fstat(fd).st_dev)
        return False
    raise OSError(code, os.strerror(code))
