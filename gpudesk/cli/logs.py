"""Printing a job's log, and following it live across retries (`gpudesk logs -f`).

A log is read as a stream (gpudesk.joblog.LogStream): in pieces of at most a MiB whatever its
size, on across the engine's rotations (`[station] log_max_mb`), with one line where output was
rotated away before it could be printed.

The file is read directly where this process may (a personal engine's jobs, always): it is the
fastest way and works with no engine running. Where the file refuses (EACCES/EPERM: a system
engine's job, whose folders are the engine's and whose log is its owner's alone, read by an
admin, or by the owner where the state folder is not theirs to enter) the same stream comes
through the engine's `log` request (`EngineLogStream`), which checks who may read it. Asking
only after a refusal keeps a personal engine's `gpudesk logs` as it was.

Printed on a terminal, a job's control characters are spelled out (`\\x1b`): its escape
sequences (a window title, a cleared screen) are shown, never obeyed, as `less` shows them;
`--raw` writes the bytes as they are, as `cat` (and as always into a pipe or a file): byte for
byte, bytes that are not UTF-8 too, from the file or the engine's `log` reply (base64) to
stdout's buffer. The engine spells them out itself for a reader who is not the job's owner,
--raw or not. Spelled out, a byte that is not UTF-8 is shown as `\\xff`, as a control is."""

from __future__ import annotations

import codecs
import errno
import os
import sys
import time
from typing import TYPE_CHECKING, BinaryIO, Protocol

from gpudesk.joblog import CHUNK_BYTES, LogStream, Piece
from gpudesk.text import json_text, printable
from gpudesk.units import byte_size

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import AttemptView, JobDetail, JobView

POLL_S = 0.2
TAIL_BLOCK = 64 << 10  # what `-n` reads at a time, walking back from the end


class TextOut(Protocol):
    """Where a follower writes text: a text stream, or `logs --json`'s escaping writer."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


class LogReader(Protocol):
    position: int

    def read(self, limit: int = CHUNK_BYTES) -> Piece | None: ...

    def end(self) -> int: ...


class EngineLogStream:
    """A log read through the engine (`Client.log`), position by position as LogStream."""

    def __init__(self, client: Client, job_id: int, attempt: int, position: int = 0) -> None:
        self.client = client
        self.job_id = job_id
        self.attempt = attempt
        self.position = position

    def read(self, limit: int = CHUNK_BYTES) -> Piece | None:
        chunk = self.client.log(
            self.job_id, self.attempt, offset=self.position, max_bytes=min(limit, CHUNK_BYTES)
        )
        self.position = chunk.next
        if not chunk.data and not chunk.skipped:
            return None
        return Piece(chunk.data, chunk.skipped)

    def end(self) -> int:
        return self.client.log(self.job_id, self.attempt, offset=self.position, max_bytes=0).end


def refused(path: str) -> bool:
    """Does this process lack the right to read the file at `path` (or to reach it)?"""
    try:  # O_NONBLOCK: a FIFO put in the log's place must not hold the reader here
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return exc.errno in (errno.EACCES, errno.EPERM)
    os.close(fd)
    return False


def _kept_before(stream: LogReader, start: int, stop: int) -> tuple[int, bytes]:
    """The kept bytes of stream [start, stop) that run up to `stop` with no gap among them:
    (where they begin, the bytes). Rotated-away output before a gap is no line of the tail."""
    stream.position = start
    begin, data = start, bytearray()
    while stream.position < stop and (piece := stream.read(stop - stream.position)) is not None:
        if piece.skipped:  # a gap: only what follows it is contiguous with `stop`
            begin, data = stream.position - len(piece.data), bytearray()
        data += piece.data
    return begin, bytes(data[: max(0, stop - begin)])


def tail_start(stream: LogReader, lines: int) -> int:
    """The stream position where the last `lines` lines of what the log holds now begin (as
    `tail -n`: a last line with no newline counts). Read backwards in blocks, so a log of
    gigabytes costs a few reads."""
    end = stream.end()
    if lines <= 0:
        return end
    found, stop = 0, end
    while stop > 0:
        start = max(0, stop - TAIL_BLOCK)
        begin, data = _kept_before(stream, start, stop)
        index = len(data)
        while (index := data.rfind(b"\n", 0, index)) != -1:
            if begin + index == end - 1:
                continue  # the newline that ends the last line starts no line after it
            found += 1
            if found == lines:
                return begin + index + 1
        if begin > start or not data:  # nothing older is kept: the whole kept log is the tail
            return min(begin, stop)
        stop = start
    return 0


class LogFollower:
    """Prints a job's log. `owner_uid`: the job's owner, whose files a log read directly must
    be (gpudesk.joblog refuses anything else with UntrustedFileError). `spell_controls`: write
    the job's control characters spelled out (gpudesk.text.printable), as for a terminal, where
    its escape sequences would be obeyed (`gpudesk logs` without --raw); `keep_carriage_return`:
    but a `\\r` (the reader's own job: her progress bars redraw in place). `raw_out`: where the
    job's bytes go as they are when they are not spelled out (stdout's buffer: `--raw` and a
    pipe get the bytes byte for byte, never decoded); `out` still gets gpudesk's own lines.
    Without it (`logs --json`'s text) the bytes are decoded, one that is not UTF-8 as `\\xff`."""

    def __init__(
        self,
        client: Client,
        job_id: int,
        out: TextOut,
        owner_uid: int | None = None,
        *,
        spell_controls: bool = False,
        keep_carriage_return: bool = False,
        raw_out: BinaryIO | None = None,
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.out = out
        self.owner_uid = owner_uid
        self.spell_controls = spell_controls
        self.keep_carriage_return = keep_carriage_return
        self.raw_out = None if spell_controls else raw_out
        # decoded, a byte that is not UTF-8 is spelled \xff (as a control is), not hidden as
        # U+FFFD: on a terminal, and in `logs --json` (the README's rule for every JSON)
        self._decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        self._line_open = False  # the last text printed did not end a line

    def reader(self, attempt: AttemptView) -> LogReader | None:
        """How to read an attempt's log: from its file, or through the engine where the file
        refuses this process."""
        if attempt.log is None:
            return None
        if refused(attempt.log):
            return EngineLogStream(self.client, self.job_id, attempt.number)
        return LogStream(attempt.log, owner_uid=self.owner_uid)

    def dump(self, attempt: AttemptView, lines: int | None = None) -> None:
        """Print the log as it is now (what is kept of it; only its last `lines` lines)."""
        stream = self.reader(attempt)
        if stream is None:
            return
        if lines is not None:
            stream.position = tail_start(stream, lines)
        end = stream.end()  # a job still printing is not chased
        while stream.position < end and (piece := stream.read()) is not None:
            self._emit(piece)
        self._finish()

    def follow(self, lines: int | None = None) -> JobView:
        """Print the latest attempt's log as it grows; move to the next attempt on a retry;
        once the job has ended and its output is drained, print how it ended and return it.
        With `lines`, the attempt running now starts at its last `lines` lines (`tail -n -f`);
        a later attempt is printed whole."""
        attempt_no, stream = 0, None
        first = True
        while True:
            data = self.client.show(self.job_id)
            attempts = data.attempts
            if attempts and attempts[-1].number != attempt_no:
                if stream is not None:
                    self._drain(stream)
                    self._finish()
                    self._note(f"attempt {attempts[-1].number}")
                attempt_no = attempts[-1].number
                stream = self.reader(attempts[-1])
                if stream is not None and first and lines is not None:
                    stream.position = tail_start(stream, lines)
            first = False
            if stream is not None:
                self._drain(stream)
            if data.job.terminal:
                self._finish()
                self._ended(data.job)
                return data.job
            time.sleep(POLL_S)

    def _drain(self, stream: LogReader) -> None:
        while (piece := stream.read()) is not None:
            self._emit(piece)

    def _emit(self, piece: Piece) -> None:
        if piece.skipped:
            self._note(
                f"{byte_size(piece.skipped)} of output rotated away before this point "
                "(the log is capped by [station] log_max_mb and log_keep)"
            )
        if piece.data and self.raw_out is not None:
            self.out.flush()  # gpudesk's own lines before the job's bytes
            self.raw_out.write(piece.data)
            self.raw_out.flush()
            self._line_open = not piece.data.endswith(b"\n")
        elif piece.data:
            text = self._decoder.decode(piece.data)
            if self.spell_controls:
                text = printable(text, self.keep_carriage_return)
            if text:
                self.out.write(text)
                self._line_open = not text.endswith("\n")
            self.out.flush()

    def _note(self, text: str) -> None:
        if self._line_open:
            self.out.write("\n")
            self._line_open = False
        print(f"--- gpudesk: {text} ---", file=self.out, flush=True)

    def _ended(self, job: JobView) -> None:
        """How the job ended, on stderr: stdout stays the job's output (`logs -f 3 > out`).
        Where the job's last line has no newline, the line is ended on stdout where it is
        text, on stderr where stdout has the job's bytes as they are (nothing added to them)."""
        if self._line_open:
            (sys.stderr if self.raw_out is not None else self.out).write("\n")
            self._line_open = False
            self.out.flush()
        print(f"--- gpudesk: {job.outcome} ---", file=sys.stderr, flush=True)

    def _finish(self) -> None:
        rest = self._decoder.decode(b"", final=True)
        if self.spell_controls:
            rest = printable(rest, self.keep_carriage_return)
        if rest:
            self.out.write(rest)
        self.out.flush()
        self._decoder.reset()


def print_log_json(
    client: Client, data: JobDetail, attempt: AttemptView | None, lines: int | None
) -> None:
    """`logs --json`: the attempt's output as it is now, in one object. The output is written
    as it is read, escaped piece by piece, never held whole: a 100 MB log held as one string
    took 0.8 GB (docs/benchmarks.md)."""
    fields = {
        "job": data.job.id,
        "name": data.job.name,
        "state": data.job.state,
        "attempt": attempt.number if attempt else None,
        "output": "",
    }
    whole = json_text(fields, indent=2)
    opening = whole.rindex('""') + 1  # "output" comes last: its empty string's quotes
    out = _JsonStringOut(whole[:opening])
    if attempt is not None:
        LogFollower(
            client,
            data.job.id,
            out,
            data.job.uid,
            # JSON escapes control characters itself; another user's job is spelled out as
            # the engine spells it out for its other readers
            spell_controls=os.geteuid() != data.job.uid,
            keep_carriage_return=True,
        ).dump(attempt, lines)
    out.write("")
    sys.stdout.write(whole[opening:] + "\n")


class _JsonStringOut:
    """Text written to stdout as the inside of a JSON string, as `json_text` escapes it (each
    character on its own: the pieces' ends change nothing), after `head`. The head waits for
    the first write: a log refused as it is opened (a FIFO, a link) leaves stdout empty."""

    def __init__(self, head: str) -> None:
        self.head: str | None = head

    def write(self, text: str) -> int:
        if self.head is not None:
            sys.stdout.write(self.head)
            self.head = None
        sys.stdout.write(json_text(text)[1:-1])
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()
