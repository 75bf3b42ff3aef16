"""A job attempt's output, capped: `output.log` and the parts rotated out of it.

In the attempt's folder (`jobs/<id>/<n>/`):

    output.log            what the job writes now: its stdout and stderr, opened O_APPEND
    output.log.N          the Nth part rotated out of it (N counts up: the highest is the
                          newest); only the newest `[station] log_keep` are kept
    output.log.rotation   a small JSON record: where output.log and each kept part sit in the
                          attempt's whole output (the *stream*), as byte positions

The engine rotates (`rotate`, called by gpudesk.engine.logcap) by copy-truncate: when output.log
is larger than the cap, its last `cap` bytes are copied into output.log.N and the file is
truncated in place; the job's O_APPEND writes go on at the new end, so the job notices nothing.
Two things can be lost, both recorded as a gap in the stream where they are known:
- the head of output.log beyond the cap when a check finds it more than a cap over (a job that
  writes faster than the engine looks);
- what the job writes in the instant between the end of the copy and the truncation (whole
  write() calls: the copy reads on until the file stops growing, then truncates at once).

Readers (`gpudesk logs [-f]`, the desk) address the stream by position (`LogStream`), so a
follower reads across a rotation from the part that now holds what it had not read yet. Readers
hold a shared flock on output.log for one bounded read at a time, the engine an exclusive one
(not waiting: a rotation is tried again at the next check) while it rotates, so a reader never
sees a truncated file with the record of before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

RECORD_SUFFIX = ".rotation"
CHUNK_BYTES = 1 << 20  # what one read or copy step holds in memory


@dataclass(frozen=True)
class Part:
    """A rotated-out part: output.log.`number`, holding the stream's bytes [start, end)."""

    number: int
    start: int
    end: int


@dataclass(frozen=True)
class Rotation:
    """The record: output.log's first byte is the stream's byte `base`; `parts` oldest first;
    `rotations` the number of the newest part ever made."""

    base: int = 0
    rotations: int = 0
    parts: tuple[Part, ...] = field(default_factory=tuple)

    @property
    def dropped(self) -> int:
        """Bytes of the stream before output.log that no kept part holds."""
        return self.base - sum(part.end - part.start for part in self.parts)

    def to_json(self) -> str:
        parts = [[p.number, p.start, p.end] for p in self.parts]
        return json.dumps({"base": self.base, "rotations": self.rotations, "parts": parts})


def part_path(log: str | os.PathLike[str], number: int) -> Path:
    return Path(f"{os.fspath(log)}.{number}")


def record_path(log: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(log)}{RECORD_SUFFIX}")


def read_rotation(log: str | os.PathLike[str]) -> Rotation:
    """The log's rotation record (an empty one when it never rotated or the record is bad)."""
    try:
        data = json.loads(record_path(log).read_text())
        parts = tuple(Part(int(n), int(s), int(e)) for n, s, e in data["parts"])
        return Rotation(int(data["base"]), int(data["rotations"]), parts)
    except (OSError, ValueError, KeyError, TypeError):
        return Rotation()


def _create(path: Path, like: os.stat_result) -> int:
    """A new file of the engine's own: whatever stood at `path` (a leftover, a link) goes. It
    gets the owner and the mode of the log (`like`), so a job run as its owner can read its
    rotated parts as it reads its log, and no one else can (O_EXCL: the file is new, so the
    chown acts on nothing but what was just made)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        if like.st_uid != os.geteuid():
            os.fchown(fd, like.st_uid, like.st_gid)
        os.fchmod(fd, stat.S_IMODE(like.st_mode) & 0o666)
    except OSError:
        os.close(fd)
        raise
    return fd


def _write_rotation(log: str | os.PathLike[str], record: Rotation, like: os.stat_result) -> None:
    path = record_path(log)
    tmp = path.with_name(path.name + ".tmp")
    fd = _create(tmp, like)
    try:
        os.write(fd, record.to_json().encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _open_log(log: str | os.PathLike[str], flags: int) -> int:
    return os.open(log, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


def _lock_shared(fd: int) -> None:
    """A reader's lock: waits out a rotation (milliseconds), but reads on unlocked rather than
    hang should something else hold the file locked."""
    for _ in range(300):
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.01)


# ------------------------------------------------------------------------------- rotation
def rotate(log: str | os.PathLike[str], cap: int, keep: int) -> bool:
    """Rotate `log` when it is larger than `cap` bytes, keeping `keep` parts. Returns whether
    it rotated (False also when a reader holds the lock: the caller tries again later)."""
    try:
        if os.stat(log, follow_symlinks=False).st_size <= cap:
            return False
        fd = _open_log(log, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            # the job put something else there (a second name for another file): leave it
            raise OSError(errno.EPERM, "not a plain file with one name; left alone", str(log))
        size = st.st_size
        if size <= cap:
            return False
        record = read_rotation(log)
        number = record.rotations + 1
        start = _line_start(fd, size - cap) if keep else size
        end = _copy_then_truncate(fd, start, part_path(log, number) if keep else None, st)
        parts = (*record.parts, Part(number, record.base + start, record.base + end))
        kept = parts[-keep:] if keep else ()
        _write_rotation(log, Rotation(record.base + end, number, kept), st)
        for gone in parts[: len(parts) - len(kept)]:
            with contextlib.suppress(FileNotFoundError):
                part_path(log, gone.number).unlink()
        return True
    finally:
        os.close(fd)  # also releases the lock


def _line_start(fd: int, offset: int) -> int:
    """Where the first line that starts at or after `offset` begins (within 64 KiB; else
    `offset`): a part that keeps only the log's end begins with a whole line."""
    if offset <= 0:
        return 0
    newline = os.pread(fd, 64 * 1024, offset - 1).find(b"\n")
    return offset + newline if newline >= 0 else offset


def _copy_then_truncate(fd: int, start: int, part: Path | None, like: os.stat_result) -> int:
    """Copy the log from `start` into `part` until it stops growing, then truncate it at once;
    returns where the copy ended (the log's size at the truncation, as far as can be told)."""
    offset = start
    out = None
    if part is not None:
        out = _create(part.with_name(part.name + ".tmp"), like)
    try:
        while True:
            if out is None:
                offset = os.fstat(fd).st_size
            else:
                while chunk := os.pread(fd, CHUNK_BYTES, offset):
                    os.write(out, chunk)
                    offset += len(chunk)
            if os.fstat(fd).st_size == offset:  # nothing new since the last read: truncate now
                os.ftruncate(fd, 0)
                break
    finally:
        if out is not None:
            os.close(out)
    if part is not None:
        os.replace(part.with_name(part.name + ".tmp"), part)
    return offset


# -------------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class Piece:
    """The next bytes of the stream; `skipped`: bytes before them that are no longer kept."""

    data: bytes
    skipped: int = 0


class LogStream:
    """Reads an attempt's whole output in bounded pieces, across rotations; `position` is the
    next stream byte to read."""

    def __init__(self, log: str | os.PathLike[str], position: int = 0) -> None:
        self.log = log
        self.position = position

    def read(self, limit: int = CHUNK_BYTES) -> Piece | None:
        """The next piece (at most `limit` bytes), or None when there is nothing new yet."""
        try:
            fd = _open_log(self.log, os.O_RDONLY)
        except FileNotFoundError:
            return None  # the attempt has not started writing
        try:
            _lock_shared(fd)
            record = read_rotation(self.log)
            position, skipped = self.position, 0
            for part in record.parts:
                if part.end <= position:
                    continue
                if part.start > position:
                    skipped += part.start - position
                    position = part.start
                try:
                    with open(part_path(self.log, part.number), "rb") as fh:
                        fh.seek(position - part.start)
                        data = fh.read(min(limit, part.end - position))
                except FileNotFoundError:
                    data = b""
                if not data:  # gone meanwhile, or shorter than recorded: a gap
                    skipped += part.end - position
                    position = part.end
                    continue
                self.position = position + len(data)
                return Piece(data, skipped)
            if position < record.base:
                skipped += record.base - position
                position = record.base
            data = os.pread(fd, limit, position - record.base)
        finally:
            os.close(fd)
        if not data and not skipped:
            return None
        self.position = position + len(data)
        return Piece(data, skipped)

    def end(self) -> int:
        """The stream position just past what the log holds now."""
        return stream_end(self.log)


def stream_end(log: str | os.PathLike[str]) -> int:
    """The stream position just past what the log holds now (0 when there is no log)."""
    try:
        fd = _open_log(log, os.O_RDONLY)
    except OSError:
        return 0
    try:
        _lock_shared(fd)
        return read_rotation(log).base + os.fstat(fd).st_size
    finally:
        os.close(fd)


def tail(log: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The last `max_bytes` of the stream: output.log's end, with the newest part's end before
    it when output.log was just rotated and holds less."""
    end = stream_end(log)
    stream = LogStream(log, max(0, end - max_bytes))
    out = bytearray()
    while len(out) < max_bytes and (piece := stream.read(max_bytes - len(out))) is not None:
        out += piece.data
    return bytes(out)
