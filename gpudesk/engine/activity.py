"""What the engine has done since it started, counted for its metrics: placements by mode,
out-of-memory recoveries, and how long the placement policy took to decide.

Owned by the engine's loop (the scheduler and the attempts count into it); the metrics exporter
copies it into an immutable snapshot for the HTTP thread. Counting costs a dict update and two
clock reads, so it happens whether metrics are served or not: an endpoint turned on later
reports the engine's whole life. Everything here starts at zero with each engine, as a
Prometheus counter may (`rate()` and `increase()` take a restart as a counter reset).
"""

from __future__ import annotations

import msgspec

from gpudesk.metrics.histogram import Buckets, Histogram, one_two_five

# Upper bounds (seconds) of the decision-time histogram's buckets: a pass over a short queue
# takes well under a millisecond, one over thousands of waiting jobs some milliseconds
# (docs/benchmarks.md), a slow one (a learned model over many GPUs) more.
DECISION_BUCKETS_S = one_two_five(0.0001, 1.0)


class EngineActivity(msgspec.Struct):
    # placement mode -> attempts started
    placements: dict[str, int] = msgspec.field(default_factory=dict)
    oom_recoveries: int = 0  # out-of-memory deaths requeued with a raised estimate
    _decisions: Histogram = msgspec.field(default_factory=lambda: Histogram(DECISION_BUCKETS_S))

    def placed(self, mode: str) -> None:
        """An attempt started where the policy placed it ("exclusive", "mps", "mig", ...)."""
        self.placements[mode] = self.placements.get(mode, 0) + 1

    def oom_recovered(self) -> None:
        """An attempt died of a GPU out-of-memory error and its job went back to the queue."""
        self.oom_recoveries += 1

    def decided(self, seconds: float) -> None:
        """One call of the placement policy took `seconds`."""
        self._decisions.add(seconds)

    def decision_times(self) -> Buckets:
        """The decision-time histogram at this moment."""
        return self._decisions.view()
