"""How long a running job has left, from what the engine can know (docs/interference.md,
"Remaining time"):

1. its progress: a job printing `progress DONE/TOTAL` has TOTAL - DONE left, at its *current*
   rate, measured over the last `RATE_WINDOW_S` of its progress (`RecentProgress`);
2. else its command family's history: the mean run time of the family's succeeded runs
   (`gpudesk.policy.command_family`) minus how long it has run;
3. else unknown (and unknown too once it has run past its family's typical run time: how much
   longer is then anyone's guess).

Pure: the engine feeds `RecentProgress` from the job's log and keeps the history; placement
reads the `Remaining` each tenant carries.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Literal, Protocol

import msgspec

# The window the current rate is measured over. A rate changes when the job's tenancy does (a
# co-tenant starts or ends), so the window must be short to follow it, and long enough that the
# engine's reads (once a telemetry sample, 1-2 s) and a job's print interval (every few seconds,
# README) leave a small error: the engine's interval for learning from progress is 60 s for the
# same reason (engine/learning.py OBSERVE_MIN_S). The window is also restarted when the tenancy
# changes (`RecentProgress.restart`), so the rate after a change is not the mix of both.
RATE_WINDOW_S = 60.0

Source = Literal["progress", "history", "unknown"]


class Remaining(msgspec.Struct, frozen=True):
    """A running job's remaining time and where it came from."""

    seconds: float | None  # None: unknown
    source: Source
    done: float | None = None  # its latest progress
    total: float | None = None  # ... of this much work (None: it prints no TOTAL)
    rate_per_s: float | None = None  # its current rate, DONE per second
    typical_s: float | None = None  # its command family's mean run time
    elapsed_s: float | None = None  # how long it has run

    @property
    def measured_s(self) -> float | None:
        """What the engine's own measurements give, whatever the job prints: its family's
        mean run time less how long it has run (None: unknown, or past it). A rule acting on
        another member's behalf believes this, never the job's progress lines
        (`trusted_drain_s`)."""
        return left_by_family(self.typical_s, self.elapsed_s)


UNKNOWN = Remaining(None, "unknown")


def left_by_family(typical_s: float | None, elapsed_s: float | None) -> float | None:
    """Its command family's mean run time less how long it has run; None where either is
    unknown, or once it has run past it (how much longer is then anyone's guess)."""
    if typical_s is None or elapsed_s is None or elapsed_s >= typical_s:
        return None
    return typical_s - elapsed_s


class RecentProgress:
    """A job's progress over the last `RATE_WINDOW_S`: (read time, DONE) pairs, one per read of
    its log that found progress (the latest DONE then: a batch of lines read at once carries one
    time, so only its last line is placed in time), and the latest TOTAL it printed."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self.points: deque[tuple[float, float]] = deque()
        self.total: float | None = None

    def add(self, at: float, done: float, total: float | None) -> None:
        if total is not None:
            self.total = total
        if self.points and done < self.points[-1][1]:
            self.points.clear()  # it counts from the start again (a new run in the same log)
        self.points.append((at, done))
        # keep one point older than the window, so a job printing less often than the window
        # still has a rate (over its last two lines)
        while len(self.points) > 2 and self.points[1][0] <= at - self.window_s:
            self.points.popleft()

    def restart(self) -> None:
        """The job's tenancy changed: its rate from now on is measured from its latest line."""
        while len(self.points) > 1:
            self.points.popleft()

    @property
    def done(self) -> float | None:
        return self.points[-1][1] if self.points else None

    @property
    def rate_per_s(self) -> float | None:
        if len(self.points) < 2:
            return None
        (t0, d0), (t1, d1) = self.points[0], self.points[-1]
        if t1 <= t0 or d1 <= d0:
            return None
        return (d1 - d0) / (t1 - t0)


def estimate(
    recent: RecentProgress | None,
    typical_s: float | None,
    elapsed_s: float | None,
    now: float | None = None,
) -> Remaining:
    """A running job's remaining time: from its progress, else its family's history, else
    unknown. `now` (on the clock of `recent`'s times): the time since its latest progress was
    read is taken off, as the job has worked on meanwhile (reads are a telemetry tick apart)."""
    if recent is not None and recent.total is not None and recent.done is not None:
        done, total, rate = recent.done, recent.total, recent.rate_per_s
        if done >= total:
            return Remaining(0.0, "progress", done, total, rate, typical_s, elapsed_s)
        if rate is not None:
            since = max(0.0, now - recent.points[-1][0]) if now is not None else 0.0
            left = max(0.0, (total - done) / rate - since)
            return Remaining(left, "progress", done, total, rate, typical_s, elapsed_s)
    by_family = left_by_family(typical_s, elapsed_s)
    if by_family is not None:
        return Remaining(by_family, "history", typical_s=typical_s, elapsed_s=elapsed_s)
    last = recent.done if recent is not None else None
    of = recent.total if recent is not None else None
    return Remaining(None, "unknown", last, of, None, typical_s, elapsed_s)


class _Tenant(Protocol):
    """A GPU's tenant as the placement view has it (policy.Tenant)."""

    @property
    def measured_remaining_s(self) -> float | None: ...


def trusted_drain_s(tenants: Iterable[_Tenant]) -> float | None:
    """When the last of these tenants ends by the engine's own measurements (0: none; each
    one's `Remaining.measured_s`, whatever it prints); None where any one's is unknown. The
    rules that act on one member's behalf against another's (preemption, the tail rule) believe
    only these: a job's progress lines are its owner's word, and a fake `progress 999/1000`
    would make her job look as good as finished."""
    latest = 0.0
    for tenant in tenants:
        seconds = tenant.measured_remaining_s
        if seconds is None:
            return None
        latest = max(latest, seconds)
    return latest
