"""The interference model's learning in the store: the learner's totals per (GPU model,
parameter) and each command's progress rate alone on a GPU (by command signature)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gpudesk.engine.store.connection import StoreConnection


@dataclass(frozen=True)
class ParamTotal:
    """What observations said about one parameter on one GPU model: the sum and count of the
    values they implied, how many of them came from calibration probes, and when the last came."""

    gpu_model: str
    param: str
    total: float
    count: int
    calibrated: int
    updated_at: float | None


@dataclass(frozen=True)
class AloneRate:
    """A command's progress rate (its DONE units per second) alone on a GPU, over its runs."""

    rate: float
    runs: int
    updated_at: float


class ModelParamTables(StoreConnection):
    """The learner's totals and the alone rates."""

    def model_param_totals(self) -> list[ParamTotal]:
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

    def save_model_param(self, total: ParamTotal) -> None:
        """Replace one (GPU model, parameter)'s totals with these."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO model_params "
                "(gpu_model, param, total, count, calibrated, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (gpu_model, param) DO UPDATE SET "
                "total = excluded.total, count = excluded.count, "
                "calibrated = excluded.calibrated, updated_at = excluded.updated_at",
                (
                    total.gpu_model,
                    total.param,
                    total.total,
                    total.count,
                    total.calibrated,
                    total.updated_at,
                ),
            )

    def reset_model_params(self, gpu_model: str | None = None) -> int:
        """Forget what was learned (for one GPU model, or all); returns the rows dropped."""
        with self.transaction() as conn:
            if gpu_model is None:
                return int(conn.execute("DELETE FROM model_params").rowcount)
            return int(
                conn.execute("DELETE FROM model_params WHERE gpu_model = ?", (gpu_model,)).rowcount
            )

    def alone_rates(self) -> dict[str, AloneRate]:
        """Command signature -> its progress rate alone, over its runs."""
        return {
            str(row["signature"]): AloneRate(
                float(row["rate"]), int(row["runs"]), float(row["updated_at"])
            )
            for row in self._conn.execute(
                "SELECT signature, rate, runs, updated_at FROM alone_rates"
            )
        }

    def record_alone_rate(self, signature: str, rate: float, now: float | None = None) -> None:
        """Fold one run's rate alone into the command's mean."""
        now = time.time() if now is None else now
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO alone_rates (signature, rate, runs, updated_at) "
                "VALUES (?, ?, 1, ?) ON CONFLICT (signature) DO UPDATE SET "
                "rate = (rate * runs + excluded.rate) / (runs + 1), "
                "runs = runs + 1, updated_at = excluded.updated_at",
                (signature, rate, now),
            )
