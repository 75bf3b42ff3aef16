"""Telemetry in the store: attempts' usage, the downsampled GPU and job series, each GPU's
energy per stored window, and the demand earlier runs of a command measured."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from gpudesk.core.records import UsageSpan
from gpudesk.core.wire.jobs import AttemptUsageFigures, AttemptUsageView
from gpudesk.engine.store.connection import StoreConnection
from gpudesk.engine.store.schema import GPU_ENERGY_METRIC, LIVE_ATTEMPT_STATES
from gpudesk.hw.telemetry.energy import stored_usage

_LIVE_MARKS = ",".join("?" * len(LIVE_ATTEMPT_STATES))


class SampleTables(StoreConnection):
    """Usage, samples, energy and measured demand."""

    # ------------------------------------------------------------ telemetry
    def record_usage(
        self, usages: Iterable[tuple[int, int, AttemptUsageFigures]], now: float | None = None
    ) -> None:
        """(attempt id, job id, its figures) for each attempt, replacing what was stored."""
        now = time.time() if now is None else now
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO attempt_usage (attempt_id, job_id, updated_at, usage) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (attempt_id) DO UPDATE SET "
                "updated_at = excluded.updated_at, usage = excluded.usage",
                [(a, j, now, msgspec.json.encode(u).decode()) for a, j, u in usages],
            )

    def usage(self, job_ids: Sequence[int]) -> dict[int, list[AttemptUsageView]]:
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
        found: dict[int, list[AttemptUsageView]] = {}
        for job_id, number, usage in rows:
            view = stored_usage(number, usage)
            if view is not None:
                found.setdefault(job_id, []).append(view)
        return found

    def suspended_s(self, job_ids: Sequence[int]) -> dict[int, float]:
        """Each job's last attempt's seconds suspended, where it has any (JobView.suspended_s)."""
        marks = ",".join("?" * len(job_ids))
        sql = "SELECT a.job_id, a.suspended_s FROM attempts a JOIN jobs j ON j.id = a.job_id AND "
        sql += f"a.number = j.attempts WHERE a.suspended_s > 0 AND a.job_id IN ({marks})"
        return dict(self._conn.execute(sql, list(job_ids)).fetchall())

    def allocations(
        self, job_ids: Sequence[int], now: float
    ) -> dict[int, tuple[str | None, float]]:
        """Each job's last attempt's slot (where it ran: gpu:0/mps, cpu:1) and its GPU-seconds
        over every attempt: wall time × the GPUs it held (a running one counts up to `now`)."""
        if not job_ids:
            return {}
        marks = ",".join("?" * len(job_ids))
        rows = self._conn.execute(
            "SELECT job_id, placement, started_at, ended_at FROM attempts "
            f"WHERE job_id IN ({marks}) ORDER BY job_id, number",
            list(job_ids),
        )
        found: dict[int, tuple[str | None, float]] = {}
        for job_id, placement, started_at, ended_at in rows:
            where = json.loads(placement) if placement else {}
            gpu_s = found.get(job_id, (None, 0.0))[1]
            if started_at is not None:
                gpu_s += max(0.0, (ended_at or now) - started_at) * len(where.get("gpus") or ())
            found[job_id] = (where.get("slot"), gpu_s)
        return found

    def usage_spans(self, since: float, ids: tuple[int, int] | None = None) -> list[UsageSpan]:
        """The attempts that ran at some time after `since` (wall clock), for fair share: each
        one's owner, run, GPUs and CPU time; `ids` (low, high]: only those attempts. A job from
        before owners were stored (schema 7) is the engine's user's."""
        low, high = ids if ids is not None else (0, 2**63 - 1)
        return self._usage_spans(
            "a.id > ? AND a.id <= ? AND a.started_at IS NOT NULL AND (a.ended_at > ? OR "
            f"(a.ended_at IS NULL AND a.state IN ({_LIVE_MARKS})))",
            (low, high, since, *LIVE_ATTEMPT_STATES),
        )

    def oldest_usage_id(self, since: float) -> int:
        """At most the lowest id of the attempts `usage_spans(since)` holds (0: none): attempts
        below it ended before `since`, so a fair-share ledger built down from the newest stops
        there (a store of years holds far more attempts than the horizon). Read from the
        indexes alone, so it costs the horizon's attempts, not the store's (~35 ms for 110,000
        on the shared 2-core VM; a scan by id would read every older attempt first)."""
        row = self._conn.execute(
            "SELECT MIN(first) FROM ("
            "SELECT MIN(id) AS first FROM attempts INDEXED BY attempts_by_end WHERE ended_at > ? "
            "UNION ALL SELECT MIN(id) FROM attempts INDEXED BY attempts_by_state "
            f"WHERE state IN ({_LIVE_MARKS}))",
            (since, *LIVE_ATTEMPT_STATES),
        ).fetchone()
        return int(row[0] or 0)

    def usage_spans_ended(self, after: float, until: float, up_to_id: int) -> list[UsageSpan]:
        """The attempts (up to id `up_to_id`) that ended in (`after`, `until`]: those leaving
        fair share's horizon as it moves on (placement.usage_ledger). Found through the index
        on attempts' ends, so it costs what ended in that window, not the store's size."""
        return self._usage_spans(
            "a.ended_at > ? AND a.ended_at <= ? AND a.started_at IS NOT NULL AND a.id <= ?",
            (after, until, up_to_id),
        )

    def usage_spans_since(self, after_id: int, also: Sequence[int]) -> list[UsageSpan]:
        """The attempts after id `after_id` and those of `also` (attempts that had not ended),
        as they are now: the running ones and the ended ones, for fair share's ledger."""
        marks = ",".join("?" * len(also))
        return self._usage_spans(
            f"(a.id > ? OR a.id IN ({marks})) AND a.started_at IS NOT NULL AND "
            f"(a.ended_at IS NOT NULL OR a.state IN ({_LIVE_MARKS}))",
            (after_id, *also, *LIVE_ATTEMPT_STATES),
        )

    def _usage_spans(self, where: str, args: Sequence[Any]) -> list[UsageSpan]:
        rows = self._conn.execute(
            "SELECT a.id, j.owner_uid, a.started_at, a.ended_at, a.placement, u.usage "
            "FROM attempts a JOIN jobs j ON j.id = a.job_id "
            f"LEFT JOIN attempt_usage u ON u.attempt_id = a.id WHERE {where}",
            args,
        )
        me = os.getuid()
        spans = []
        for attempt_id, owner_uid, started_at, ended_at, placement, usage in rows:
            gpus = json.loads(placement).get("gpus") or ()
            cpu_s = json.loads(usage).get("cpu_s", 0.0) if usage else 0.0
            spans.append(
                UsageSpan(
                    me if owner_uid is None else owner_uid,
                    started_at,
                    ended_at,
                    len(gpus),
                    float(cpu_s or 0.0),
                    attempt_id,
                )
            )
        return spans

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

    def job_has_series(self, job_id: int, metric: str) -> bool:
        return (
            self._conn.execute(
                "SELECT 1 FROM job_samples WHERE job_id = ? AND metric = ? LIMIT 1",
                (job_id, metric),
            ).fetchone()
            is not None
        )

    def job_series_thinned(
        self, job_id: int, metric: str, max_points: int
    ) -> list[tuple[float, float]]:
        """`job_series` with at most `max_points` points: where there are more (a job of weeks),
        runs of consecutive points are averaged, each stamped with its last point's time (a
        stored point is the mean of the window that ended then)."""
        points = self.job_series(job_id, metric)
        if len(points) <= max_points:
            return points
        per = math.ceil(len(points) / max_points)
        runs = (points[i : i + per] for i in range(0, len(points), per))
        return [(run[-1][0], statistics.fmean(v for _, v in run)) for run in runs]

    def prune_samples(self, before: float) -> int:
        with self.transaction() as conn:
            gone = conn.execute("DELETE FROM gpu_samples WHERE ts < ?", (before,)).rowcount
            gone += conn.execute("DELETE FROM job_samples WHERE ts < ?", (before,)).rowcount
        return gone

    # ----------------------------------------------------------------- demand
    def demand_history(self) -> dict[str, tuple[float, float, int]]:
        """owner:signature (owner_key) -> (peak memory MiB, SM %, runs) of earlier runs."""
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
