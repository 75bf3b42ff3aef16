"""What the engine has done since it started, counted for its metrics: placements by mode,
out-of-memory recoveries, and how long the placement policy took to decide.

Owned by the engine's loop (the scheduler and the attempts count into it); the metrics exporter
copies it into an immutable snapshot for the HTTP thread. Counting costs a dict update and two
clock reads, so it happens whether metrics are served or not: an endpoint turned on later
reports the engine's whole life. Everything here starts at zero with each engine, as a
Prometheus counter may (`rate()` and `increase()` take a restart as a counter reset).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# Upper bounds (seconds) of the decision-time histogram's buckets: a pass over a short queue
# takes well under a millisecond, one over thousands of waiting jobs some milliseconds
# (docs/benchmarks.md), a slow one (a learned model over many GPUs) more.
DECISION_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)


@dataclass(frozen=True)
class DecisionTimes:
    """The decision-time histogram at one moment: cumulative counts per upper bound (the
    last one +Inf, as Prometheus has them), their number and sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]  # len(bounds) + 1: the last counts every decision
    count: int
    sum_s: float


@dataclass
class EngineActivity:
    placements: dict[str, int] = field(default_factory=dict)  # placement mode -> attempts started
    oom_recoveries: int = 0  # out-of-memory deaths requeued with a raised estimate
    _buckets: list[int] = field(default_factory=lambda: [0] * (len(DECISION_BUCKETS_S) + 1))
    _decisions: int = 0
    _decision_s: float = 0.0

    def placed(self, mode: str) -> None:
        """An attempt started where the policy placed it ("exclusive", "mps", "mig", ...)."""
        self.placements[mode] = self.placements.get(mode, 0) + 1

    def oom_recovered(self) -> None:
        """An attempt died of a GPU out-of-memory error and its job went back to the queue."""
        self.oom_recoveries += 1

    def decided(self, seconds: float) -> None:
        """One call of the placement policy took `seconds`."""
        self._buckets[bisect.bisect_left(DECISION_BUCKETS_S, seconds)] += 1
        self._decisions += 1
        self._decision_s += seconds

    def decision_times(self) -> DecisionTimes:
        cumulative, total = [], 0
        for count in self._buckets:
            total += count
            cumulative.append(total)
        return DecisionTimes(
            DECISION_BUCKETS_S, tuple(cumulative), self._decisions, self._decision_s
        )
