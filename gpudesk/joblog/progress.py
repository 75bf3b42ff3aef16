"""Progress lines in a job's output: the convention a job follows so the engine can tell how
fast it runs under each placement (docs/interference.md, "Learning on the station") and how long
it has left ("Remaining time").

A job prints, on a line of its own, `progress DONE` or `progress DONE/TOTAL` (`progress 120/1000`),
DONE counting steps or samples from the start of the run, TOTAL (optional) the work the run will
do in the same unit. Learning needs only the rate at which DONE grows; the remaining time needs
TOTAL too (gpudesk.policy.remaining). `ProgressReader` reads what the job wrote since the last
call, cheaply: only new bytes, at most `MAX_READ_BYTES` per call (a job that floods its output is
read from its newest bytes), lines longer than `MAX_LINE_BYTES` skipped, bytes that are not UTF-8
tolerated, and a line whose DONE or TOTAL has more digits than a float holds (infinite) ignored.
"""

from __future__ import annotations

import math
import os
import re
from typing import NamedTuple

from gpudesk.joblog import read_rotation
from gpudesk.untrusted import open_untrusted

MAX_READ_BYTES = 256 * 1024
MAX_LINE_BYTES = 4096
PROGRESS_LINE = re.compile(
    rb"^\s*progress\s+([0-9]+(?:\.[0-9]+)?)(?:\s*/\s*([0-9]+(?:\.[0-9]+)?))?\s*$"
)


class ProgressLine(NamedTuple):
    done: float
    total: float | None  # None: the line gave no TOTAL (or a TOTAL of 0, which means none)


def parse_progress_line(line: bytes) -> ProgressLine | None:
    """DONE and TOTAL from one progress line, None for any other line."""
    if len(line) > MAX_LINE_BYTES:
        return None
    match = PROGRESS_LINE.match(line)
    if not match:
        return None
    done = float(match.group(1))
    total = float(match.group(2)) if match.group(2) is not None else None
    if done == math.inf or total == math.inf:
        return None  # more digits than a number holds (the pattern allows no NaN): not progress
    return ProgressLine(done, total or None)


def parse_progress(line: bytes) -> float | None:
    """DONE from one progress line, None for any other line."""
    parsed = parse_progress_line(line)
    return parsed.done if parsed else None


class ProgressReader:
    """The progress values a log gained since the last `read()`, in order."""

    def __init__(self, path: str, offset: int = 0, owner_uid: int | None = None) -> None:
        self.path = path
        self.offset = offset
        # whose file the log must be (gpudesk.hw.runner.log_owner_uid; None: whoever's):
        # the engine reads it as a file a user may have planted (gpudesk.untrusted), as joblog
        self.owner_uid = owner_uid
        self._partial = b""  # an unfinished last line
        self._skipping = False  # inside a line too long to be a progress line (or cut)
        # where the log's byte 0 sits in the attempt's whole output (gpudesk.joblog's rotation
        # record): a cut moves it, and says how far to shift `offset`; a punched hole does not
        # move it, and says where the log's data begins
        record = read_rotation(path)
        self._origin = record.origin
        self._skip_hole(record.data_from)

    @classmethod
    def from_end(cls, path: str, owner_uid: int | None = None) -> ProgressReader:
        """A reader that ignores what the log holds now (an attempt re-adopted mid-run)."""
        try:
            size = os.stat(path, follow_symlinks=False).st_size
        except OSError:
            size = 0
        return cls(path, size, owner_uid)

    def read(self) -> list[float]:
        """The DONE of each progress line the log gained."""
        return [line.done for line in self.read_lines()]

    def read_lines(self) -> list[ProgressLine]:
        """Each progress line the log gained, DONE and TOTAL."""
        # never through a link, never blocking on a FIFO, only the owner's regular file: what
        # is not is read as nothing (UntrustedFileError is an OSError); a second name only as
        # gpudesk.joblog's own reads allow one (`made_here`)
        try:
            fd = open_untrusted(self.path, self.owner_uid, made_here=True)
        except OSError:
            return []
        try:
            size = os.fstat(fd).st_size
            if size != self.offset:
                self._follow_rotation(size)
            if size <= self.offset:  # nothing new (or truncated by its job below its hole)
                return []
            if size - self.offset > MAX_READ_BYTES:
                # too much to read each tick: only the newest bytes, from a line's start
                self.offset, self._partial, self._skipping = size - MAX_READ_BYTES, b"", True
            data = os.pread(fd, size - self.offset, self.offset)
        except OSError:
            return []
        finally:
            os.close(fd)
        self.offset += len(data)
        return self._lines(data)

    def _follow_rotation(self, size: int) -> None:
        """Keep reading where it left off across a rotation, which cuts the log's head off or
        punches a hole over it (gpudesk.joblog.rotate; its record says by how much, or where
        the hole ends). What was cut and not yet read is skipped to the next line: the log may
        now begin inside a line, whose end could read as a progress line of its own ("step 3
        progress 5" cut before "progress"); a hole is never read (its NULs)."""
        record = read_rotation(self.path)
        moved, self._origin = record.origin - self._origin, record.origin
        if 0 < moved <= self.offset:  # all it had not read is still in the log
            self.offset -= moved
        elif moved > 0:
            self.offset, self._partial, self._skipping = 0, b"", True
        elif size < self.offset:  # truncated by its job: start again
            self.offset, self._partial, self._skipping = 0, b"", False
        self._skip_hole(record.data_from)

    def _skip_hole(self, data_from: int) -> None:
        """Start past a hole punched over the log's head, inside a line (as after a cut)."""
        if self.offset < data_from:
            self.offset, self._partial, self._skipping = data_from, b"", True

    def _lines(self, data: bytes) -> list[ProgressLine]:
        *complete, rest = data.split(b"\n")
        values = []
        for line in complete:
            if self._skipping:
                self._skipping = False  # the end of the skipped line
                continue
            value = parse_progress_line(self._partial + line)
            self._partial = b""
            if value is not None:
                values.append(value)
        if self._skipping:
            return values
        self._partial += rest
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial, self._skipping = b"", True
        return values
