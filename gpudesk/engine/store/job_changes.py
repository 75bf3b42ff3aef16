"""Hold, release, requeue, priority and the cancel of queued jobs (gpudesk.core.job_changes), a
request's all written in one transaction: a commit a job held the engine's loop 0.1-0.2 s for
a request naming 1,000 jobs (docs/benchmarks.md, "Job control of many jobs at once"). Each
change has a savepoint of its own: one the store refuses (a full disk) is rolled back alone; a
refused commit leaves none."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence

import msgspec

from gpudesk.core.job_changes import CancelQueued, JobChange, SetHeld, SetPriority
from gpudesk.core.jobs import InvalidTransition, JobState
from gpudesk.engine.store.jobs import JobTables
from gpudesk.text import safe_text


class JobChangeTables(JobTables):
    def change_jobs(
        self,
        changes: Sequence[JobChange],
        refused: Callable[[Exception], bool],
        now: float | None = None,
    ) -> list[Exception | None]:
        """Write `changes` in one transaction: one whose write raises an error `refused` takes
        (a full disk) is rolled back alone, its error in its place in the list (None:
        written). Any other error, a refusal that ended the transaction (SQLite ends some
        itself) or a refused commit raises, and none is written."""
        now = now or time.time()
        errors: list[Exception | None] = []
        with self.transaction() as conn:
            for change in changes:
                conn.execute("SAVEPOINT job_change")
                try:
                    self._write_change(conn, change, now)
                    errors.append(None)
                except Exception as exc:
                    if not refused(exc) or not conn.in_transaction:
                        raise
                    conn.execute("ROLLBACK TO job_change")
                    errors.append(exc)
                conn.execute("RELEASE job_change")
        return errors

    def _write_change(self, conn: sqlite3.Connection, change: JobChange, now: float) -> None:
        job_id = change.job.id
        if isinstance(change, CancelQueued):
            reason = safe_text(change.reason)
            columns = dict(ended_at=now, reason=reason, held=0)
            self._transition(conn, job_id, JobState.CANCELLED, reason, now, **columns)
        elif isinstance(change, SetHeld):
            held = int(change.held)
            sql = "UPDATE jobs SET held = ? WHERE id = ? AND state = 'queued'"
            if not conn.execute(sql, (held, job_id)).rowcount:
                state = self._state(conn, job_id).value
                only = "only a queued job can be held or released"
                raise InvalidTransition(f"{only}; job {job_id} is {state}")
            kind = "hold" if held else "release"
            self._add_event(conn, kind, change.event, job_id=job_id, now=now)
        elif isinstance(change, SetPriority):
            old, new = change.job.spec.priority, change.priority
            spec = json.dumps(msgspec.structs.replace(change.job.spec, priority=new).to_dict())
            conn.execute("UPDATE jobs SET spec = ?, priority = ? WHERE id = ?", (spec, new, job_id))
            said = f"priority {old} -> {new} by user"
            self._add_event(conn, "priority", said, job_id=job_id, now=now)
        else:
            state = self._state(conn, job_id)
            if not state.terminal:
                raise InvalidTransition(
                    f"only a finished job can be requeued; job {job_id} is {state.value}"
                )
            conn.execute(
                "UPDATE jobs SET state = 'queued', attempts_before_requeue = attempts, "
                "preemptions = 0, archived = 0, held = 0, cancel_requested = 0, "
                "kill_deadline = NULL, started_at = NULL, ended_at = NULL, exit_code = NULL, "
                "reason = NULL WHERE id = ?",
                (job_id,),
            )
            said = f"requeued by user (was {state.value})"
            self._add_event(conn, "state", said, job_id=job_id, state=JobState.QUEUED, now=now)
