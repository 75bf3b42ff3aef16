"""Jobs in the store: submitting, reading, the user's job control, and attempts."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gpudesk.core.identity import Identity
from gpudesk.core.job_changes import hold_event
from gpudesk.core.job_edit import JobEdit
from gpudesk.core.jobs import InvalidTransition, JobSpec, JobState, check_transition
from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.core.wire.requests import InParts
from gpudesk.engine.store.connection import StoreConnection
from gpudesk.engine.store.listing import read_rows
from gpudesk.engine.store.records import HELD_IN_PARTS, read_attempt, read_job
from gpudesk.engine.store.schema import ARRAY_OF_ROW, StoreError, UnknownJob
from gpudesk.hw.boottime import BootStamp
from gpudesk.text import safe_text

# Why a job held by its submission's client is cancelled as an engine starts
CUT_SHORT = (
    "cancelled as the engine started: the client sending its submission in parts lost the "
    "engine before all of them were in, and a submission runs all or none; submit it again"
)


class JobTables(StoreConnection):
    """Jobs, their environments, their attempts."""

    # ------------------------------------------------------------------- jobs
    def submit(
        self,
        specs: Sequence[JobSpec],
        base_env: Mapping[str, str] | None = None,
        now: float | None = None,
        owner: Identity | None = None,
        held: bool = False,
        in_parts: InParts | None = None,
    ) -> list[JobRecord]:
        """Queue jobs, all or none, for `owner` (default: the engine's own user), `held` ones in
        the same transaction (none can start unheld, whatever fails): by the user, or by the
        client sending a submission `in_parts` (held as HELD_IN_PARTS; its event says so too).
        `base_env` is the submitter's environment, which the jobs start from (stored once
        however many share it). An `after` of -k names the k-th of these jobs: its id is put in."""
        now = now or time.time()
        owner = owner or Identity.of_process().named()  # as given: named off the loop (submit)
        specs, parted = list(specs), held and in_parts is not None
        ids: list[int] = []
        env: tuple[str, int] | None = None
        with self.transaction() as conn:
            if base_env is not None:
                env = self._environment_id(conn, base_env)
            env_id = env[1] if env else None
            for number, spec in enumerate(specs):
                spec = specs[number] = spec.with_request_ids(ids)
                cur = conn.execute(
                    "INSERT INTO jobs (name, grp, spec, base_env, state, priority, submitted_at, "
                    "owner_uid, owner_gid, owner_groups, owner_login, held) "
                    "VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
                    (
                        spec.name,
                        spec.group,
                        json.dumps(spec.to_dict()),
                        env_id,
                        spec.priority,
                        now,
                        owner.uid,
                        owner.gid,
                        json.dumps(list(owner.groups)),
                        owner.login,
                        HELD_IN_PARTS if parted else int(held),
                    ),
                )
                job_id = int(cur.lastrowid or 0)
                ids.append(job_id)
                self._add_event(
                    conn, "state", "submitted", job_id=job_id, state=JobState.QUEUED, now=now
                )
                if held:
                    said = hold_event(True, in_parts)
                    self._add_event(conn, "hold", said, job_id=job_id, now=now)
        if env is not None:
            self._env_ids[env[0]] = env[1]
        return [
            msgspec.structs.replace(
                JobRecord.queued(i, s, now, owner), held=held, held_in_parts=parted
            )
            for i, s in zip(ids, specs, strict=True)
        ]

    def _environment_id(self, conn: sqlite3.Connection, env: Mapping[str, str]) -> tuple[str, int]:
        """(digest, row id) of an environment, inserted if new. The caller caches the pair once
        its transaction has committed: a rolled-back row must not be remembered."""
        text = json.dumps(dict(env), sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in self._env_ids:
            return digest, self._env_ids[digest]
        conn.execute(
            "INSERT OR IGNORE INTO environments (digest, env) VALUES (?, ?)", (digest, text)
        )
        row = conn.execute("SELECT id FROM environments WHERE digest = ?", (digest,)).fetchone()
        return digest, int(row[0])

    def base_env(self, job_id: int) -> dict[str, str]:
        row = self._conn.execute(
            "SELECT e.env FROM jobs j JOIN environments e ON e.id = j.base_env WHERE j.id = ?",
            (job_id,),
        ).fetchone()
        return {} if row is None else json.loads(row[0])

    def job(self, job_id: int) -> JobRecord:
        row = self._conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(f"no job with id {job_id}")
        return read_job(row)

    def job_exists(self, job_id: int) -> bool:
        return (
            self._conn.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is not None
        )

    def existing_ids(self, ids: Sequence[int]) -> set[int]:
        """Which of `ids` are jobs' (their rows not read), 10,000 a query (SQLite's bound on
        a statement's parameters is 32,766)."""
        found: set[int] = set()
        for start in range(0, len(ids), 10_000):
            part = ids[start : start + 10_000]
            sql = f"SELECT id FROM jobs WHERE id IN ({','.join('?' * len(part))})"
            found.update(row[0] for row in self._conn.execute(sql, part))
        return found

    def array_tasks(self, heads: Sequence[int]) -> dict[int, dict[int, int]]:
        """The arrays whose first jobs are among `heads` (at most 16,000: two parameters each):
        each one's task index -> job id, in task order, its first job's own included (each task
        of `--array` is a job): the first jobs by their ids, the later tasks by jobs_by_array."""
        found: dict[int, dict[int, int]] = {}
        task, marks = "json_extract(spec, '$.array_task')", ",".join("?" * len(heads))
        for array, job_id, index in self._conn.execute(
            f"SELECT id, id, {task} FROM jobs WHERE id IN ({marks}) AND json_valid(spec) AND "
            f"{ARRAY_OF_ROW} IS NULL AND {task} IS NOT NULL UNION ALL SELECT {ARRAY_OF_ROW}, id, "
            f"{task} FROM jobs WHERE json_valid(spec) AND {ARRAY_OF_ROW} IN ({marks})",
            [*heads, *heads],
        ):
            found.setdefault(array, {})[index] = job_id
        return {array: dict(sorted(tasks.items())) for array, tasks in found.items()}

    def jobs_named(self, name: str) -> list[JobRecord]:
        rows = self._conn.execute("SELECT * FROM jobs WHERE name = ? ORDER BY id", (name,))
        return [read_job(r) for r in rows]

    def jobs(
        self,
        states: Iterable[JobState] | None = None,
        group: str | None = None,
        ids: Iterable[int] | None = None,
        limit: int | None = None,
        owner_uid: int | None = None,
    ) -> list[JobRecord]:
        clauses: list[str] = []
        params: list[Any] = []
        if owner_uid is not None:
            # a job stored before owners were (schema 7) is the engine's user's
            clauses.append("(owner_uid = ? OR (owner_uid IS NULL AND ? = ?))")
            params.extend([owner_uid, owner_uid, os.getuid()])
        if states is not None:
            wanted = [s.value for s in states]
            clauses.append(f"state IN ({','.join('?' * len(wanted))})")
            params.extend(wanted)
        if group is not None:
            clauses.append("grp = ?")
            params.append(group)
        if ids is not None:
            wanted_ids = list(ids)
            clauses.append(f"id IN ({','.join('?' * len(wanted_ids))})")
            params.extend(wanted_ids)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        if limit is None:
            sql = f"SELECT * FROM jobs{where} ORDER BY id"
        else:  # the newest `limit`, oldest first
            sql = f"SELECT * FROM (SELECT * FROM jobs{where} ORDER BY id DESC LIMIT ?) ORDER BY id"
            params.append(limit)
        return read_rows(self._conn.execute(sql, params))[0]

    def queued(self) -> list[JobRecord]:
        """The station's queued jobs in the order a first-come policy would consider them. A job
        that names a cluster is never one, whatever its Slurm row says or whether it has one
        (an engine stopped during its submission): Slurm places it, or it fails. A row that
        cannot be read is left out (and logged): it must not stop the queue of everyone else."""
        rows = self._conn.execute(
            "SELECT * FROM jobs WHERE state = 'queued' "
            "AND id NOT IN (SELECT job_id FROM slurm_jobs) ORDER BY priority DESC, id"
        )
        return [job for job in read_rows(rows)[0] if job.spec.cluster is None]

    def counts(self) -> dict[str, int]:
        rows = self._conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")
        counts = {s.value: 0 for s in JobState if s is not JobState.SUSPENDED}  # never stored
        counts.update({state: n for state, n in rows})
        return counts

    def counts_by_owner(self) -> list[tuple[int | None, str, int]]:
        """(owner uid, state, jobs) for every owner and state that has jobs; a job stored
        before owners were (schema 7) has None, the engine's own user. An index-only scan
        (jobs_by_owner); then the running jobs that are suspended, as `suspended` rows (also
        counted in `running`: metrics.snapshot.job_counts moves them)."""
        rows = self._conn.execute(
            "SELECT owner_uid, state, COUNT(*) FROM jobs GROUP BY owner_uid, state UNION ALL "
            "SELECT owner_uid, 'suspended', COUNT(*) FROM jobs WHERE state = 'running' "
            "AND suspended_at IS NOT NULL GROUP BY owner_uid"
        )
        return [(uid, state, n) for uid, state, n in rows]

    def owner_login(self, uid: int) -> str | None:
        """A uid's name as stored with its newest job that has one (schema 21): an index's
        search (jobs_by_owner_id), no question to the user database."""
        row = self._conn.execute(
            "SELECT owner_login FROM jobs WHERE owner_uid = ? AND owner_login IS NOT NULL "
            "ORDER BY id DESC LIMIT 1",
            (uid,),
        ).fetchone()
        return row[0] if row else None

    @staticmethod
    def _state(conn: sqlite3.Connection, job_id: int) -> JobState:
        row = conn.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(f"no job with id {job_id}")
        return JobState(row["state"])

    def _transition(
        self,
        conn: sqlite3.Connection,
        job_id: int,
        new: JobState,
        message: str,
        now: float,
        **columns: Any,
    ) -> None:
        check_transition(self._state(conn, job_id), new)
        if new is not JobState.RUNNING:  # a suspension ends with its attempt
            columns.setdefault("suspended_at", None)
        sets = ", ".join(["state = ?", *(f"{c} = ?" for c in columns)])
        conn.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (new.value, *columns.values(), job_id))
        self._add_event(conn, "state", message, job_id=job_id, state=new, now=now)

    def cancel_cut_short_submissions(self) -> int:
        """At an engine's start, cancel the queued jobs still held by the client that sent
        their submission in parts (api/submit_parts.py): it lost the last engine before it
        released them, and never will; a submission runs all or none. How many there were
        (each job's event says why; the engine's own event counts them)."""
        sql = "SELECT id FROM jobs WHERE state = 'queued' AND held = ? ORDER BY id"
        ids = [row[0] for row in self._conn.execute(sql, (HELD_IN_PARTS,))]
        if ids:
            self.finish_queued([(i, CUT_SHORT) for i in ids], JobState.CANCELLED)
            self.add_event("engine", f"cancelled {len(ids)} job(s) of submissions cut short")
        return len(ids)

    def finish_queued(
        self, ended: Iterable[tuple[int, str]], state: JobState, now: float | None = None
    ) -> None:
        """End jobs that never started (cancelled in the queue, or impossible to place), each
        (id, reason) of `ended`, in one transaction: all of them, or none."""
        now = now or time.time()
        with self.transaction() as conn:
            for job_id, reason in ended:
                said = safe_text(reason)
                self._transition(conn, job_id, state, said, now, ended_at=now, reason=said, held=0)

    # ------------------------------------------------------------ job control
    def edit(self, job_id: int, edit: JobEdit, now: float | None = None) -> JobRecord:
        """A queued job's new spec (and submitted env, given one) and its `edit` event, in one
        transaction; its id, priority and place stay. InvalidTransition once it is not queued."""
        now = now or time.time()
        with self.transaction() as conn:
            env = None if edit.base_env is None else self._environment_id(conn, edit.base_env)
            if not conn.execute(
                "UPDATE jobs SET spec = ?, name = ?, base_env = COALESCE(?, base_env) "
                "WHERE id = ? AND state = 'queued'",
                (json.dumps(edit.spec.to_dict()), edit.spec.name, env[1] if env else None, job_id),
            ).rowcount:
                raise InvalidTransition(f"job {job_id} is not queued: it cannot be edited")
            self._add_event(conn, "edit", edit.message, job_id=job_id, now=now)
        if env is not None:
            self._env_ids[env[0]] = env[1]
        return self.job(job_id)

    # --------------------------------------------------------------- attempts
    def start_attempt(
        self, job_id: int, placement: dict[str, Any], jobs_root: Path, now: float | None = None
    ) -> AttemptRecord:
        """queued -> running and a new attempt in 'launching', in one transaction. The attempt's
        folder is `jobs_root/<job id>/<attempt number>`."""
        now = now or time.time()
        with self.transaction() as conn:
            number = (
                int(conn.execute("SELECT attempts FROM jobs WHERE id = ?", (job_id,)).fetchone()[0])
                + 1
            )
            directory = str(jobs_root / str(job_id) / str(number))
            cur = conn.execute(
                "INSERT INTO attempts (job_id, number, state, placement, dir, started_at) "
                "VALUES (?, ?, 'launching', ?, ?, ?)",
                (job_id, number, json.dumps(placement), directory, now),
            )
            self._transition(
                conn,
                job_id,
                JobState.RUNNING,
                f"attempt {number} placed on {placement.get('slot', '?')}: "
                f"{placement.get('reason', '')}".rstrip(": "),
                now,
                attempts=number,
                started_at=now,
            )
            attempt_id = int(cur.lastrowid or 0)
        return self.attempt(attempt_id)

    def attempt(self, attempt_id: int) -> AttemptRecord:
        row = self._conn.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise StoreError(f"no attempt with id {attempt_id}")
        return read_attempt(row)

    def newest_attempt_id(self) -> int:
        """The id of the attempt started last (0 before any): it grows with every start."""
        row = self._conn.execute("SELECT MAX(id) FROM attempts").fetchone()
        return int(row[0] or 0)

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        rows = self._conn.execute(
            "SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,)
        )
        return [read_attempt(r) for r in rows]

    def live_attempts(self) -> list[AttemptRecord]:
        rows = self._conn.execute(
            "SELECT * FROM attempts WHERE state IN ('launching', 'running') ORDER BY id"
        )
        return [read_attempt(r) for r in rows]

    def attempt_launched(
        self,
        attempt_id: int,
        pid: int,
        pid_started: float,
        now: float | None = None,
        boot: BootStamp | None = None,
    ) -> None:
        """The attempt's wrapper runs as `pid`. `boot`: when it started on CLOCK_BOOTTIME, which
        its time limit runs on (None keeps what is stored)."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE attempts SET state = 'running', pid = ?, pid_started = ?, started_at = ?, "
                "started_boottime = COALESCE(?, started_boottime), boot_id = COALESCE(?, boot_id) "
                "WHERE id = ?",
                (
                    pid,
                    pid_started,
                    now or time.time(),
                    boot.at if boot else None,
                    boot.boot_id if boot else None,
                    attempt_id,
                ),
            )

    def finish_attempt(
        self,
        attempt: AttemptRecord,
        *,
        attempt_state: str,
        job_state: JobState,
        message: str,
        exit_code: int | None,
        signal: int | None = None,
        ended_at: float | None = None,
        now: float | None = None,
        demand: Mapping[str, Any] | None = None,
        preempted_for: int | None = None,
    ) -> None:
        """Close an attempt and move its job on (to a final state, or back to the queue);
        `demand` replaces what the job is assumed to need (after an out-of-memory death);
        `preempted_for`: it was preempted for that job, which it does not count against
        max_attempts (docs/preemption.md).
        `message` may quote the job's program or folder (bytes that need not be UTF-8)."""
        now = now or time.time()
        message = safe_text(message)
        ended_at = ended_at or now
        with self.transaction() as conn:
            if demand is not None:
                conn.execute(
                    "UPDATE jobs SET demand = ? WHERE id = ?",
                    (json.dumps(dict(demand)), attempt.job_id),
                )
            conn.execute(
                "UPDATE attempts SET state = ?, ended_at = ?, exit_code = ?, signal = ?, "
                "reason = ? WHERE id = ? AND state IN ('launching', 'running')",
                (attempt_state, ended_at, exit_code, signal, message, attempt.id),
            )
            if preempted_for is not None:
                conn.execute(
                    "UPDATE attempts SET preempted_for = ? WHERE id = ?",
                    (preempted_for, attempt.id),
                )
                conn.execute(
                    "UPDATE jobs SET preemptions = preemptions + 1 WHERE id = ?", (attempt.job_id,)
                )
            ending: dict[str, float | None] = {"exit_code": exit_code}
            if job_state.terminal:  # else requeued, not ended
                ending["ended_at"] = ended_at
            job_id = attempt.job_id
            self._transition(conn, job_id, job_state, message, now, reason=message, **ending)

    def abandon_attempt(
        self, attempt: AttemptRecord, reason: str, now: float | None = None
    ) -> None:
        """Close an attempt whose ending could not be recorded (`finish_attempt` raised): the
        attempt is lost and its job failed with `reason`, unless the job has already ended.
        Asks nothing of the attempt's own record, so it cannot fail the way that did."""
        now = now or time.time()
        reason = safe_text(reason)
        with self.transaction() as conn:
            conn.execute(
                "UPDATE attempts SET state = 'lost', ended_at = ?, reason = ? "
                "WHERE id = ? AND state IN ('launching', 'running')",
                (now, reason, attempt.id),
            )
            if not self._state(conn, attempt.job_id).terminal:
                self._transition(
                    conn, attempt.job_id, JobState.FAILED, reason, now, ended_at=now, reason=reason
                )

    def reserve_job_ids(self, up_to: int) -> None:
        """Make every new job's id larger than `up_to` (ids already used elsewhere)."""
        if up_to <= 0:
            return
        with self.transaction() as conn:
            updated = conn.execute(
                "UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'jobs'", (up_to,)
            ).rowcount
            if not updated:
                conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)", (up_to,))
