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


class _Unnamed(UntrustedFileError):
    """The file opened has no name left: it was replaced (os.replace) or removed since."""


# Whose a file must be: one uid, any of several (a record root or the engine's own user may have
# written), or None (any owner: a personal engine's own files).
Owners = int | frozenset[int] | None


# How often `open_untrusted` opens a name again whose file was replaced as it opened it
# (assumption: a writer that replaces it that often in a row is not one of ours)
REOPENS = 5


def open_untrusted(
    path: str | os.PathLike[str], owner_uid: Owners, flags: int = 0, made_here: bool = False
) -> int:
    """Open a file that sits where a user can write, for reading (plus `flags`): never through a
    link, never blocking on a FIFO, and only a regular file with one name owned by `owner_uid`
    (None: any owner, for a personal engine's own files). Returns the fd (close-on-exec).
    `made_here`: the file is one this process's user made at `path` for another user (a job's
    log, made by root for her job): it may have several names where its folder is this user's
    and no one else's to write (`_names_are_ours`). Raises FileNotFoundError when there is
    nothing there, UntrustedFileError when what is there is not such a file."""
    access = flags if flags & (os.O_WRONLY | os.O_RDWR) else os.O_RDONLY | flags
    access |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    # A file written by replacing it (os.replace, as a producer's info file is every second)
    # can lose its name between this open and the check: it then has no name (st_nlink 0),
    # which is no second name; its successor is opened instead (tests/security/
    # test_untrusted_open.py).
    for _ in range(REOPENS):
        fd = _open_checked(path, access, owner_uid, made_here)
        if fd is not None:
            return fd
    raise FileNotFoundError(errno.ENOENT, "removed each time it was opened", str(path))


def _open_checked(
    path: str | os.PathLike[str], access: int, owner_uid: Owners, made_here: bool
) -> int | None:
    """`open_untrusted`'s open and checks, once; None where the file lost its name meanwhile."""
    folder = None
    try:
        # `made_here`: the folder checked is the one the name is looked up in, by its fd (a
        # link to it is followed, as a plain open follows one: the folder reached is checked)
        if made_here:
            folder = os.open(os.path.dirname(path) or ".", _FOLDER_FLAGS)
            fd = os.open(os.path.basename(path), access, dir_fd=folder)
        else:
            fd = os.open(path, access)
    except OSError as exc:
        if folder is not None:
            os.close(folder)
        if exc.errno == errno.ELOOP:
            raise UntrustedFileError(errno.ELOOP, "a link, not followed", str(path)) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a socket; a folder asked for writing
            raise UntrustedFileError(exc.errno, "not a regular file", str(path)) from None
        raise
    try:
        names_ok = folder is not None and _names_are_ours(folder)
        check_untrusted(fd, owner_uid, str(path), names_ok)
    except _Unnamed:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    finally:
        if folder is not None:
            os.close(folder)
    return fd


# O_PATH: the folder is only looked in (openat) and looked at (fstat), never listed, so a member
# who may only pass through it (a station's attempt folder, 0711) opens her own log through it
_FOLDER_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def _names_are_ours(folder: int) -> bool:
    """Whether only this process's user can make names in `folder` (its own, no group or other
    write bit): then what stands at a name there is what it made, so a file it made there
    for another user is still that file when she has given it other names elsewhere. She can:
    fs.protected_hardlinks lets a user hard-link a file she owns from any folder of hers on its
    file system, and her job can link its own stdout through /proc/self/fd even where she
    cannot reach the folder. Refusing such a file let her lift the log cap (a log root may not
    rotate grows for good); acting on it through the fd opened here never goes through a name
    of hers, and only ever on that file (docs/security.md). An ACL entry that lets another
    user write shows in the group bits, which hold the ACL's mask (POSIX.1e)."""
    st = os.fstat(folder)
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def check_untrusted(
    fd: int, owner_uid: Owners, what: str, names_ok: bool = False
) -> os.stat_result:
    """The checks of `open_untrusted` on an open fd; its stat. `names_ok`: the file may have
    several names unless it is this process's user's own (`_names_are_ours`: a file of its own
    there may be one its own job swapped in, a personal engine's)."""
    st = os.fstat(fd)
    if st.st_nlink == 0:
        raise _Unnamed(errno.ENOENT, "replaced or removed as it was opened", what)
    if not stat.S_ISREG(st.st_mode):
        raise UntrustedFileError(errno.EPERM, "not a regular file", what)
    if st.st_nlink != 1 and not (names_ok and st.st_uid != os.geteuid()):
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
