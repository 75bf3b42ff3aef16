"""Suspended jobs in the store (schema 15): a suspended job stays `running` with when it was
suspended; its attempt keeps its seconds suspended and when the current suspension began (the
clock its time limit runs on). A suspension ends with its attempt (`JobTables._transition`)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

import msgspec

from gpudesk.engine.store.jobs import JobTables


class Resume(msgspec.Struct, frozen=True):
    """A suspended attempt continued, as the store keeps it: its seconds suspended in all (this
    suspension's included), and the event's message."""

    job_id: int
    attempt_id: int
    suspended_s: float
    message: str


class SuspensionTables(JobTables):
    def set_suspended(self, job_id: int, attempt_id: int, since: float, message: str) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE jobs SET suspended_at = ? WHERE id = ?", (time.time(), job_id))
            conn.execute(
                "UPDATE attempts SET suspended_boottime = ? WHERE id = ?", (since, attempt_id)
            )
            self._add_event(conn, "suspend", message, job_id=job_id)

    def set_resumed(self, resume: Resume) -> None:
        """Continued, having spent `resume.suspended_s` seconds suspended in all."""
        with self.transaction() as conn:
            self._resume(conn, resume)

    def _resume(self, conn: sqlite3.Connection, resume: Resume) -> None:
        conn.execute("UPDATE jobs SET suspended_at = NULL WHERE id = ?", (resume.job_id,))
        conn.execute(
            "UPDATE attempts SET suspended_s = ?, suspended_boottime = NULL WHERE id = ?",
            (resume.suspended_s, resume.attempt_id),
        )
        self._add_event(conn, "resume", resume.message, job_id=resume.job_id)

    def request_cancel(
        self,
        job_id: int,
        grace: float,
        now: float | None = None,
        resumes: Sequence[Resume] = (),
    ) -> None:
        """Record a cancel of a running job and when it escalates to SIGKILL (an earlier
        deadline wins), so a restarted engine can finish it; and, in the same transaction, the
        resumes of its suspended attempts (`resumes`: continued to see their SIGTERM). A store
        that refuses it (a full disk) leaves the job running, or suspended, and not cancelled:
        the caller signals nothing."""
        now = now or time.time()
        with self.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET cancel_requested = 1, "
                "kill_deadline = MIN(COALESCE(kill_deadline, ?1), ?1) WHERE id = ?2",
                (now + grace, job_id),
            )
            for resume in resumes:
                self._resume(conn, resume)
            self._add_event(
                conn,
                "cancel",
                f"cancel requested (SIGKILL after {grace:g} s)",
                job_id=job_id,
                now=now,
            )
