"""A store filled with many jobs fast: rows written straight into the jobs table in one
transaction (what `JobTables.submit` writes, without its per-job event), for the tests and
measurements of listings over a long-lived station's store (100,000 jobs in about a second).

    fill_jobs(store_path, finished=20_000, queued=600, running=1)

Finished jobs end at `ended_at` (default: now); the owner is the caller's uid unless given.
The module sits beside conftest.py, so every test folder can import it."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from gpudesk.core.jobs import JobSpec

FINISHED_CYCLE = ("succeeded", "failed", "cancelled")


def fill_jobs(
    db: Path,
    *,
    finished: int = 0,
    queued: int = 0,
    running: int = 0,
    ended_at: float | None = None,
    owner_uid: int | None = None,
    name: str = "filler",
    group: str | None = None,
    held: bool = False,
) -> list[int]:
    """Insert `finished` finished jobs (succeeded, failed, cancelled in turn), then `queued`
    queued (`held`: never started until released) and `running` running ones (with no attempt:
    an engine adopting the store finds those lost); their ids, in that order."""
    now = time.time()
    ended = now if ended_at is None else ended_at
    uid = os.getuid() if owner_uid is None else owner_uid
    spec = json.dumps(JobSpec(name=name, command=("true",), group=group).to_dict())
    rows = []
    for number in range(finished):
        state = FINISHED_CYCLE[number % 3]
        rows.append((state, ended - 60, ended - 30, ended, 1, 0 if state == "succeeded" else 1))
    rows += [("queued", now, None, None, 0, None)] * queued
    rows += [("running", now, now, None, 1, None)] * running
    conn = sqlite3.connect(str(db), isolation_level=None, timeout=30.0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        first = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM jobs").fetchone()[0]) + 1
        conn.executemany(
            "INSERT INTO jobs (name, grp, spec, state, submitted_at, started_at, ended_at, "
            "attempts, exit_code, owner_uid, owner_gid, owner_groups, held) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '[]', ?)",
            [
                (name, group, spec, state, sub, start, end, tries, code, uid, uid, int(held))
                for state, sub, start, end, tries, code in rows
            ],
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return list(range(first, first + len(rows)))


def corrupt_spec(db: Path, job_id: int, text: str = "{not json") -> None:
    """Overwrite a job's stored spec with text that is not JSON, as a damaged disk or a hand
    edit would leave it."""
    conn = sqlite3.connect(str(db), isolation_level=None, timeout=30.0)
    try:
        conn.execute("UPDATE jobs SET spec = ? WHERE id = ?", (text, job_id))
    finally:
        conn.close()
