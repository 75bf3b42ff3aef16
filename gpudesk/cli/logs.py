"""Printing a job's log, and following it live across retries (`gpudesk logs -f`).

A log is read as a stream (gpudesk.joblog.LogStream): in pieces of at most a MiB whatever its
size, on across the engine's rotations (`[station] log_max_mb`), with one line where output was
rotated away before it could be printed."""

from __future__ import annotations

import codecs
import time
from typing import TYPE_CHECKING, TextIO

from gpudesk.joblog import LogStream, Piece, stream_end
from gpudesk.units import byte_size

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import AttemptView

POLL_S = 0.2


class LogFollower:
    def __init__(self, client: Client, job_id: int, out: TextIO) -> None:
        self.client = client
        self.job_id = job_id
        self.out = out
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._line_open = False  # the last text printed did not end a line

    def dump(self, path: str | None) -> None:
        """Print the log as it is now (what is kept of it)."""
        if path is None:
            return
        stream = LogStream(path)
        end = stream_end(path)  # a job still printing is not chased
        while stream.position < end and (piece := stream.read()) is not None:
            self._emit(piece)
        self._finish()

    def follow(self) -> None:
        """Print the latest attempt's log as it grows; move to the next attempt on a retry;
        return once the job has ended and its output is drained."""
        attempt_no, stream = 0, None
        while True:
            data = self.client.show(self.job_id)
            attempts = data.attempts
            if attempts and attempts[-1].number != attempt_no:
                if stream is not None:
                    self._drain(stream)
                    self._finish()
                    self._note(f"attempt {attempts[-1].number}")
                attempt_no = attempts[-1].number
                log = self._log_of(attempts, attempt_no)
                stream = LogStream(log) if log else None
            if stream is not None:
                self._drain(stream)
            if data.job.terminal:
                self._finish()
                return
            time.sleep(POLL_S)

    @staticmethod
    def _log_of(attempts: list[AttemptView], number: int) -> str | None:
        return next(a.log for a in attempts if a.number == number)

    def _drain(self, stream: LogStream) -> None:
        while (piece := stream.read()) is not None:
            self._emit(piece)

    def _emit(self, piece: Piece) -> None:
        if piece.skipped:
            self._note(
                f"{byte_size(piece.skipped)} of output rotated away before this point "
                "(the log is capped by [station] log_max_mb and log_keep)"
            )
        if piece.data:
            text = self._decoder.decode(piece.data)
            if text:
                self.out.write(text)
                self._line_open = not text.endswith("\n")
            self.out.flush()

    def _note(self, text: str) -> None:
        if self._line_open:
            self.out.write("\n")
            self._line_open = False
        print(f"--- gpudesk: {text} ---", file=self.out, flush=True)

    def _finish(self) -> None:
        rest = self._decoder.decode(b"", final=True)
        if rest:
            self.out.write(rest)
        self.out.flush()
        self._decoder.reset()
