"""Printing a job's log, and following it live across retries (`gpudesk logs -f`)."""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import AttemptView

POLL_S = 0.2


class LogFollower:
    def __init__(self, client: Client, job_id: int, out: TextIO) -> None:
        self.client = client
        self.job_id = job_id
        self.out = out

    def dump(self, path: str | None) -> None:
        if path is None:
            return
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                shutil.copyfileobj(fh, self.out)
        except FileNotFoundError:
            pass  # the attempt has not written anything yet
        self.out.flush()

    def follow(self) -> None:
        """Print the latest attempt's log as it grows; move to the next attempt on a retry;
        return once the job has ended and its output is drained."""
        attempt_no, offset = 0, 0
        while True:
            data = self.client.show(self.job_id)
            attempts = data.attempts
            if attempts and attempts[-1].number != attempt_no:
                if attempt_no:
                    offset = self._drain(self._log_of(attempts, attempt_no), offset)
                    print(f"--- gpudesk: attempt {attempts[-1].number} ---", file=self.out)
                attempt_no, offset = attempts[-1].number, 0
            if attempt_no:
                offset = self._drain(attempts[-1].log, offset)
            if data.job.terminal:
                return
            time.sleep(POLL_S)

    @staticmethod
    def _log_of(attempts: list[AttemptView], number: int) -> str | None:
        return next(a.log for a in attempts if a.number == number)

    def _drain(self, path: str | None, offset: int) -> int:
        if path is None:
            return offset
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
        except FileNotFoundError:
            return offset
        if chunk:
            self.out.write(chunk.decode("utf-8", "replace"))
            self.out.flush()
        return offset + len(chunk)
