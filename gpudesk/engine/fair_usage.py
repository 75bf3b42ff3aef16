"""Fair share's usage of the store's attempts, kept in a ledger (placement.usage_ledger) that
each question brings up to date from the store: the attempts that started since, the ones that
were running (ended or not now), and the ones the horizon passed (through the index on attempts'
ends). What a question costs is what changed since the last one, not the store's size.

Reading the store, rather than being told by each place that ends an attempt (settling,
giving up on one, recovery at start), cannot miss one. An ended attempt is counted the first
time it is seen ended, with its CPU time as stored then: `Attempts` stores an attempt's last
usage figures in the same loop step that records its end, before anything can ask for usage.

A ledger is built when the engine starts, and again when the weights change (`[station]
fairshare_half_life_h`, `fairshare_cpu_weight`) or the wall clock was stepped back behind its
time. Building reads every attempt of the horizon, seconds for 100,000 on a loaded machine
(docs/benchmarks.md), so it is done in slices of the loop's turns (`step`: BUILD_SLICE_S at a
time), newest first, and every client is answered in between. Until it is done (`building`)
the usage is that of the attempts read so far: the newest, which weigh the most; the oldest,
missing, weigh the least. It stops at the oldest attempt of the horizon, whatever lies below.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpudesk.engine.store.database import Store
from gpudesk.policy.fairshare import FairShare
from gpudesk.policy.usage_ledger import UsageLedger

# Assumption: a turn of the build may hold the loop for half of issue 36's 50 ms per request,
# leaving the other half to a request that waits behind it.
BUILD_SLICE_S = 0.025
# Measured: reading and weighing 1000 attempts took 35-70 ms on the 2-core VM shared by five
# sessions (a store of 22,000 attempts, bench/status_scale.py), so 200 at a time lets a turn
# stop within ~15 ms of its slice there.
BUILD_CHUNK = 200


class FairUsage:
    def __init__(
        self,
        store: Store,
        share: Callable[[], FairShare],
        chunk: int = BUILD_CHUNK,
        slice_s: float = BUILD_SLICE_S,
    ) -> None:
        self.store = store
        self.share = share  # the station's weights now
        self.chunk = chunk
        self.slice_s = slice_s
        self._ledger: UsageLedger | None = None
        self._bottom = 0  # the build is done once it has read every attempt above this id
        # The last build step raised (the loop logs it): the loop no longer comes straight back
        # for the build, so a store that keeps failing costs a log line a turn, not a busy loop.
        self._failed = False

    @property
    def building(self) -> bool:
        """Whether older attempts are still to be read (or the build has not begun, or must
        begin again for new weights)."""
        ledger = self._ledger
        return ledger is None or ledger.floor > 0 or ledger.share != self.share()

    def usage_by_user(self, now: float) -> dict[int, float]:
        """Each uid's decayed usage at `now` in GPU-hour equivalents: what
        fairshare.usage_by_user answers over `store.usage_spans(now - horizon)`, once built."""
        return self._current(now).usage()

    def step(self, now: float | None = None) -> None:
        """A turn of the loop: read older attempts for a build under way, `chunk` at a time,
        until `slice_s` has passed (at least one chunk, so every turn makes progress)."""
        if not self.building:
            return
        clock = time.perf_counter
        deadline = clock() + self.slice_s
        self._failed = True  # until this step is through
        ledger = self._current(time.time() if now is None else now)
        while ledger.floor > self._bottom:
            low = max(self._bottom, ledger.floor - self.chunk)
            for span in self.store.usage_spans(ledger.cut, (low, ledger.floor)):
                ledger.add(span)
            ledger.floor = low
            if clock() >= deadline:
                break
        if ledger.floor <= self._bottom:
            ledger.floor = 0  # the attempts below ended before the horizon: nothing to read
        self._failed = False

    def poll_timeout(self, timeout: float) -> float:
        """The loop comes straight back while a build is under way."""
        return 0.0 if self.building and not self._failed else timeout

    def _current(self, now: float) -> UsageLedger:
        """The ledger brought up to `now`, or a new one (to be built) where it cannot be."""
        share = self.share()
        ledger = self._ledger
        if ledger is None or ledger.share != share or ledger.behind(now):
            newest = self.store.newest_attempt_id()
            ledger = self._ledger = UsageLedger(share, now, seen_id=newest, floor=newest)
            self._bottom = max(0, self.store.oldest_usage_id(ledger.cut) - 1)
            return ledger
        # Everything is read before the ledger changes: a read that fails leaves it as it was,
        # to be brought up to date next time, never half moved.
        cut = max(ledger.cut, now - share.horizon_s)
        leaving = (
            self.store.usage_spans_ended(ledger.cut, cut, ledger.seen_id)
            if cut > ledger.cut
            else []
        )
        changed = self.store.usage_spans_since(ledger.seen_id, list(ledger.open))
        ledger.advance(now)
        ledger.expire(leaving)
        ledger.forget_open()  # after `expire`, which must know which were open (never counted)
        for span in changed:
            ledger.add(span)
        return ledger
