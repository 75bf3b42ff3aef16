"""The engine's durable state: SQLite in WAL mode, one writer (the daemon).

Every change that must stay consistent (a job and its event, an attempt and its job's state) is
one transaction, so a crash leaves either all of it or none of it. The schema is versioned with
`PRAGMA user_version` and moved forward by the ordered migrations below.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpudesk.engine.jobs import InvalidTransition, JobSpec, JobState, check_transition


class StoreError(RuntimeError):
    pass


class IncompatibleStore(StoreError):
    pass


class UnknownJob(StoreError):
    pass


# Each entry moves the schema from version i to i + 1. Append only; never edit a shipped one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE environments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        digest TEXT NOT NULL UNIQUE,
        env TEXT NOT NULL
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        grp TEXT,
        spec TEXT NOT NULL,
        base_env INTEGER REFERENCES environments (id),
        state TEXT NOT NULL
            CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
        priority INTEGER NOT NULL DEFAULT 0,
        submitted_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        attempts INTEGER NOT NULL DEFAULT 0,
        exit_code INTEGER,
        reason TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        kill_deadline REAL
    );
    CREATE INDEX jobs_by_state ON jobs (state, priority DESC, id);
    CREATE INDEX jobs_by_group ON jobs (grp);
    CREATE INDEX jobs_by_name ON jobs (name);
    CREATE TABLE attempts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES jobs (id),
        number INTEGER NOT NULL,
        state TEXT NOT NULL
            CHECK (state IN ('launching', 'running', 'exited', 'lost', 'launch_failed')),
        placement TEXT NOT NULL,
        dir TEXT NOT NULL,
        pid INTEGER,
        pid_started REAL,
        started_at REAL,
        ended_at REAL,
        exit_code INTEGER,
        signal INTEGER,
        reason TEXT,
        UNIQUE (job_id, number)
    );
    CREATE INDEX attempts_by_state ON attempts (state);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        job_id INTEGER,
        attempt INTEGER,
        kind TEXT NOT NULL,
        state TEXT,
        message TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX events_by_job ON events (job_id, id);
    CREATE TABLE metric_samples (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        source TEXT NOT NULL,
        metric TEXT NOT NULL,
        value REAL,
        job_id INTEGER
    );
    CREATE INDEX metric_samples_by_source ON metric_samples (source, metric, ts);
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
    # 2: telemetry. Downsampled series per GPU and per job attempt, and what each attempt used
    # (energy, CPU, memory, I/O), kept up to date while it runs. metric_samples was never written.
    """
    DROP TABLE metric_samples;
    CREATE TABLE gpu_samples (
        ts REAL NOT NULL,
        gpu INTEGER NOT NULL,
        metric TEXT NOT NULL,
        value REAL NOT NULL
    );
    CREATE INDEX gpu_samples_by_gpu ON gpu_samples (gpu, metric, ts);
    CREATE TABLE job_samples (
        ts REAL NOT NULL,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        attempt_id INTEGER NOT NULL,
        metric TEXT NOT NULL,
        value REAL NOT NULL
    );
    CREATE INDEX job_samples_by_job ON job_samples (job_id, metric, ts);
    CREATE TABLE attempt_usage (
        attempt_id INTEGER PRIMARY KEY REFERENCES attempts(id),
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        updated_at REAL NOT NULL,
        usage TEXT NOT NULL
    );
    CREATE INDEX attempt_usage_by_job ON attempt_usage (job_id);
    """,
    # 3: demand. A job's raised demand after an out-of-memory death, and what earlier runs of
    # the same command measured (by command signature), for placing the next ones.
    """
    ALTER TABLE jobs ADD COLUMN demand TEXT;
    CREATE TABLE demand_history (
        signature TEXT PRIMARY KEY,
        memory_mib REAL NOT NULL,
        sm_pct REAL NOT NULL,
        runs INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );
    """,
    # 4: job control. A queued job can be held (never started until released), and a finished
    # job requeued with a fresh attempt budget: attempts made before the latest requeue stay in
    # its history (and its attempt numbers continue) but do not count against max_attempts.
    """
    ALTER TABLE jobs ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN attempts_before_requeue INTEGER NOT NULL DEFAULT 0;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

LIVE_ATTEMPT_STATES = ("launching", "running")
# The gpu_samples metric holding the energy a GPU used over each stored window, in joules (a
# sum, where the other metrics are means): what "energy today" adds up.
GPU_ENERGY_METRIC = "energy_j"


@dataclass(frozen=True)
class JobRecord:
    id: int
    spec: JobSpec
    state: JobState
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    attempts: int
    exit_code: int | None
    reason: str | None
    cancel_requested: bool
    kill_deadline: float | None = None  # wall clock: when a cancel escalates to SIGKILL
    demand: dict[str, Any] | None = None  # raised after an out-of-memory death
    held: bool = False  # a queued job the placement policy must not start until released
    attempts_before_requeue: int = 0  # attempts made before the user last requeued it

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def attempts_since_requeue(self) -> int:
        """The attempts that count against `max_attempts` (all of them if never requeued)."""
        return self.attempts - self.attempts_before_requeue

    def to_dict(self) -> dict[str, Any]:
        spec = self.spec.to_dict()
        spec.pop("env")  # can hold secrets and is large; `show` adds it back on request
        return {
            "id": self.id,
            "name": self.spec.name,
            "state": self.state.value,
            "group": self.spec.group,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "attempts": self.attempts,
            "max_attempts": self.spec.max_attempts,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "cancel_requested": self.cancel_requested,
            "held": self.held,
            "attempts_before_requeue": self.attempts_before_requeue,
            "spec": spec,
        }


@dataclass(frozen=True)
class AttemptRecord:
    id: int
    job_id: int
    number: int
    state: str
    placement: dict[str, Any]
    dir: str
    pid: int | None
    pid_started: float | None
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    reason: str | None

    @property
    def log_path(self) -> str:
        return str(Path(self.dir) / "output.log")

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "state": self.state,
            "placement": self.placement,
            "pid": self.pid,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
            "log": self.log_path,
        }


@dataclass(frozen=True)
class EventRecord:
    id: int
    ts: float
    job_id: int | None
    attempt: int | None
    kind: str
    state: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ts": self.ts,
            "job_id": self.job_id,
            "attempt": self.attempt,
            "kind": self.kind,
            "state": self.state,
            "message": self.message,
        }


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        id=row["id"],
        spec=JobSpec.from_stored(json.loads(row["spec"])),
        state=JobState(row["state"]),
        submitted_at=row["submitted_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        attempts=row["attempts"],
        exit_code=row["exit_code"],
        reason=row["reason"],
        cancel_requested=bool(row["cancel_requested"]),
        kill_deadline=row["kill_deadline"],
        demand=json.loads(row["demand"]) if row["demand"] else None,
        held=bool(row["held"]),
        attempts_before_requeue=row["attempts_before_requeue"],
    )


def _attempt(row: sqlite3.Row) -> AttemptRecord:
    return AttemptRecord(
        id=row["id"],
        job_id=row["job_id"],
        number=row["number"],
        state=row["state"],
        placement=json.loads(row["placement"]),
        dir=row["dir"],
        pid=row["pid"],
        pid_started=row["pid_started"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        exit_code=row["exit_code"],
        signal=row["signal"],
        reason=row["reason"],
    )


def _event(row: sqlite3.Row) -> EventRecord:
    return EventRecord(
        id=row["id"],
        ts=row["ts"],
        job_id=row["job_id"],
        attempt=row["attempt"],
        kind=row["kind"],
        state=row["state"],
        message=row["message"],
    )


class Store:
    """All reads and writes of the engine's database."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._env_ids: dict[str, int] = {}  # digest -> row id; rows are never deleted

    @classmethod
    def open(cls, path: str | Path) -> Store:
        try:
            conn = sqlite3.connect(str(path), isolation_level=None, timeout=10.0)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives a process crash; only an OS crash can lose the last
            # commit.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            store = cls(conn)
            store._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the gpudesk database {path}: {exc}") from exc
        return store

    def close(self) -> None:
        self._conn.close()

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self.schema_version
        if version > SCHEMA_VERSION:
            raise IncompatibleStore(
                f"the database has schema version {version}, newer than this gpudesk understands "
                f"({SCHEMA_VERSION}); upgrade gpudesk or point GPUDESK_HOME elsewhere"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.transaction() as conn:
                for statement in MIGRATIONS[target - 1].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {target}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")

    # ----------------------------------------------------------------- events
    def _add_event(
        self,
        conn: sqlite3.Connection,
        kind: str,
        message: str,
        *,
        job_id: int | None = None,
        attempt: int | None = None,
        state: JobState | None = None,
        now: float | None = None,
    ) -> None:
        conn.execute(
            "INSERT INTO events (ts, job_id, attempt, kind, state, message) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (now or time.time(), job_id, attempt, kind, state.value if state else None, message),
        )

    def add_event(self, kind: str, message: str, *, job_id: int | None = None) -> None:
        with self.transaction() as conn:
            self._add_event(conn, kind, message, job_id=job_id)

    def events(self, job_id: int | None = None, limit: int = 1000) -> list[EventRecord]:
        if job_id is None:
            rows = self._conn.execute(
                "SELECT * FROM (SELECT * FROM events ORDER BY id DESC LIMIT ?) ORDER BY id",
                (limit,),
            )
        else:
            rows = self._conn.execute(
                "SELECT * FROM events WHERE job_id = ? ORDER BY id LIMIT ?", (job_id, limit)
            )
        return [_event(r) for r in rows]

    # ------------------------------------------------------------------- jobs
    def submit(
        self,
        specs: Sequence[JobSpec],
        base_env: Mapping[str, str] | None = None,
        now: float | None = None,
    ) -> list[JobRecord]:
        """Queue jobs, all or none. `base_env` is the submitter's environment, which the jobs
        start from (stored once however many jobs share it)."""
        now = now or time.time()
        ids: list[int] = []
        env: tuple[str, int] | None = None
        with self.transaction() as conn:
            if base_env is not None:
                env = self._environment_id(conn, base_env)
            env_id = env[1] if env else None
            for spec in specs:
                cur = conn.execute(
                    "INSERT INTO jobs (name, grp, spec, base_env, state, priority, submitted_at) "
                    "VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                    (spec.name, spec.group, json.dumps(spec.to_dict()), env_id, spec.priority, now),
                )
                job_id = int(cur.lastrowid or 0)
                ids.append(job_id)
                self._add_event(
                    conn, "state", "submitted", job_id=job_id, state=JobState.QUEUED, now=now
                )
        if env is not None:
            self._env_ids[env[0]] = env[1]
        return [
            JobRecord(
                id=i,
                spec=s,
                state=JobState.QUEUED,
                submitted_at=now,
                started_at=None,
                ended_at=None,
                attempts=0,
                exit_code=None,
                reason=None,
                cancel_requested=False,
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
        return _job(row)

    def jobs_named(self, name: str) -> list[JobRecord]:
        rows = self._conn.execute("SELECT * FROM jobs WHERE name = ? ORDER BY id", (name,))
        return [_job(r) for r in rows]

    def jobs(
        self,
        states: Iterable[JobState] | None = None,
        group: str | None = None,
        ids: Iterable[int] | None = None,
        limit: int | None = None,
    ) -> list[JobRecord]:
        clauses: list[str] = []
        params: list[Any] = []
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
        return [_job(r) for r in self._conn.execute(sql, params)]

    def queued(self) -> list[JobRecord]:
        """Queued jobs in the order a first-come policy would consider them."""
        rows = self._conn.execute(
            "SELECT * FROM jobs WHERE state = 'queued' ORDER BY priority DESC, id"
        )
        return [_job(r) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self._conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")
        counts = {s.value: 0 for s in JobState}
        counts.update({state: n for state, n in rows})
        return counts

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
        sets = ", ".join(["state = ?", *(f"{c} = ?" for c in columns)])
        conn.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (new.value, *columns.values(), job_id))
        self._add_event(conn, "state", message, job_id=job_id, state=new, now=now)

    def finish_queued(
        self, job_id: int, state: JobState, reason: str, now: float | None = None
    ) -> None:
        """End a job that never started (cancelled in the queue, or impossible to place)."""
        now = now or time.time()
        with self.transaction() as conn:
            self._transition(conn, job_id, state, reason, now, ended_at=now, reason=reason, held=0)

    def request_cancel(self, job_id: int, grace: float, now: float | None = None) -> None:
        """Record a cancel of a running job and when it escalates to SIGKILL (an earlier
        deadline wins), so a restarted engine can finish it."""
        now = now or time.time()
        with self.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET cancel_requested = 1, "
                "kill_deadline = MIN(COALESCE(kill_deadline, ?1), ?1) WHERE id = ?2",
                (now + grace, job_id),
            )
            self._add_event(
                conn,
                "cancel",
                f"cancel requested (SIGKILL after {grace:g} s)",
                job_id=job_id,
                now=now,
            )

    # ------------------------------------------------------------ job control
    def set_held(self, job_id: int, held: bool, now: float | None = None) -> JobRecord:
        """Hold a queued job (the placement policy skips it; it keeps its place in the queue)
        or release it. Only a queued job can be held: anything else raises InvalidTransition."""
        now = now or time.time()
        with self.transaction() as conn:
            updated = conn.execute(
                "UPDATE jobs SET held = ? WHERE id = ? AND state = 'queued'", (int(held), job_id)
            ).rowcount
            if not updated:
                state = self._state(conn, job_id)
                raise InvalidTransition(
                    f"only a queued job can be held or released; job {job_id} is {state.value}"
                )
            self._add_event(
                conn,
                "hold" if held else "release",
                "held by user" if held else "released by user",
                job_id=job_id,
                now=now,
            )
        return self.job(job_id)

    def set_priority(self, job_id: int, priority: int, now: float | None = None) -> JobRecord:
        """Change a job's priority (its spec and the queue-order column) in any state; it
        orders the queue, so it matters when the job is, or next goes back to, queued."""
        now = now or time.time()
        with self.transaction() as conn:
            row = conn.execute("SELECT spec FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise UnknownJob(f"no job with id {job_id}")
            spec = JobSpec.from_stored(json.loads(row["spec"]))
            changed = dataclasses.replace(spec, priority=priority)
            conn.execute(
                "UPDATE jobs SET spec = ?, priority = ? WHERE id = ?",
                (json.dumps(changed.to_dict()), priority, job_id),
            )
            self._add_event(
                conn,
                "priority",
                f"priority {spec.priority} -> {priority} by user",
                job_id=job_id,
                now=now,
            )
        return self.job(job_id)

    def requeue(self, job_id: int, now: float | None = None) -> JobRecord:
        """Put a finished job (succeeded, failed or cancelled) back in the queue as the same
        job, with a fresh attempt budget: its attempts stay in its history and the next one's
        number follows them. Raises InvalidTransition for a job that has not finished."""
        now = now or time.time()
        with self.transaction() as conn:
            state = self._state(conn, job_id)
            if not state.terminal:
                raise InvalidTransition(
                    f"only a finished job can be requeued; job {job_id} is {state.value}"
                )
            conn.execute(
                "UPDATE jobs SET state = 'queued', attempts_before_requeue = attempts, "
                "held = 0, cancel_requested = 0, kill_deadline = NULL, started_at = NULL, "
                "ended_at = NULL, exit_code = NULL, reason = NULL WHERE id = ?",
                (job_id,),
            )
            self._add_event(
                conn,
                "state",
                f"requeued by user (was {state.value})",
                job_id=job_id,
                state=JobState.QUEUED,
                now=now,
            )
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
        return _attempt(row)

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        rows = self._conn.execute(
            "SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,)
        )
        return [_attempt(r) for r in rows]

    def live_attempts(self) -> list[AttemptRecord]:
        rows = self._conn.execute(
            "SELECT * FROM attempts WHERE state IN ('launching', 'running') ORDER BY id"
        )
        return [_attempt(r) for r in rows]

    def attempt_launched(
        self, attempt_id: int, pid: int, pid_started: float, now: float | None = None
    ) -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE attempts SET state = 'running', pid = ?, pid_started = ?, started_at = ? "
                "WHERE id = ?",
                (pid, pid_started, now or time.time(), attempt_id),
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
    ) -> None:
        """Close an attempt and move its job on (to a final state, or back to the queue);
        `demand` replaces what the job is assumed to need (after an out-of-memory death)."""
        now = now or time.time()
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
            if job_state.terminal:
                self._transition(
                    conn,
                    attempt.job_id,
                    job_state,
                    message,
                    now,
                    ended_at=ended_at,
                    exit_code=exit_code,
                    reason=message,
                )
            else:
                self._transition(
                    conn,
                    attempt.job_id,
                    job_state,
                    message,
                    now,
                    exit_code=exit_code,
                    reason=message,
                )

    # --------------------------------------------------------------- settings
    def setting(self, key: str) -> Any:
        row = self._conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row["value"])

    def set_setting(self, key: str, value: Any) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    # ------------------------------------------------------------ telemetry
    def record_usage(
        self, usages: Iterable[tuple[int, int, Mapping[str, Any]]], now: float | None = None
    ) -> None:
        """(attempt id, job id, usage dict) for each attempt, replacing what was stored."""
        now = time.time() if now is None else now
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO attempt_usage (attempt_id, job_id, updated_at, usage) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (attempt_id) DO UPDATE SET "
                "updated_at = excluded.updated_at, usage = excluded.usage",
                [(a, j, now, json.dumps(dict(u))) for a, j, u in usages],
            )

    def usage(self, job_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
        """Each job's per-attempt usage, oldest attempt first."""
        if not job_ids:
            return {}
        marks = ",".join("?" * len(job_ids))
        rows = self._conn.execute(
            "SELECT u.job_id, a.number, u.usage FROM attempt_usage u "
            "JOIN attempts a ON a.id = u.attempt_id "
            f"WHERE u.job_id IN ({marks}) ORDER BY u.job_id, a.number",
            list(job_ids),
        )
        found: dict[int, list[dict[str, Any]]] = {}
        for job_id, number, usage in rows:
            found.setdefault(job_id, []).append({"attempt": number, **json.loads(usage)})
        return found

    def add_samples(
        self,
        gpu_rows: Iterable[tuple[float, int, str, float]],
        job_rows: Iterable[tuple[float, int, int, str, float]],
    ) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO gpu_samples (ts, gpu, metric, value) VALUES (?, ?, ?, ?)", gpu_rows
            )
            conn.executemany(
                "INSERT INTO job_samples (ts, job_id, attempt_id, metric, value) "
                "VALUES (?, ?, ?, ?, ?)",
                job_rows,
            )

    def gpu_series(self, gpu: int, metric: str, since: float = 0.0) -> list[tuple[float, float]]:
        return [
            tuple(row)
            for row in self._conn.execute(
                "SELECT ts, value FROM gpu_samples WHERE gpu = ? AND metric = ? AND ts >= ? "
                "ORDER BY ts",
                (gpu, metric, since),
            )
        ]

    def gpu_energy_since(self, gpus: Iterable[int], since: float) -> dict[int, float]:
        """Joules each GPU used since `since`, from the stored GPU_ENERGY_METRIC points (each
        the energy of the window that ended at its time stamp). GPUs with none are left out."""
        found = {}
        for gpu in gpus:
            total = self._conn.execute(
                "SELECT SUM(value) FROM gpu_samples WHERE gpu = ? AND metric = ? AND ts >= ?",
                (gpu, GPU_ENERGY_METRIC, since),
            ).fetchone()[0]
            if total is not None:
                found[gpu] = float(total)
        return found

    def job_series(self, job_id: int, metric: str) -> list[tuple[float, float]]:
        return [
            tuple(row)
            for row in self._conn.execute(
                "SELECT ts, value FROM job_samples WHERE job_id = ? AND metric = ? ORDER BY ts",
                (job_id, metric),
            )
        ]

    def prune_samples(self, before: float) -> int:
        with self.transaction() as conn:
            gone = conn.execute("DELETE FROM gpu_samples WHERE ts < ?", (before,)).rowcount
            gone += conn.execute("DELETE FROM job_samples WHERE ts < ?", (before,)).rowcount
        return gone

    # ----------------------------------------------------------------- demand
    def demand_history(self) -> dict[str, tuple[float, float, int]]:
        """signature -> (peak memory MiB, SM %, runs) measured by earlier runs."""
        return {
            row[0]: (row[1], row[2], row[3])
            for row in self._conn.execute(
                "SELECT signature, memory_mib, sm_pct, runs FROM demand_history"
            )
        }

    def record_demand(
        self, signature: str, memory_mib: float, sm_pct: float, now: float | None = None
    ) -> None:
        """Fold one run's measured peak into the command's history (the larger peak wins, so
        the estimate errs on the safe side; SM activity is averaged)."""
        now = time.time() if now is None else now
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO demand_history (signature, memory_mib, sm_pct, runs, updated_at) "
                "VALUES (?, ?, ?, 1, ?) ON CONFLICT (signature) DO UPDATE SET "
                "memory_mib = MAX(memory_mib, excluded.memory_mib), "
                "sm_pct = (sm_pct * runs + excluded.sm_pct) / (runs + 1), "
                "runs = runs + 1, updated_at = excluded.updated_at",
                (signature, memory_mib, sm_pct, now),
            )
