"""The interference model's learning in the store: the observations the learner refits from
(the newest per GPU model), the totals a store from before the refit kept instead, and each
command's progress rate and steady SM share alone on a GPU (by its owner and signature)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec

from gpudesk.engine.store.connection import StoreConnection
from gpudesk.policy.progress_intervals import AloneRate


class ParamTotal(msgspec.Struct, frozen=True):
    """What observations said about one parameter on one GPU model, as a version-5 store kept
    it: the sum and count of the values they implied, how many of them came from calibration
    probes, and when the last came. Read only: the observations behind it were not kept, and
    nothing writes these any more (schema 6)."""

    gpu_model: str
    param: str
    total: float
    count: int
    calibrated: int
    updated_at: float | None


class StoredObservation(msgspec.Struct, frozen=True):
    """One observation the learner keeps: on which GPU model, its source ("learned" from a
    job's progress, "calibrated" from a probe), when, and the observation itself as JSON in
    the `model_observe` wire format (`gpudesk.policy.observation_wire`); the store does not
    look inside."""

    gpu_model: str
    source: str
    observed_at: float | None
    observation: str
    owner: int | None = None  # the uid whose job showed it (None: a calibration)


class ModelParamTables(StoreConnection):
    """The learner's kept observations (and a version-5 store's totals), and the alone rates."""

    def model_param_totals(self) -> list[ParamTotal]:
        """The totals a version-5 store had learned (none in a store started at schema 6)."""
        return [
            ParamTotal(
                str(row["gpu_model"]),
                str(row["param"]),
                float(row["total"]),
                int(row["count"]),
                int(row["calibrated"]),
                None if row["updated_at"] is None else float(row["updated_at"]),
            )
            for row in self._conn.execute(
                "SELECT gpu_model, param, total, count, calibrated, updated_at FROM model_params "
                "ORDER BY gpu_model, param"
            )
        ]

    def model_observations(self) -> list[StoredObservation]:
        """Every kept observation, oldest first (the order the learner took them in)."""
        return [
            StoredObservation(
                str(row["gpu_model"]),
                str(row["source"]),
                None if row["observed_at"] is None else float(row["observed_at"]),
                str(row["observation"]),
                None if row["owner_uid"] is None else int(row["owner_uid"]),
            )
            for row in self._conn.execute(
                "SELECT gpu_model, source, observed_at, observation, owner_uid "
                "FROM model_observations ORDER BY id"
            )
        ]

    def add_model_observations(self, rows: Sequence[StoredObservation], keep: int) -> None:
        """Append these, then drop each of their GPU models' oldest beyond the newest `keep`
        (the learner's bound, so the store holds what the learner holds), all or nothing."""
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO model_observations (gpu_model, source, observed_at, observation, "
                "owner_uid) VALUES (?, ?, ?, ?, ?)",
                [(r.gpu_model, r.source, r.observed_at, r.observation, r.owner) for r in rows],
            )
            for gpu_model in sorted({r.gpu_model for r in rows}):
                conn.execute(
                    "DELETE FROM model_observations WHERE gpu_model = ? AND id NOT IN "
                    "(SELECT id FROM model_observations WHERE gpu_model = ? "
                    "ORDER BY id DESC LIMIT ?)",
                    (gpu_model, gpu_model, keep),
                )

    def reset_model_params(self, gpu_model: str | None = None) -> int:
        """Forget what was learned (for one GPU model, or all): the kept observations and any
        totals from a version-5 store. Returns the rows dropped."""
        where, args = ("", ()) if gpu_model is None else (" WHERE gpu_model = ?", (gpu_model,))
        with self.transaction() as conn:
            return sum(
                int(conn.execute(f"DELETE FROM {table}{where}", args).rowcount)
                for table in ("model_observations", "model_params")
            )

    def alone_rates(self) -> dict[str, AloneRate]:
        """Command key -> its progress rate and steady SM share alone, over its runs."""
        return {
            str(row["signature"]): AloneRate(
                float(row["rate"]),
                int(row["runs"]),
                float(row["updated_at"]),
                None if row["sm_pct"] is None else float(row["sm_pct"]),
                int(row["sm_runs"]),
            )
            for row in self._conn.execute("SELECT * FROM alone_rates")
        }

    def record_alone_rate(
        self, signature: str, rate: float, sm_pct: float | None = None, now: float | None = None
    ) -> None:
        """Fold one run's rate alone, and its steady SM share where read, into the command's
        means (`progress_intervals.alone_rate_after`)."""
        now = time.time() if now is None else now
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO alone_rates (signature, rate, runs, updated_at, sm_pct, sm_runs) "
                "VALUES (?1, ?2, 1, ?3, ?4, ?4 IS NOT NULL) ON CONFLICT (signature) DO UPDATE SET "
                "rate = (rate * runs + excluded.rate) / (runs + 1), "
                "runs = runs + 1, updated_at = excluded.updated_at, "
                "sm_pct = COALESCE((IFNULL(sm_pct, 0) * sm_runs + ?4) / (sm_runs + 1), sm_pct), "
                "sm_runs = sm_runs + excluded.sm_runs",
                (signature, rate, now, sm_pct),
            )
