"""The simulator's queue order under `queue_order = "shortest"` (gpudesk.policy.jct_order): what
the engine would know of each job's run time, learned as the replay goes, never the trace's
truth. The engine keys history by command family (gpudesk.policy.command_family); a trace job
has no command, so its family is its model (else its class, else its name): the jobs a sweep or
a group's daily runs repeat. A family's expected run time is the mean wall time of its runs
finished so far in the replay (as the engine's `typical_run_s`: succeeded runs, wall time)."""

from __future__ import annotations

from collections.abc import Sequence

from gpudesk.core.records import JobRecord
from gpudesk.policy.jct_order import shortest_first
from gpudesk.policy.sim_records import SimRun


def family_of(run: SimRun) -> str:
    return run.job.model or run.job.job_class or run.job.name


class FamilyRunTimes:
    def __init__(self) -> None:
        self.totals: dict[str, tuple[int, float]] = {}

    def finished(self, run: SimRun, wall_s: float) -> None:
        count, total = self.totals.get(family_of(run), (0, 0.0))
        self.totals[family_of(run)] = (count + 1, total + wall_s)

    def expected_s(self, run: SimRun) -> float | None:
        known = self.totals.get(family_of(run))
        return known[1] / known[0] if known else None

    def ordered(self, queue: Sequence[SimRun], now: float) -> list[JobRecord]:
        """The queue's records, highest response ratio first within priority."""
        runs = shortest_first(
            queue,
            self.expected_s,
            lambda run: now - run.record.submitted_at,
            lambda run: (-run.record.spec.priority,),
        )
        return [run.record for run in runs]
