"""A job attempt's output, capped: `output.log` and the parts rotated out of it.

This module is the log itself; beside it, readers of what a job wrote: `progress` (the
progress lines learning and the remaining time are measured by) and `oom` (whether it died
of a GPU out-of-memory).

In the attempt's folder (`jobs/<id>/<n>/`):

    output.log            what the job writes now: its stdout and stderr, opened O_APPEND
    output.log.N          the Nth part rotated out of it (N counts up: the highest is the
                          newest); only the newest `[station] log_keep` are kept
    output.log.rotation   a small JSON record: where output.log and each kept part sit in the
                          attempt's whole output (the *stream*), as byte positions, and where
                          output.log's data begins (past a punched hole, below)

The engine rotates (`rotate`, called by gpudesk.engine.logcap) when output.log is larger than the
cap: its last `cap` bytes, up to its last block boundary, are copied into output.log.N, and
everything before that boundary is cut off output.log in place (gpudesk.joblog.collapse: the
rest shifts down under the lock every write() takes); the job's O_APPEND writes go on at the
new end, so the job notices nothing and nothing it writes is lost. The cut falls on a block
boundary, not a line's end, so output.log may begin inside a line that the part ends. Where
the file system cannot cut a file's head but can punch a hole over it (tmpfs; NFS 4.2), the
head's blocks are freed instead and nothing moves: output.log keeps its size and its data
begins at the hole's end (`Rotation.data_from`), where every reader starts; nothing is lost
there either. Only where it can do neither does the rotation copy and truncate. Two things can
be lost, both recorded as a gap in the stream where they are known:
- the head of output.log beyond the cap when a check finds it more than a cap over (a job that
  writes faster than the engine looks);
- with copy-truncate only, what the job writes in the instant between the end of the copy and
  the truncation (whole write() calls: the copy reads on until the file stops growing, then
  truncates at once); that one is not known, so not recorded.
The cap is measured against what output.log holds past its hole (`live_size`), not its size.

Readers (`gpudesk logs [-f]`, the desk) address the stream by position (`LogStream`), so a
follower reads across a rotation from the part that now holds what it had not read yet. Readers
hold a shared flock on output.log for one bounded read at a time, the engine an exclusive one
(not waiting: a rotation is tried again at the next check) while it rotates, so a reader never
sees a truncated file with the record of before.
The engine's own reads (its `log` request, the OOM check, the tracked result) take the shared
lock with one try and read on without it when it is held (`wait=False`): they run on the loop
that rotates, so no rotation can be under way, and the only other holder is the job, whose
lock must not stall the engine's loop (issue 36). For the same reason a rotation goes ahead
despite a lock held far longer than any read (`despite_lock`, gpudesk.engine.logcap): else a
job that flocks its own output.log would lift its cap for good.

Who owns what (an engine run by root, a job run as its owner): output.log and its parts are the
owner's; the record is the engine's own (root's, readable by all: it holds byte positions only),
so the owner cannot name the files root reads. Root still reads everything here as something a
user may have planted (gpudesk.untrusted): output.log and each part are opened O_NOFOLLOW |
O_NONBLOCK and must be a regular file of the log's owner (`owner_uid`) with one name (other
names only where root made it in a folder root alone writes: `_open_log`); the
record must be root's or the reader's own, and every field of it is checked (`parse_rotation`).
What is refused raises UntrustedFileError (an OSError), which a reader turns into one line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path
from typing import NamedTuple, TypeGuard

import msgspec

from gpudesk.joblog import collapse
from gpudesk.untrusted import UntrustedFileError, open_untrusted, read_untrusted

RECORD_SUFFIX = ".rotation"
CHUNK_BYTES = 1 << 20  # what one read or copy step holds in memory
RECORD_MODE = 0o644  # byte positions only; the attempt's folder says who may reach them
# Bounds of a record that is believed: the station keeps at most 100 parts
# (station.MAX_LOG_KEEP), and no stream position or part number comes near 2**62.
MAX_RECORD_PARTS = 1000
MAX_RECORD_NUMBER = 2**62


class Part(msgspec.Struct, frozen=True):
    """A rotated-out part: output.log.`number`, holding the stream's bytes [start, end)."""

    number: int
    start: int
    end: int


class Rotation(msgspec.Struct, frozen=True):
    """The record: output.log's data begins at its byte `data_from` (0, or the end of a hole
    punched over its head), which is the stream's byte `base`; `parts` oldest first;
    `rotations` the number of the newest part ever made. A record without `data_from` (written
    before holes were punched) reads as 0: its log has no hole."""

    base: int = 0
    rotations: int = 0
    parts: tuple[Part, ...] = msgspec.field(default_factory=tuple)
    data_from: int = 0

    @property
    def origin(self) -> int:
        """The stream position of output.log's byte 0 (never negative: `data_from` <= `base`,
        as every byte of the hole was the stream's); moved by a cut or a truncation, not by a
        punched hole."""
        return self.base - self.data_from

    def live_size(self, size: int) -> int:
        """What an output.log of `size` bytes holds past its hole: what the cap is measured
        against (0 when its job truncated it below the hole)."""
        return max(0, size - self.data_from)

    @property
    def dropped(self) -> int:
        """Bytes of the stream before output.log that no kept part holds."""
        return self.base - sum(part.end - part.start for part in self.parts)

    def to_json(self) -> str:
        parts = [[p.number, p.start, p.end] for p in self.parts]
        return json.dumps(
            {
                "base": self.base,
                "rotations": self.rotations,
                "parts": parts,
                "data_from": self.data_from,
            }
        )


def part_path(log: str | os.PathLike[str], number: int) -> Path:
    return Path(f"{os.fspath(log)}.{number}")


def record_path(log: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(log)}{RECORD_SUFFIX}")


def read_rotation(log: str | os.PathLike[str]) -> Rotation:
    """The log's rotation record: an empty one when it never rotated, or when what stands at
    the record's path is not a record this process may believe (`_record_bytes`,
    `parse_rotation`). Never raises."""
    try:
        data = _record_bytes(record_path(log))
    except OSError:
        return Rotation()
    return parse_rotation(data)


def _record_bytes(path: Path) -> bytes:
    """The record's bytes, read as untrusted (`read_untrusted`): never through a link or from a
    FIFO, a regular file with one name written by root or by this process's own user (whoever
    rotates the log: the engine), never by the job's owner; at most RECORD_MAX_BYTES."""
    return read_untrusted(path, frozenset({0, os.geteuid()}))


def parse_rotation(data: bytes) -> Rotation:
    """A record's bytes as a Rotation, every field checked: whole non-negative numbers, parts
    numbered 1 to `rotations` in increasing order, each a range of the stream after the one
    before it and before `base`, at most MAX_RECORD_PARTS of them, `data_from` (0 when
    missing) at most `base`. Anything else is no record (an empty Rotation), never an
    exception."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return Rotation()
    if not isinstance(value, dict):
        return Rotation()
    base, rotations, parts = value.get("base"), value.get("rotations"), value.get("parts")
    data_from = value.get("data_from", 0)
    if not (_record_number(base) and _record_number(rotations) and isinstance(parts, list)):
        return Rotation()
    if not (_record_number(data_from) and data_from <= base):
        return Rotation()
    if len(parts) > MAX_RECORD_PARTS:
        return Rotation()
    checked: list[Part] = []
    for entry in parts:
        if not (isinstance(entry, list) and len(entry) == 3 and all(map(_record_number, entry))):
            return Rotation()
        part = Part(*entry)
        after = checked[-1] if checked else Part(0, 0, 0)
        if not (after.number < part.number <= rotations and after.end <= part.start <= part.end):
            return Rotation()
        checked.append(part)
    if checked and checked[-1].end > base:
        return Rotation()
    return Rotation(base, rotations, tuple(checked), data_from)


def _record_number(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 <= value <= MAX_RECORD_NUMBER


def _create(path: Path, like: os.stat_result | None) -> int:
    """A new file of the engine's own: whatever stood at `path` (a leftover, a link) goes
    (unlink acts on the name, never on what a link names). With `like` (a rotated part) it gets
    the owner and the mode of the log, so a job run as its owner can read its rotated parts as
    it reads its log, and no one else can (O_EXCL: the file is new, so the chown acts on
    nothing but what was just made); without (the record) it stays the engine's, RECORD_MODE."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        if like is None:
            os.fchmod(fd, RECORD_MODE)
        else:
            if like.st_uid != os.geteuid():
                os.fchown(fd, like.st_uid, like.st_gid)
            os.fchmod(fd, stat.S_IMODE(like.st_mode) & 0o666)
    except OSError:
        os.close(fd)
        raise
    return fd


def _write_rotation(log: str | os.PathLike[str], record: Rotation) -> None:
    path = record_path(log)
    tmp = _tmp(path)
    fd = _create(tmp, None)
    try:
        os.write(fd, record.to_json().encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _refuse_folder(path: Path) -> None:
    """Raise when a folder stands where a file of the rotation is to be renamed to: found
    before the log is truncated, not after, when the copy could no longer be put in place."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise UntrustedFileError(errno.EISDIR, "a folder, not a file of the log", str(path))


def _open_log(log: str | os.PathLike[str], owner_uid: int | None, flags: int = 0) -> int:
    """output.log or a part, opened as a file a user may have planted (gpudesk.untrusted):
    no link, no FIFO, of `owner_uid` (None: whoever owns it), with one name unless the engine
    made it for the job's owner in a folder only the engine writes (`made_here`: her hard link
    to her log must not lift its cap, nor hide it from her)."""
    return open_untrusted(log, owner_uid, flags, made_here=True)


# A reader outside the engine waits out a rotation (milliseconds) for at most this long before
# it reads on unlocked: assumption, 3 s is far beyond any copy of a log of at most a few caps.
LOCK_TRIES = 300
LOCK_RETRY_S = 0.01


def _lock_shared(fd: int, wait: bool = True) -> None:
    """A reader's lock: waits out a rotation (milliseconds), but reads on unlocked rather than
    hang should something else hold the file locked. `wait=False` (the engine's own reads):
    one try, never a sleep. The engine reads on the loop, the thread that also rotates, so no
    rotation of its own can be under way while it reads: the lock shields readers in other
    processes from the engine, and a lock the engine finds held is the job's (its owner can
    flock her own output.log for as long as she likes), which must not stall every client."""
    for _ in range(LOCK_TRIES if wait else 1):
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if wait:
                time.sleep(LOCK_RETRY_S)


# ------------------------------------------------------------------------------- rotation
def rotate(log: str | os.PathLike[str], cap: int, keep: int, despite_lock: bool = False) -> bool:
    """Rotate `log` when it is larger than `cap` bytes, keeping `keep` parts. Returns whether
    it rotated (False also when a reader holds the lock: the caller tries again later).
    `despite_lock`: rotate even when someone holds the lock, for a lock held far longer than
    any reader's read (the job's own, gpudesk.engine.logcap), which must not lift the cap.
    Measured by what the log holds past its hole (`Rotation.live_size`): its size is at least
    that, so a log no larger than the cap is left at once."""
    try:
        if os.stat(log, follow_symlinks=False).st_size <= cap:
            return False
        # not a link, a FIFO or a second name of another file (gpudesk.untrusted): left alone;
        # the log root made in its own folder is capped whatever names its owner gave it, in
        # place, through this fd (`_open_log`)
        fd = _open_log(log, None, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not despite_lock:
                return False
        st = os.fstat(fd)
        size = st.st_size
        record = read_rotation(log)
        if record.live_size(size) <= cap:
            return False
        number = record.rotations + 1
        for path in _rotation_files(log, number):
            _refuse_folder(path)
        start = _line_start(fd, size - cap) if keep else size  # past any hole: live > cap
        part = part_path(log, number) if keep else None
        # a file system that can neither cut a file's head nor punch a hole: the old way
        cut = (
            _copy_then_cut(fd, start, part, st, punch=False)
            or _copy_then_cut(fd, start, part, st, punch=True)
            or _copy_then_truncate(fd, start, part, st)
        )
        origin = record.origin  # the cut's positions are the log's: in the stream from here
        parts = (*record.parts, Part(number, origin + cut.start, origin + cut.end))
        kept = parts[-keep:] if keep else ()
        _write_rotation(log, Rotation(origin + cut.log_from, number, kept, cut.data_from))
        for gone in parts[: len(parts) - len(kept)]:
            with contextlib.suppress(FileNotFoundError):
                part_path(log, gone.number).unlink()
        return True
    finally:
        os.close(fd)  # also releases the lock


def over_cap(log: str | os.PathLike[str], cap: int) -> bool:
    """Whether the log holds more than `cap` bytes past its hole (`Rotation.live_size`): not
    its size, which a hole punched over its head leaves growing. False when it is gone."""
    try:
        size = os.stat(log, follow_symlinks=False).st_size
    except OSError:
        return False
    return size > cap and read_rotation(log).live_size(size) > cap


def names(log: str | os.PathLike[str]) -> int:
    """How many names output.log has (1 when it is gone): more than one where its owner
    hard-linked it (`_open_log`), which the engine says once."""
    try:
        return os.stat(log, follow_symlinks=False).st_nlink
    except OSError:
        return 1


def _rotation_files(log: str | os.PathLike[str], number: int) -> tuple[Path, ...]:
    """The names a rotation making part `number` creates or replaces."""
    part, record = part_path(log, number), record_path(log)
    return part, _tmp(part), record, _tmp(record)


def _tmp(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def _line_start(fd: int, offset: int) -> int:
    """Where the first line that starts at or after `offset` begins (within 64 KiB; else
    `offset`): a part that keeps only the log's end begins with a whole line."""
    if offset <= 0:
        return 0
    newline = os.pread(fd, 64 * 1024, offset - 1).find(b"\n")
    return offset + newline if newline >= 0 else offset


class _Cut(NamedTuple):
    """What a rotation did, in the log's positions before it: the part holds [start, end), and
    output.log's data now begins at `log_from` (past `end` where what was between is a gap);
    in its positions after it, at `data_from` (0, or the end of the hole punched)."""

    start: int
    end: int
    log_from: int
    data_from: int = 0


def _copy(fd: int, out: int, offset: int, limit: int) -> int:
    """Copy the log from `offset` into `out`, up to `limit` or its end; returns where it
    stopped."""
    while offset < limit and (chunk := os.pread(fd, min(CHUNK_BYTES, limit - offset), offset)):
        os.write(out, chunk)
        offset += len(chunk)
    return offset


def _copy_then_cut(
    fd: int, start: int, part: Path | None, like: os.stat_result, punch: bool
) -> _Cut | None:
    """Copy the log from `start` to its last block boundary into `part`, then cut everything
    before that boundary off the log, or (`punch`) punch a hole over it
    (gpudesk.joblog.collapse): what the job writes meanwhile stays in the log, so nothing is
    lost. Only on the descriptor opened and checked: no name in the folder is acted on but the
    part's. None where the file system cannot (nothing changed; the caller tries the next
    way)."""
    end = (collapse.punchable_end if punch else collapse.collapsible_end)(fd, like.st_size)
    if end is None or (part is not None and end <= start):
        return None  # a cap under a block: a part must not be empty
    start = min(start, end)
    if part is not None:
        out = _create(_tmp(part), like)
        try:
            _copy(fd, out, start, end)
        finally:
            os.close(out)
    if not (collapse.punch_head if punch else collapse.collapse_head)(fd, end):
        if part is not None:
            _tmp(part).unlink()
        return None
    if part is not None:
        os.replace(_tmp(part), part)
    return _Cut(start, end, end, end if punch else 0)


def _copy_then_truncate(fd: int, start: int, part: Path | None, like: os.stat_result) -> _Cut:
    """Copy the log from `start` into `part` until it stops growing, then truncate it at once
    (`log_from`: the log's size at the truncation, as far as can be told). A job that writes
    as fast as the copy reads would keep it going for ever, the part growing past any cap on
    the engine's loop: the copy stops at twice what it had to copy, and what the job wrote
    beyond is a gap in the stream."""
    offset = start
    limit = start + 2 * max(like.st_size - start, CHUNK_BYTES)
    out = None
    if part is not None:
        out = _create(_tmp(part), like)
    try:
        while True:
            offset = os.fstat(fd).st_size if out is None else _copy(fd, out, offset, limit)
            size = os.fstat(fd).st_size
            if size == offset or offset >= limit:  # nothing new since the last read, or enough
                os.ftruncate(fd, 0)
                break
    finally:
        if out is not None:
            os.close(out)
    if part is not None:
        os.replace(_tmp(part), part)
    return _Cut(start, offset, max(size, offset))


# -------------------------------------------------------------------------------- reading
class Piece(msgspec.Struct, frozen=True):
    """The next bytes of the stream; `skipped`: bytes before them that are no longer kept."""

    data: bytes
    skipped: int = 0


class LogStream:
    """Reads an attempt's whole output in bounded pieces, across rotations; `position` is the
    next stream byte to read. `owner_uid`: whose files output.log and its parts must be (the
    job's owner, for an engine run by root; None: whoever owns output.log). A file that is not
    what it should be raises UntrustedFileError."""

    def __init__(
        self,
        log: str | os.PathLike[str],
        position: int = 0,
        owner_uid: int | None = None,
        wait: bool = True,
    ) -> None:
        self.log = log
        self.position = position
        self.owner_uid = owner_uid
        self.wait = wait  # False: the engine's loop, which never waits on a lock (_lock_shared)

    def read(self, limit: int = CHUNK_BYTES) -> Piece | None:
        """The next piece (at most `limit` bytes), or None when there is nothing new yet."""
        try:
            fd = _open_log(self.log, self.owner_uid)
        except FileNotFoundError:
            return None  # the attempt has not started writing
        try:
            _lock_shared(fd, self.wait)
            # the parts are the log's: of its owner, whoever that is
            owner = os.fstat(fd).st_uid if self.owner_uid is None else self.owner_uid
            record = read_rotation(self.log)
            position, skipped = self.position, 0
            for part in record.parts:
                if part.end <= position:
                    continue
                if part.start > position:
                    skipped += part.start - position
                    position = part.start
                data = _read_part(
                    part_path(self.log, part.number),
                    owner,
                    position - part.start,
                    min(limit, part.end - position),
                )
                if not data:  # gone meanwhile, or shorter than recorded: a gap
                    skipped += part.end - position
                    position = part.end
                    continue
                self.position = position + len(data)
                return Piece(data, skipped)
            if position < record.base:
                skipped += record.base - position
                position = record.base
            # past a punched hole, never the hole's NULs: the stream's `base` is its end
            data = os.pread(fd, limit, position - record.origin)
        finally:
            os.close(fd)
        if not data and not skipped:
            return None
        self.position = position + len(data)
        return Piece(data, skipped)

    def end(self) -> int:
        """The stream position just past what the log holds now."""
        return stream_end(self.log, self.owner_uid, self.wait)


def _read_part(path: Path, owner_uid: int, offset: int, size: int) -> bytes:
    """`size` bytes of a rotated part from `offset` (b"" when it is gone)."""
    try:
        fd = _open_log(path, owner_uid)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def stream_end(log: str | os.PathLike[str], owner_uid: int | None = None, wait: bool = True) -> int:
    """The stream position just past what the log holds now (0 when there is no log, or it
    cannot be read); raises UntrustedFileError when output.log is not what it should be.
    `wait=False`: the engine's loop, which never waits on a lock (_lock_shared)."""
    try:
        fd = _open_log(log, owner_uid)
    except UntrustedFileError:
        raise
    except OSError:
        return 0
    try:
        _lock_shared(fd, wait)
        record = read_rotation(log)
        return record.base + record.live_size(os.fstat(fd).st_size)
    finally:
        os.close(fd)


def tail(
    log: str | os.PathLike[str],
    max_bytes: int,
    owner_uid: int | None = None,
    wait: bool = True,
) -> bytes:
    """The last `max_bytes` of the stream: output.log's end, with the newest part's end before
    it when output.log was just rotated and holds less. Raises OSError (UntrustedFileError
    among them) when it cannot be read. `wait=False`: the engine's loop (_lock_shared)."""
    end = stream_end(log, owner_uid, wait)
    stream = LogStream(log, max(0, end - max_bytes), owner_uid, wait)
    out = bytearray()
    while len(out) < max_bytes and (piece := stream.read(max_bytes - len(out))) is not None:
        out += piece.data
    return bytes(out)


def refusal(job_id: int, exc: UntrustedFileError) -> str:
    """What a reader of job `job_id`'s log is told when a file of it was refused: one
    paragraph, naming the file and what it is instead."""
    return (
        f"the log of job {job_id} is not shown: {exc.filename} is {exc.strerror}. A job's "
        "log is read only from regular files with one name, of the job's owner; something "
        "else was put in its place (ask an admin to look at the attempt's folder)"
    )


def reattach_stdout(log: str | os.PathLike[str]) -> bool:
    """Where `log`, this process's standard output (`written_by_stdout`), no longer names that
    file (removed, or moved away with its folder): a new `log` there, for stdout and stderr from
    now on, as `gpudesk engine start` gave them. True when it did; OSError when it cannot."""
    out = os.fstat(1)
    with contextlib.suppress(FileNotFoundError):
        there = os.stat(log, follow_symlinks=False)
        if (there.st_dev, there.st_ino) == (out.st_dev, out.st_ino):
            return False
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(log, flags, 0o600)
    try:
        for standard in (1, 2):
            os.dup2(fd, standard)
    finally:
        os.close(fd)
    return True


def written_by_stdout(log: str | os.PathLike[str]) -> str | None:
    """`log` when this process's standard output is that very file (an engine started by
    `gpudesk engine start`, personal or a system one under sysvinit: its log is its to rotate),
    else None (a system engine under systemd writes to the journal, which rotates itself)."""
    try:
        out, there = os.fstat(1), os.stat(log, follow_symlinks=False)
    except OSError:
        return None
    same = (out.st_dev, out.st_ino) == (there.st_dev, there.st_ino)
    return str(log) if same and stat.S_ISREG(there.st_mode) else None
