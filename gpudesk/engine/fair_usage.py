"""Fair share's usage of the store's attempts, kept in a ledger (placement.usage_ledger) that
each question brings up to date from the store: the attempts that started since, the ones that
were running (ended or not now), and the ones the horizon passed (through the index on attempts'
ends). What a question costs is what changed since the last one, not the store's size.

Reading the store, rather than being told by each place that ends an attempt (settling,
giving up on one, recovery at start), cannot miss one. An ended attempt is counted the first
time it is seen ended, with its CPU time as stored then: `Attempts` stores an attempt's last
usage figures in the same loop step that records its end, before anything can ask for usage.

The ledger is built from every attempt of the horizon when the engine first asks, and again
when the weights change (`[station] fairshare_half_life_h`, `fairshare_cpu_weight`) or the wall
clock was stepped back behind its time.
"""

from __future__ import annotations

from gpudesk.engine.placement.fairshare import FairShare
from gpudesk.engine.placement.usage_ledger import UsageLedger
from gpudesk.engine.store.database import Store


class FairUsage:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._ledger: UsageLedger | None = None

    def usage_by_user(self, now: float, share: FairShare) -> dict[int, float]:
        """Each uid's decayed usage at `now` in GPU-hour equivalents: what
        fairshare.usage_by_user answers over `store.usage_spans(now - horizon)`."""
        ledger = self._ledger
        if ledger is None or ledger.share != share or ledger.behind(now):
            ledger = self._ledger = self._build(now, share)
        else:
            self._catch_up(ledger, now)
        return ledger.usage()

    def _build(self, now: float, share: FairShare) -> UsageLedger:
        ledger = UsageLedger(share, now)
        # Taken first: the spans below are read at the same moment (one thread, one connection).
        newest = self.store.newest_attempt_id()
        for span in self.store.usage_spans(ledger.cut):
            ledger.add(span)
        ledger.seen_id = newest
        return ledger

    def _catch_up(self, ledger: UsageLedger, now: float) -> None:
        old_cut = ledger.advance(now)
        if ledger.cut > old_cut:
            ledger.expire(self.store.usage_spans_ended(old_cut, ledger.cut, ledger.seen_id))
        # After `expire`, which must still know which attempts were open (never counted).
        was_open = ledger.take_open()
        for span in self.store.usage_spans_since(ledger.seen_id, was_open):
            ledger.add(span)
