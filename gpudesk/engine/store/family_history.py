"""What each command family measured (schema 13; gpudesk.policy.command_family): the peak GPU
memory and mean SM activity of its runs, recorded once a run's memory settled, and the mean
run time of its succeeded runs (the remaining-time estimate's fallback); and how far its memory
hints were off, per hint (schema 16; gpudesk.policy.hint_correction). Per owner (schema 17)."""

from __future__ import annotations

import time

import msgspec

from gpudesk.engine.store.connection import StoreConnection
from gpudesk.policy.demand_history import FamilyRecord


class SettledPeak(msgspec.Struct, frozen=True):
    """The event of an attempt whose settled peak its family now holds."""

    job_id: int
    attempt: int  # its number
    message: str


SETTLED_EVENT = "history"  # the kind of that event


class FamilyHistoryTables(StoreConnection):
    def family_counted(self, job_id: int, attempt: int) -> bool:
        """Whether this attempt's settled peak is already in its family's history (an engine
        restarted while it ran must not count it twice)."""
        row = self._conn.execute(
            "SELECT 1 FROM events WHERE job_id = ? AND attempt = ? AND kind = ? LIMIT 1",
            (job_id, attempt, SETTLED_EVENT),
        ).fetchone()
        return row is not None

    def family_history(self) -> dict[str, FamilyRecord]:
        """owner:family (command_family.owner_key) -> what its runs measured."""
        return {
            row[0]: FamilyRecord(row[1], row[2], row[3], row[4], row[5])
            for row in self._conn.execute(
                "SELECT family, memory_mib, sm_pct, runs, run_s, finished FROM family_history"
            )
        }

    def record_family_demand(
        self,
        family: str,
        memory_mib: float,
        sm_pct: float,
        new_run: bool = True,
        now: float | None = None,
        told: SettledPeak | None = None,
    ) -> None:
        """Fold a run's settled peak into its family (the larger peak wins; SM activity is
        averaged over runs). `new_run` false: a run already counted, whose peak is raised to
        what it held by its end. `told`: the attempt's event saying so, in the same
        transaction, which is also how a restarted engine knows it was counted
        (`family_counted`)."""
        now = time.time() if now is None else now
        with self.transaction() as conn:
            if told is not None:
                self._add_event(
                    conn,
                    SETTLED_EVENT,
                    told.message,
                    job_id=told.job_id,
                    attempt=told.attempt,
                    now=now,
                )
            if new_run:
                conn.execute(
                    "INSERT INTO family_history (family, memory_mib, sm_pct, runs, updated_at) "
                    "VALUES (?, ?, ?, 1, ?) ON CONFLICT (family) DO UPDATE SET "
                    "memory_mib = MAX(COALESCE(memory_mib, 0), excluded.memory_mib), "
                    "sm_pct = (COALESCE(sm_pct, 0) * runs + excluded.sm_pct) / (runs + 1), "
                    "runs = runs + 1, updated_at = excluded.updated_at",
                    (family, memory_mib, sm_pct, now),
                )
            else:
                conn.execute(
                    "UPDATE family_history SET memory_mib = MAX(COALESCE(memory_mib, 0), ?), "
                    "updated_at = ? WHERE family = ?",
                    (memory_mib, now, family),
                )

    def record_family_run(self, family: str, run_s: float, now: float | None = None) -> None:
        """Fold a succeeded run's run time into its family's mean."""
        now = time.time() if now is None else now
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO family_history (family, run_s, finished, updated_at) "
                "VALUES (?, ?, 1, ?) ON CONFLICT (family) DO UPDATE SET "
                "run_s = (COALESCE(run_s, 0) * finished + excluded.run_s) / (finished + 1), "
                "finished = finished + 1, updated_at = excluded.updated_at",
                (family, run_s, now),
            )

    def family_hint_ratios(self) -> list[tuple[str, int, float]]:
        """(family, hint MiB, largest measured-peak / hint ratio) for every hint measured."""
        rows = self._conn.execute("SELECT family, hint_mib, ratio FROM family_hint_ratios")
        return [(str(r[0]), int(r[1]), float(r[2])) for r in rows]

    def record_hint_ratio(self, family: str, hint_mib: int, ratio: float) -> None:
        """Keep a run's ratio for its family's hint (the larger one wins)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO family_hint_ratios (family, hint_mib, ratio) VALUES (?, ?, ?) "
                "ON CONFLICT (family, hint_mib) DO UPDATE SET ratio = MAX(ratio, excluded.ratio)",
                (family, hint_mib, ratio),
            )
