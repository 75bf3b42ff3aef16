"""Fair-share usage kept as running sums, so that asking for it costs the running attempts, not
every attempt of the horizon (issue 36: 3.4 s of the engine's loop with 100,000 jobs).

placement.fairshare defines a user's usage as the sum, over their attempts, of weight x decayed
hours, where an attempt's decayed hours at `now` are
(e^(-r (now - end)) - e^(-r (now - start))) / r, with r = ln 2 / half-life.
Once an attempt has ended, both exponentials move with `now` by the same factor: from time t0
to t1 its term is multiplied by e^(-r (t1 - t0)) = 2^(-(t1 - t0) / half-life), whatever the
attempt. So the ledger keeps, per user, the sum of their ended attempts' terms as of `at`;
moving to a later time multiplies each user's sum by that one factor; an attempt that ends adds
its term (fairshare.span_usage at `at`) once; and only the attempts not ended yet are worked out
afresh each time (as many as run now). Keeping the sums as of the last time asked, rather than
relative to a fixed reference time, means no exponential ever grows: nothing can overflow
however long the engine runs. The factors' rounding adds up to ~1e-16 relative per move.

The horizon is kept exactly as fairshare.usage_by_user over the store's `usage_spans(now -
horizon)` has it: an attempt that ended at or before `cut` (HORIZON_HALF_LIVES half-lives before
`at`) counts for nothing. Moving the cut forward subtracts the term of every counted attempt it
passes (the caller hands them over, in any order: the store finds them by their end). A user
whose counted attempts have all left the horizon is dropped, as the full sum never names them,
so no rounding residue can put them ahead of a user with no usage at all.

The ledger is exact for a wall clock that moves forward: an attempt whose end lies after `at`
(the clock was stepped back after it ended) is worked out afresh each time, like a running one,
until `at` passes its end; and a clock stepped back behind `at` itself is the caller's cue to
build a new ledger (`behind`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import msgspec

from gpudesk.core.records import UsageSpan
from gpudesk.policy.fairshare import SECONDS_PER_HOUR, FairShare, span_usage


class UsageLedger(msgspec.Struct):
    """Each user's decayed usage, kept up to date by `advance`, `expire` and `add`."""

    share: FairShare
    at: float  # the time the sums are as of (seconds since the epoch)
    # Every attempt with an id in (floor, seen_id] has been handed to `add`. A ledger is built
    # from the newest attempts down (engine.fair_usage), so it is closest to the whole sum early
    # on, when only the oldest attempts (the lightest: the most decayed) are still unread.
    seen_id: int = 0
    floor: int = 0
    # uid -> the sum of their counted ended attempts' terms at `at`, and how many they are
    ended: dict[int, float] = msgspec.field(default_factory=dict)
    counted: dict[int, int] = msgspec.field(default_factory=dict)
    # attempt id -> an attempt not ended at `at` (running, or ending after `at`)
    open: dict[int, UsageSpan] = msgspec.field(default_factory=dict)

    @property
    def cut(self) -> float:
        """Attempts that ended at or before this time count for nothing."""
        return self.at - self.share.horizon_s

    def behind(self, now: float) -> bool:
        """Whether `now` is before the sums' time (a wall clock stepped back): the sums cannot
        be moved back exactly, so the ledger is built afresh."""
        return now < self.at

    def advance(self, now: float) -> None:
        """Move the sums to `now` (not before `at`): each user's sum decays by one factor. The
        ended attempts the cut passes, (old cut, new cut], must then go (`expire`)."""
        if now > self.at:
            rate = math.log(2.0) / (self.share.half_life_h * SECONDS_PER_HOUR)
            factor = math.exp(-rate * (now - self.at))
            self.ended = {uid: total * factor for uid, total in self.ended.items()}
            self.at = now

    def add(self, span: UsageSpan) -> None:
        """An attempt seen for the first time, or one that was open, as the store has it now:
        counted if it ended inside the horizon, kept open if it has not ended by `at`."""
        self.seen_id = max(self.seen_id, span.attempt_id)
        if span.ended_at is None or span.ended_at > self.at:
            self.open[span.attempt_id] = span
            return
        if span.ended_at <= self.cut:
            return
        term = span_usage(span, self.at, self.share)
        if term is None:  # it never ran (the full sum skips it too)
            return
        self.ended[span.uid] = self.ended.get(span.uid, 0.0) + term
        self.counted[span.uid] = self.counted.get(span.uid, 0) + 1

    def expire(self, spans: Iterable[UsageSpan]) -> None:
        """Take out the counted attempts the cut passed. `spans` may hold attempts that were
        never counted (open ones, ones not read yet): those are skipped."""
        for span in spans:
            if (
                span.attempt_id in self.open
                or span.attempt_id > self.seen_id
                or span.attempt_id <= self.floor
            ):
                continue
            term = span_usage(span, self.at, self.share)
            if term is None:
                continue
            left = self.counted.get(span.uid, 0) - 1
            if left <= 0:
                self.counted.pop(span.uid, None)
                self.ended.pop(span.uid, None)
                continue
            self.counted[span.uid] = left
            # The sum can only be positive: rounding must not make it a hair below zero.
            self.ended[span.uid] = max(0.0, self.ended[span.uid] - term)

    def forget_open(self) -> None:
        """Forget the open attempts: the caller hands each back to `add` as the store has it
        now (ended or not)."""
        self.open = {}

    def usage(self) -> dict[int, float]:
        """Each uid's decayed usage at `at`, in GPU-hour equivalents: what
        fairshare.usage_by_user over the horizon's attempts answers."""
        usage = dict(self.ended)
        for span in self.open.values():
            term = span_usage(span, self.at, self.share)
            if term is not None:
                usage[span.uid] = usage.get(span.uid, 0.0) + term
        return usage
