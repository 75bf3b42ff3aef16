"""Jobs submitted to a Slurm cluster, in the store (schema 9): which sbatch carries each, the id
Slurm knows it by, and what Slurm last said of it (gpudesk.engine.backends.slurm)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence

from gpudesk.core.jobs import JobState
from gpudesk.engine.store.jobs import JobTables
from gpudesk.slurm.records import SENDING, SlurmRow
from gpudesk.text import safe_text


def _row(row: sqlite3.Row) -> SlurmRow:
    return SlurmRow(
        row["job_id"],
        row["cluster"],
        row["conf"],
        row["submission"],
        row["task"],
        row["own_id"],
        row["output"],
        row["script"],
        row["gres"],
        row["state"],
        row["reason"],
        row["node"],
        bool(row["cancel_sent"]),
    )


class SlurmTables(JobTables):
    def add_slurm_jobs(self, rows: Iterable[SlurmRow]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO slurm_jobs (job_id, cluster, conf, submission, task, output, "
                "script, gres, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.job_id,
                        r.cluster,
                        r.conf,
                        r.submission,
                        r.task,
                        r.output,
                        r.script,
                        r.gres,
                        r.state,
                    )
                    for r in rows
                ],
            )

    def slurm_jobs(self, job_ids: Sequence[int]) -> dict[int, SlurmRow]:
        if not job_ids:
            return {}
        found: dict[int, SlurmRow] = {}
        for start in range(0, len(job_ids), 500):  # SQLite's bound on parameters
            chunk = list(job_ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for row in self._conn.execute(
                f"SELECT * FROM slurm_jobs WHERE job_id IN ({marks})", chunk
            ):
                found[row["job_id"]] = _row(row)
        return found

    def slurm_job(self, job_id: int) -> SlurmRow | None:
        return self.slurm_jobs([job_id]).get(job_id)

    def active_slurm_jobs(self) -> list[SlurmRow]:
        """The Slurm jobs that have not ended (as gpudesk has them)."""
        rows = self._conn.execute(
            "SELECT s.* FROM slurm_jobs s JOIN jobs j ON j.id = s.job_id "
            "WHERE j.state IN ('queued', 'running') ORDER BY s.job_id"
        )
        return [_row(r) for r in rows]

    def note_slurm(
        self,
        job_id: int,
        state: str | None,
        reason: str | None,
        node: str | None,
        own_id: str | None,
    ) -> None:
        """What Slurm said of a job that did not change its gpudesk state."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE slurm_jobs SET state = ?, reason = ?, node = COALESCE(?, node), "
                "own_id = COALESCE(?, own_id) WHERE job_id = ?",
                (state, reason, node, own_id, job_id),
            )

    def slurm_cancel_sent(self, job_ids: Sequence[int]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "UPDATE slurm_jobs SET cancel_sent = 1 WHERE job_id = ?", [(i,) for i in job_ids]
            )

    def slurm_started(self, job_id: int, started_at: float, message: str, attempt: int = 1) -> None:
        """queued -> running: Slurm started it, for the `attempt`-th time (its one attempt, as
        gpudesk counts them, unless Slurm requeued it: `slurm_requeued`)."""
        with self.transaction() as conn:
            self._transition(
                conn,
                job_id,
                JobState.RUNNING,
                safe_text(message),
                time.time(),
                attempts=attempt,
                started_at=started_at,
            )

    def slurm_requeued(self, job_id: int, message: str) -> None:
        """running -> queued: Slurm put the job back in its queue (a preemption with
        PreemptMode=REQUEUE, `scontrol requeue`, a node that failed under it); it runs its
        script again from the start. Counted as a preemption, as the station's are."""
        message = safe_text(message)
        with self.transaction() as conn:
            self._transition(
                conn, job_id, JobState.QUEUED, message, time.time(), started_at=None, reason=message
            )
            conn.execute("UPDATE jobs SET preemptions = preemptions + 1 WHERE id = ?", (job_id,))

    def slurm_ended(
        self,
        job_id: int,
        state: JobState,
        message: str,
        *,
        exit_code: int | None,
        started_at: float | None,
        ended_at: float,
    ) -> None:
        """A Slurm job ended (from queued, when it never ran: cancelled, or its parent failed)."""
        message = safe_text(message)
        with self.transaction() as conn:
            columns: dict[str, object] = {
                "ended_at": ended_at,
                "exit_code": exit_code,
                "reason": message,
                "held": 0,
            }
            if started_at is not None:  # its attempts so far, one at least (requeues count)
                (before,) = conn.execute(
                    "SELECT attempts FROM jobs WHERE id = ?", (job_id,)
                ).fetchone()
                columns.update(attempts=max(1, before), started_at=started_at)
            self._transition(conn, job_id, state, message, time.time(), **columns)

    def slurm_sent(self, sent: Sequence[tuple[int, str]]) -> None:
        """Intent rows whose sbatch reached Slurm: (job id, the submission's Slurm id)."""
        with self.transaction() as conn:
            conn.executemany(
                "UPDATE slurm_jobs SET submission = ?, state = 'PENDING' "
                "WHERE job_id = ? AND submission = ?",
                [(submission, job_id, SENDING) for job_id, submission in sent],
            )

    def cluster_jobs_without_row(self) -> list[int]:
        """Unended jobs that name a cluster but have no Slurm row (an engine before intent rows
        was stopped during their submission): they ran nowhere gpudesk can tell."""
        rows = self._conn.execute(
            "SELECT id, spec FROM jobs WHERE state IN ('queued', 'running') "
            "AND id NOT IN (SELECT job_id FROM slurm_jobs)"
        )
        return [r["id"] for r in rows if json.loads(r["spec"]).get("cluster")]

    def discard_jobs(self, job_ids: Sequence[int]) -> None:
        """Forget jobs that were never submitted anywhere (their submission to Slurm failed as
        a whole): their rows and events go, as if the request had been refused."""
        with self.transaction() as conn:
            for job_id in job_ids:
                conn.execute("DELETE FROM slurm_jobs WHERE job_id = ?", (job_id,))
                conn.execute("DELETE FROM events WHERE job_id = ?", (job_id,))
                conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
