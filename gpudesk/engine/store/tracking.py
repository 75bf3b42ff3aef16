"""MLflow tracking in the store: the runs the engine made or is making (schema 8), so that an
engine restart neither makes a second run for a job nor loses a run's end."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable, Sequence

import msgspec

from gpudesk.engine.store.connection import StoreConnection

STATION_SETTING = "tracking_station"


class TrackingRow(msgspec.Struct, frozen=True):
    key: str
    job_id: int | None  # None: a sweep's parent run
    uid: int  # whose worker talks to its store
    uri: str
    create_op: bytes  # the JSON line that makes it (gpudesk.tracking.messages)
    run_id: str | None
    final: bool
    step: int


class TrackingTables(StoreConnection):
    def tracking_station(self) -> str:
        """This store's id in the runs' keys: jobs of two homes that share an MLflow store have
        the same ids, their keys must differ. Made once."""
        known = self.setting(STATION_SETTING)
        if isinstance(known, str) and known:
            return known
        made = uuid.uuid4().hex[:12]
        self.set_setting(STATION_SETTING, made)
        return made

    def add_tracking_runs(self, rows: Iterable[TrackingRow]) -> None:
        """New runs to make, in one transaction; a key already there is kept as it is."""
        with self.transaction() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO tracking_runs (key, job_id, uid, uri, create_op, run_id, "
                "final, step) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [_values(r) for r in rows],
            )

    def set_tracking_run_id(self, key: str, run_id: str) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE tracking_runs SET run_id = ? WHERE key = ?", (run_id, key))

    def set_tracking_final(self, key: str, final: bool) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE tracking_runs SET final = ? WHERE key = ?", (int(final), key))

    def set_tracking_steps(self, steps: Iterable[tuple[str, int]]) -> None:
        with self.transaction() as conn:
            conn.executemany(
                "UPDATE tracking_runs SET step = ? WHERE key = ?", [(s, k) for k, s in steps]
            )

    def unfinished_tracking_runs(self) -> list[TrackingRow]:
        """The runs whose end is not in MLflow yet, oldest first."""
        rows = self._conn.execute("SELECT * FROM tracking_runs WHERE final = 0 ORDER BY rowid")
        return [_row(r) for r in rows]

    def tracking_runs_of(self, job_ids: Sequence[int]) -> dict[int, TrackingRow]:
        if not job_ids:
            return {}
        marks = ",".join("?" * len(job_ids))
        rows = self._conn.execute(
            f"SELECT * FROM tracking_runs WHERE job_id IN ({marks})", list(job_ids)
        )
        return {int(r["job_id"]): _row(r) for r in rows}

    def tracking_run(self, key: str) -> TrackingRow | None:
        row = self._conn.execute("SELECT * FROM tracking_runs WHERE key = ?", (key,)).fetchone()
        return None if row is None else _row(row)


def _values(r: TrackingRow) -> tuple[object, ...]:
    return (r.key, r.job_id, r.uid, r.uri, r.create_op.decode(), r.run_id, int(r.final), r.step)


def _row(r: sqlite3.Row) -> TrackingRow:
    return TrackingRow(
        r["key"],
        r["job_id"],
        int(r["uid"]),
        r["uri"],
        str(r["create_op"]).encode(),
        r["run_id"],
        bool(r["final"]),
        int(r["step"]),
    )
