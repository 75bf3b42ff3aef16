"""Suspended jobs in the store (schema 15): a suspended job stays `running` with when it was
suspended; its attempt keeps its seconds suspended and when the current suspension began (the
clock its time limit runs on). A suspension ends with its attempt (`JobTables._transition`)."""

from __future__ import annotations

import time

from gpudesk.engine.store.jobs import JobTables


class SuspensionTables(JobTables):
    def set_suspended(self, job_id: int, attempt_id: int, since: float, message: str) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE jobs SET suspended_at = ? WHERE id = ?", (time.time(), job_id))
            conn.execute(
                "UPDATE attempts SET suspended_boottime = ? WHERE id = ?", (since, attempt_id)
            )
            self._add_event(conn, "suspend", message, job_id=job_id)

    def set_resumed(self, job_id: int, attempt_id: int, suspended_s: float, message: str) -> None:
        """Continued, having spent `suspended_s` seconds suspended in all."""
        with self.transaction() as conn:
            conn.execute("UPDATE jobs SET suspended_at = NULL WHERE id = ?", (job_id,))
            conn.execute(
                "UPDATE attempts SET suspended_s = ?, suspended_boottime = NULL WHERE id = ?",
                (suspended_s, attempt_id),
            )
            self._add_event(conn, "resume", message, job_id=job_id)
