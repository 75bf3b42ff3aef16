"""Opening a file that sits where a user can write, for a process that is not that user (root
serving her log, an engine reading a record in her folder): the primitives of the rule in
gpudesk.trust (docs/security.md), in a leaf module so that gpudesk.joblog, which the
engine imports, uses them too.

`open_untrusted` opens with `O_NOFOLLOW | O_NONBLOCK` (a link is not followed, a FIFO does not
block the open), then checks the file is a regular file with one name, of the expected owner;
the caller parses what it reads as untrusted input.
"""

from __future__ import annotations

import errno
import os
import stat

# How much root reads of a record a user can write (a rotation record, a reply line): more is
# not a record of ours.
RECORD_MAX_BYTES = 64 * 1024


class UntrustedFileError(OSError):
    """A file root was to read from a place a user can write is not what it should be."""


# Whose a file must be: one uid, any of several (a record root or the engine's own user may have
# written), or None (any owner: a personal engine's own files).
Owners = int | frozenset[int] | None


def open_untrusted(path: str | os.PathLike[str], owner_uid: Owners, flags: int = 0) -> int:
    """Open a file that sits where a user can write, for reading (plus `flags`): never through a
    link, never blocking on a FIFO, and only a regular file with one name owned by `owner_uid`
    (None: any owner, for a personal engine's own files). Returns the fd (close-on-exec).
    Raises FileNotFoundError when there is nothing there, UntrustedFileError when what is
    there is not such a file."""
    access = flags if flags & (os.O_WRONLY | os.O_RDWR) else os.O_RDONLY | flags
    try:
        fd = os.open(path, access | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFileError(errno.ELOOP, "a link, not followed", str(path)) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a socket; a folder asked for writing
            raise UntrustedFileError(exc.errno, "not a regular file", str(path)) from None
        raise
    try:
        check_untrusted(fd, owner_uid, str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_untrusted(fd: int, owner_uid: Owners, what: str) -> os.stat_result:
    """The checks of `open_untrusted` on an open fd; its stat."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UntrustedFileError(errno.EPERM, "not a regular file", what)
    if st.st_nlink != 1:
        raise UntrustedFileError(errno.EPERM, "a file with a second name (a hard link)", what)
    allowed = frozenset([owner_uid]) if isinstance(owner_uid, int) else owner_uid
    if allowed is not None and st.st_uid not in allowed:
        expected = " or ".join(str(uid) for uid in sorted(allowed))
        raise UntrustedFileError(
            errno.EPERM, f"owned by uid {st.st_uid}, not by uid {expected}", what
        )
    return st


def read_untrusted(
    path: str | os.PathLike[str], owner_uid: Owners, max_bytes: int = RECORD_MAX_BYTES
) -> bytes:
    """The whole of a small file that sits where a user can write (`open_untrusted`); raises
    UntrustedFileError when it is larger than `max_bytes`."""
    fd = open_untrusted(path, owner_uid)
    try:
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UntrustedFileError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
    return data
