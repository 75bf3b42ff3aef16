"""A sweep's parent run rolls its best child up (docs/tracking.md, "Sweeps"): as each child job
ends, the parent run gets the best value so far of the sweep's objective as the metric
`best/<metric>` (logged when it changes, at the step of the number of children counted less
one) and tags naming the child that holds it.

The objective is the profile's `[report] metric` and `goal` (the job's `tracking.objective`);
without one, the first metric of the first result line a child printed, maximised (said in the
tag `gpudesk.best_goal`). Only children that succeeded count, as in the run's report; the first
of equal values keeps the place (`gpudesk.results.best`).

What each child found is kept in memory while its sweep runs; a sweep taken up again after an
engine restart first reads the logs of the children that succeeded before (the engine's tracker
does; this module holds no I/O).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gpudesk.results import Best, Goal, best
from gpudesk.tracking.content import METRIC_NAME

BEST_PREFIX = "best/"


class Rollup(msgspec.Struct):
    """One sweep's children, as far as they are known, and its best."""

    metric: str | None  # None: not chosen yet (no objective; no child's result seen)
    goal: Goal
    chosen: bool  # the metric is the sweep's objective (not the first result metric)
    # succeeded child -> metrics
    found: dict[int, Mapping[str, float]] = msgspec.field(default_factory=dict)
    names: dict[int, str] = msgspec.field(default_factory=dict)
    keys: dict[int, str] = msgspec.field(default_factory=dict)  # child -> its run's key
    best: Best | None = None


class BestChild(msgspec.Struct, frozen=True):
    """What the parent run is told: `best/<metric>` = `value` at `step`, held by `job`."""

    metric: str
    goal: Goal
    chosen: bool
    value: float
    step: int
    job: int
    name: str
    key: str  # its run's key (its MLflow id is the tracker's to know)

    def tags(self, run_id: str | None) -> dict[str, str]:
        tags = {
            "gpudesk.best_metric": self.metric,
            "gpudesk.best_goal": self.goal if self.chosen else f"{self.goal} (no [report] metric)",
            "gpudesk.best_job_id": str(self.job),
            "gpudesk.best_run_name": self.name,
        }
        if run_id is not None:
            tags["gpudesk.best_run_id"] = run_id
        return tags


class Rollups:
    """Each open sweep's roll-up, by its parent run's key."""

    def __init__(self) -> None:
        self.of: dict[str, Rollup] = {}

    def child_ended(
        self,
        parent: str,
        objective: tuple[str | None, str | None],
        child: tuple[int, str, str],
        metrics: Mapping[str, float] | None,
    ) -> BestChild | None:
        """A child (job id, name, run key) of `parent` succeeded with `metrics` (its last
        result line's; None: none): the parent's new best, or None when it did not change."""
        metric, goal = objective
        rollup = self.of.get(parent)
        if rollup is None:
            rollup = self.of[parent] = Rollup(
                metric, "min" if goal == "min" else "max", metric is not None
            )
        job, name, key = child
        if not metrics or job in rollup.found:
            return None
        if rollup.metric is None:
            rollup.metric = next((k for k in metrics if METRIC_NAME.match(BEST_PREFIX + k)), None)
        rollup.found[job] = metrics
        rollup.names[job] = name
        rollup.keys[job] = key
        return self._rank(rollup)

    def started(self, parent: str) -> bool:
        """Whether a child of `parent` was counted (or tried) in this engine's life."""
        return parent in self.of

    def known(self, parent: str) -> set[int]:
        """The children counted so far (empty: none yet in this engine's life)."""
        rollup = self.of.get(parent)
        return set(rollup.found) if rollup else set()

    def close(self, parent: str) -> None:
        self.of.pop(parent, None)

    def best_key(self, parent: str) -> str | None:
        rollup = self.of.get(parent)
        if rollup is None or rollup.best is None:
            return None
        return rollup.keys.get(rollup.best.job)

    def current(self, parent: str) -> BestChild | None:
        rollup = self.of.get(parent)
        return None if rollup is None else self._told(rollup)

    def _rank(self, rollup: Rollup) -> BestChild | None:
        if rollup.metric is None or not METRIC_NAME.match(BEST_PREFIX + rollup.metric):
            return None
        ranked = best(sorted(rollup.found.items()), rollup.metric, rollup.goal)
        if ranked is None:
            return None
        was = rollup.best
        rollup.best = ranked
        if was is not None and (was.job, was.value) == (ranked.job, ranked.value):
            return None
        return self._told(rollup)

    @staticmethod
    def _told(rollup: Rollup) -> BestChild | None:
        if rollup.best is None or rollup.metric is None:
            return None
        job = rollup.best.job
        return BestChild(
            rollup.metric,
            rollup.goal,
            rollup.chosen,
            rollup.best.value,
            len(rollup.found) - 1,
            job,
            rollup.names[job],
            rollup.keys[job],
        )
