"""What happens when `gpudesk`'s stdout or stderr cannot be written (standard library only: the
entry point sets it up before typer is imported).

Two cases, told apart by the error (docs/jobs.md, "Output that cannot be written"):

- The reader left the pipe (EPIPE: `gpudesk queue | head`). No error: a listing stops there and
  exits 0 (gpudesk.cli.failures). A command whose exit status is a job's (`run`, `wait`,
  `logs -f`) calls `follow_to_the_end()` first: it goes on, what it writes later goes nowhere,
  and it exits with the status it would have had (`gpudesk wait 5 | true` is 5's status).
- The output cannot be written (a full disk, EIO). An error: the stream raises
  OutputUnwritable once, `output_failures_said` says it in one line on stderr, with what the
  command had done before (`already_done`: `submit` queued its job), and exits 1. What is
  written after the first failure goes nowhere, so that a cleanup on the way out (a final
  flush, a progress line's close) cannot fail a second time.

Either stream is guarded (`guard_std_streams`): a failed stderr exits with the status the
command had, silently, since nowhere is left to say it.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

from gpudesk.cli.exit_codes import EXIT_FAILED

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

# A command that the reader of its output may leave without stopping it (follow_to_the_end)
_following = False
# What the running command has done that a write failure must not hide (already_done)
_done: list[str] = []


class OutputUnwritable(Exception):
    """A write to stdout or stderr failed, not because its reader left. Not an OSError: code
    that catches OSError around a file of its own (a --report file) must not take this for
    that file's failure."""

    def __init__(self, stream: str, cause: OSError) -> None:
        self.stream = stream
        self.reason = cause.strerror or str(cause)
        super().__init__(f"cannot write to {stream}: {self.reason}")


class _GuardedFile(io.FileIO):
    """stdout's or stderr's file descriptor, whose write failures are told apart (above)."""

    def __init__(self, fd: int, stream: str) -> None:
        super().__init__(fd, "w", closefd=False)
        self.stream = stream
        self.gone = False  # once it failed, what is written goes nowhere

    def write(self, data: ReadableBuffer) -> int:
        size = memoryview(data).nbytes
        if self.gone:
            return size
        try:
            return super().write(data)
        except BrokenPipeError:
            if not _following:
                raise  # a listing's reader left: gpudesk.cli.failures exits 0
            self.gone = True
            return size
        except BlockingIOError:
            raise  # a non-blocking terminal: as Python's own stream does
        except OSError as exc:
            self.gone = True
            raise OutputUnwritable(self.stream, exc) from exc


def guard_std_streams() -> None:
    """sys.stdout and sys.stderr rebuilt as they were (encoding, errors, buffering) over a
    file that tells a write failure apart from a reader that left."""
    sys.stdout = _guarded(sys.stdout, "stdout")
    sys.stderr = _guarded(sys.stderr, "stderr")


def _guarded(stream: object, name: str) -> object:
    if not isinstance(stream, io.TextIOWrapper):
        return stream  # closed at start (None), or already replaced by whoever runs us
    try:
        fd = stream.fileno()
        stream.flush()
    except (OSError, ValueError):
        return stream
    raw = _GuardedFile(fd, name)
    # unbuffered (python -u, PYTHONUNBUFFERED) where it was: its bytes go out as written
    buffered = isinstance(stream.buffer, io.BufferedWriter)
    return io.TextIOWrapper(
        io.BufferedWriter(raw) if buffered else raw,
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
        write_through=stream.write_through,
    )


def follow_to_the_end() -> None:
    """For a command whose exit status is a job's: a reader that leaves does not stop it."""
    global _following
    _following = True


def already_done(clause: str) -> None:
    """Something the command has done that stands whatever becomes of its output, said as the
    end of a write failure's line: "job 5 was queued all the same: gpudesk queue lists it".
    Called as soon as it is done, before it is printed."""
    _done.append(clause)


def say(line: str) -> None:
    """`line` on stderr, where a stderr that cannot be written is left silent."""
    with suppress(OSError, OutputUnwritable):
        print(line, file=sys.stderr, flush=True)


def _flush_std_streams(code: object = 0) -> None:
    """What is still buffered, written now; where the reader left meanwhile, the exit status
    `code` at once, quietly (at the interpreter's exit it would try again, and warn)."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except BrokenPipeError:
        os._exit(0 if code is None else code if isinstance(code, int) else EXIT_FAILED)


@contextmanager
def output_failures_said() -> Iterator[None]:
    """Around a whole command: a write failure said in one line on stderr (exit 1), with what
    the command had done all the same. What is still buffered is written here, before the
    exit, where its failure is still said (at the interpreter's exit it would be a warning
    and exit 120)."""
    try:
        try:
            yield
        except SystemExit as exc:
            _flush_std_streams(exc.code)
            raise
        _flush_std_streams()
    except BrokenPipeError:
        os._exit(0)  # `gpudesk --version | true`: as gpudesk.cli.failures, no error
    except OutputUnwritable as exc:
        if exc.stream == "stdout":
            done = "; ".join(_done)
            said = f" ({exc.reason}); {done}" if done else f": {exc.reason}"
            say(f"error: cannot write the output{said}")
        # 1 as GNU tools exit on a write error, the command acted or not (docs/jobs.md says
        # why a command that acted exits 1 too)
        sys.exit(EXIT_FAILED)
