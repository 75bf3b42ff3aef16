"""Schema 13's backfill: the command-family history filled from what an older store holds.
Its measured demand is keyed by exact command signature (a one-way hash), so each row is matched
to its family through the jobs that ran that command; each succeeded job's last attempt gives
its family a run time. A demand row no stored job matches stays in demand_history, still read
for its own command."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass

from gpudesk.policy.command_family import family
from gpudesk.policy.demand import signature

FAMILY_HISTORY_VERSION = 13  # the migration that makes family_history


@dataclass
class _Family:
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
    rows = conn.execute(
        "SELECT j.spec, j.state, a.started_at, a.ended_at FROM jobs j LEFT JOIN attempts a "
        "ON a.job_id = j.id AND a.number = (SELECT MAX(number) FROM attempts WHERE job_id = j.id)"
    )
    for spec_text, state, started, ended in rows:
        try:
            # only the two fields the keys need (what JobSpec.from_stored makes of them), so a
            # spec of an older version reads too, and 100,000 jobs take a few seconds, once
            data = json.loads(spec_text)
            command = tuple(str(word) for word in data["command"])
            workdir = data.get("workdir")
        except (ValueError, TypeError, KeyError):
            continue  # a damaged row: the store's damage report names it
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
