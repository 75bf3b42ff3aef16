"""How long the engine's one loop is held: by each request (decoding it, its handler, encoding
its reply) and by each turn's periodic steps.

The engine answers every client from one thread, so a request that holds the loop for a second
stalls every other client for that second: what a user sees as "gpudesk hangs" is this time
(issue 36). It is kept two ways, both of bounded size whatever the engine's uptime:

- a window of the latest `WINDOW` requests and turns, for `status` (percentiles, the maximum
  and the slowest ones with their op and caller: what held the loop lately, and for whom);
- per op (and per step) counts in fixed buckets since the engine started, for the Prometheus
  histograms gpudesk_engine_request_seconds and gpudesk_engine_step_seconds (docs/metrics.md).

Labels are bounded too: an op name a client made up is counted as "unknown", and past
`MAX_LABELS` distinct names everything new is "other", so no client can grow the engine's memory
or the metrics' series by sending names.

Owned by the loop's thread; the metrics exporter copies `histograms()` into its snapshot.
Recording costs two clock reads and a deque append per request. A request answered within
another's hold (a reply posted on the loop lets its connection's next requests through) is
counted as its own op, and taken off the other's time (`hold`, `held`).
"""

from __future__ import annotations

import heapq
import time
from collections import deque

from gpudesk.core.wire.station import LoopRequest, LoopTimingView, LoopTurn, LoopTurns
from gpudesk.metrics.histogram import Buckets, Histogram, one_two_five

# Upper bounds (seconds) of the histograms' buckets. A ping or a status is well under a
# millisecond; listing thousands of jobs takes tens to hundreds (docs/benchmarks.md, issue 36);
# the top buckets are there to tell a stall of seconds from one of a minute. The target
# is a p99 <= 50 ms, so 0.05 is a bound.
BUCKETS_S = one_two_five(0.0005, 10.0)
# Assumption: the latest 4096 requests cover the last minute or more of a busy station (a desk
# asks about twice a second, a `gpudesk top` once), long enough to hold the stall a user just
# saw; 4096 small tuples are some hundreds of KiB.
WINDOW = 4096
SLOWEST_SHOWN = 5  # how many of the window's slowest requests (and turns) `status` names
MAX_LABELS = 64  # distinct op or step names counted apart; more than the op table has
OTHER = "other"  # the label of every name past MAX_LABELS


class _Labelled:
    """Histograms by label, at most MAX_LABELS of them (then "other")."""

    def __init__(self) -> None:
        self.by_label: dict[str, Histogram] = {}

    def add(self, label: str, seconds: float) -> None:
        counts = self.by_label.get(label)
        if counts is None:
            if len(self.by_label) >= MAX_LABELS - 1 and label != OTHER:
                label = OTHER
            counts = self.by_label.setdefault(label, Histogram(BUCKETS_S))
        counts.add(seconds)

    def views(self) -> tuple[tuple[str, Buckets], ...]:
        return tuple((label, counts.view()) for label, counts in sorted(self.by_label.items()))


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _percentile(ordered: list[float], pct: float) -> float:
    """The nearest-rank percentile of an ascending, non-empty list."""
    index = min(len(ordered) - 1, max(0, round(pct / 100.0 * (len(ordered) - 1))))
    return ordered[index]


def _summary(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(seconds)
    return {
        "p50_ms": _ms(_percentile(ordered, 50)),
        "p99_ms": _ms(_percentile(ordered, 99)),
        "max_ms": _ms(ordered[-1]),
    }


class LoopTiming:
    def __init__(self, window: int = WINDOW) -> None:
        self.requests = 0  # since the engine started
        self.turns = 0
        self._requests: deque[tuple[float, str, int]] = deque(maxlen=window)  # (s, op, uid)
        self._turns: deque[tuple[float, str, float]] = deque(maxlen=window)  # (s, step, its s)
        self._by_op = _Labelled()
        self._by_step = _Labelled()
        self._inner = 0.0  # the holds of requests answered within the hold being timed

    def hold(self) -> tuple[float, float]:
        """A request's hold of the loop begins (`held` ends it)."""
        started, self._inner = (time.perf_counter(), self._inner), 0.0
        return started

    def held(self, started: tuple[float, float], op: str, uid: int) -> None:
        """A request's hold of the loop, begun at `hold`, ends: counted as `op`'s, less the
        holds of the requests answered within it (a reply posted lets its connection's next
        requests through, each counted as its own op, not twice and not as this one's)."""
        at, outer = started
        seconds = time.perf_counter() - at
        self.request(op, seconds - self._inner, uid)
        self._inner = outer + seconds

    def request(self, op: str, seconds: float, uid: int) -> None:
        """One request held the loop `seconds` (`op`: its op, or "unknown"/"invalid")."""
        self.requests += 1
        self._requests.append((seconds, op, uid))
        self._by_op.add(op, seconds)

    def turn(self, steps: list[tuple[str, float]]) -> None:
        """One turn's periodic steps ran, each (name, seconds)."""
        self.turns += 1
        total = 0.0
        slowest, slowest_s = "", -1.0
        for name, seconds in steps:
            total += seconds
            self._by_step.add(name, seconds)
            if seconds > slowest_s:
                slowest, slowest_s = name, seconds
        self._turns.append((total, slowest, max(slowest_s, 0.0)))

    def summary(self) -> LoopTimingView:
        """What `status` carries under "loop" (models.LoopTimingView): the window's requests
        and turns."""
        requests = list(self._requests)
        turns = list(self._turns)
        slow_requests = heapq.nlargest(SLOWEST_SHOWN, requests, key=lambda r: r[0])
        slow_turns = heapq.nlargest(SLOWEST_SHOWN, turns, key=lambda t: t[0])
        return LoopTimingView(
            requests=self.requests,
            window=len(requests),
            **_summary([r[0] for r in requests]),
            slowest=[LoopRequest(op=op, ms=_ms(s), uid=uid) for s, op, uid in slow_requests],
            turns=LoopTurns(
                turns=self.turns,
                window=len(turns),
                **_summary([t[0] for t in turns]),
                slowest=[
                    LoopTurn(ms=_ms(s), step=step, step_ms=_ms(step_s))
                    for s, step, step_s in slow_turns
                ],
            ),
        )

    def histograms(
        self,
    ) -> tuple[tuple[tuple[str, Buckets], ...], tuple[tuple[str, Buckets], ...]]:
        """(by op, by step): each label's histogram since the engine started."""
        return self._by_op.views(), self._by_step.views()
