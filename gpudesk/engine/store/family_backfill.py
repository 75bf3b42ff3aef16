"""Schema 13's backfill: the command-family history filled from what an older store holds.
Its measured demand is keyed by exact command signature (a one-way hash), so each row is matched
to its family through the jobs that ran that command; each succeeded job's last attempt gives
its family a run time. A demand row no stored job matches stays in demand_history, still read
for its own command. Schema 17's re-keying of both histories by owner, from the same jobs."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import msgspec

from gpudesk.policy.command_family import family, owner_key
from gpudesk.policy.demand import signature

FAMILY_HISTORY_VERSION = 13  # the migration that makes family_history
OWNER_KEYS_VERSION = 17  # the migration that keys both histories by owner
ALONE_RATES_OWNERS_VERSION = 19  # ... and the one that keys the rates alone so


class _Family(msgspec.Struct):
    memory_mib: float | None = None
    sm_sum: float = 0.0
    runs: int = 0
    run_s_sum: float = 0.0
    finished: int = 0


def backfill_families(conn: sqlite3.Connection, now: float | None = None) -> int:
    """Fill family_history from demand_history and the jobs; returns the families written."""
    demand = {
        row[0]: (float(row[1]), float(row[2]), int(row[3]))
        for row in conn.execute("SELECT signature, memory_mib, sm_pct, runs FROM demand_history")
    }
    families: dict[str, _Family] = {}
    folded: set[tuple[str, str]] = set()  # (signature, family) already counted
    for command, workdir, state, started, ended in _jobs(conn, "j.state, a.started_at, a.ended_at"):
        key = family(command, workdir)
        entry = families.setdefault(key, _Family())
        exact = signature(command, workdir)
        if exact in demand and (exact, key) not in folded:
            folded.add((exact, key))
            memory, sm, runs = demand[exact]
            entry.memory_mib = max(entry.memory_mib or 0.0, memory)
            entry.sm_sum += sm * runs
            entry.runs += runs
        if state == "succeeded" and started is not None and ended is not None and ended > started:
            entry.run_s_sum += ended - started
            entry.finished += 1
    now = time.time() if now is None else now
    written = 0
    for key, entry in families.items():
        if not entry.runs and not entry.finished:
            continue
        conn.execute(
            "INSERT INTO family_history (family, memory_mib, sm_pct, runs, run_s, finished, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                entry.memory_mib,
                entry.sm_sum / entry.runs if entry.runs else None,
                entry.runs,
                entry.run_s_sum / entry.finished if entry.finished else None,
                entry.finished,
                now,
            ),
        )
        written += 1
    return written


def _jobs(conn: sqlite3.Connection, columns: str) -> Iterator[tuple[Any, ...]]:
    """Each job's command, workdir and `columns` (of `j`, its job, and `a`, its last attempt)."""
    rows = conn.execute(
        f"SELECT j.spec, {columns} FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id "
        "AND a.number = (SELECT MAX(number) FROM attempts WHERE job_id = j.id)"
    )
    for spec_text, *rest in rows:
        try:
            # only the two fields the keys need (what JobSpec.from_stored makes of them), so a
            # spec of an older version reads too, and 100,000 jobs take a few seconds, once
            data = json.loads(spec_text)
            command = tuple(str(word) for word in data["command"])
        except (ValueError, TypeError, KeyError):
            continue  # a damaged row: the store's damage report names it
        yield (command, data.get("workdir"), *rest)


def rekey_by_owner(
    conn: sqlite3.Connection,
    own_uid: int | None = None,
    tables: tuple[str, ...] = ("demand_history", "family_history"),
) -> None:
    """Schema 17 (and 19, for alone_rates): `tables` keyed by owner (`owner_key`), each row
    given to the owners of the jobs that ran its command or family (schema.py's 17 says how)."""
    own = os.getuid() if own_uid is None else own_uid  # a job with no owner was the engine's
    measured: dict[str, set[int]] = {}  # key -> owners whose runs it holds
    seen: dict[str, set[int]] = {}  # key -> owners of any of its jobs
    times: dict[str, list[float]] = {}  # owner key of a family -> its succeeded run times
    # a job whose settled peak its family holds has an event saying so (SETTLED_EVENT)
    settled = "EXISTS (SELECT 1 FROM events e WHERE e.job_id = j.id AND e.kind = 'history')"
    columns = f"j.owner_uid, j.state, {settled}, a.started_at, a.ended_at, a.suspended_s"
    for command, workdir, uid, state, peak, start, end, paused in _jobs(conn, columns):
        uid, kin, ran = own if uid is None else uid, family(command, workdir), state == "succeeded"
        for key in (signature(command, workdir), kin):
            seen.setdefault(key, set()).add(uid)
            if ran or (peak and key == kin):  # a settled peak is recorded for its family only
                measured.setdefault(key, set()).add(uid)
        if ran and start is not None and end is not None and end - start - (paused or 0) > 0:
            times.setdefault(owner_key(uid, kin), []).append(end - start - (paused or 0))
    for table in tables:
        rows = conn.execute(f"SELECT * FROM {table}").fetchall()
        conn.execute(f"DELETE FROM {table}")
        for row in rows:
            owners = measured.get(row[0]) or seen.get(row[0]) or {own}
            for uid in owners:
                values = [owner_key(uid, row[0]), *row[1:]]
                if table == "family_history" and len(owners) > 1:  # her own run times only
                    ran_s = times.get(values[0], [])
                    values[4:6] = [sum(ran_s) / len(ran_s) if ran_s else None, len(ran_s)]
                marks = ", ".join("?" * len(values))
                conn.execute(f"INSERT INTO {table} VALUES ({marks})", values)
