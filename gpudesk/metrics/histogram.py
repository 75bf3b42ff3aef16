"""A histogram of durations in fixed buckets, counted on the engine's loop and read as an
immutable `Buckets` for the metrics snapshot: the placement policy's decision times
(activity.py) and how long requests and steps held the loop (loop_timing.py) are both kept so.

Adding costs a bisect and two additions; the size is fixed by the bounds, whatever the
engine's uptime."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import msgspec


def one_two_five(low: float, high: float) -> tuple[float, ...]:
    """The bounds of the 1-2.5-5 series from `low` to `high` (0.0001, 0.00025, 0.0005, 0.001,
    ... 1.0), each the float of its decimal (0.00025 is "2.5e-4", what a scrape shows as its
    `le`, never 0.00025000000000000006)."""
    first, last = math.floor(math.log10(low)), math.floor(math.log10(high))
    return tuple(
        bound
        for exponent in range(first, last + 1)
        for mantissa in ("1", "2.5", "5")
        if low <= (bound := float(f"{mantissa}e{exponent}")) <= high
    )


class Buckets(msgspec.Struct, frozen=True):
    """One histogram at one moment: cumulative counts per upper bound (the last one +Inf, as
    Prometheus has them), their number and sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]  # len(bounds) + 1: the last counts every observation
    count: int
    sum_s: float


@dataclass
class Histogram:
    """Counts of durations per bucket of `bounds` (upper bounds in seconds, ascending), plus
    one bucket past the last bound."""

    bounds: tuple[float, ...]
    buckets: list[int] = field(init=False)
    count: int = 0
    sum_s: float = 0.0

    def __post_init__(self) -> None:
        self.buckets = [0] * (len(self.bounds) + 1)

    def add(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum_s += seconds

    def view(self) -> Buckets:
        cumulative, total = [], 0
        for count in self.buckets:
            total += count
            cumulative.append(total)
        return Buckets(self.bounds, tuple(cumulative), self.count, self.sum_s)
