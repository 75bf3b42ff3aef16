"""A consumer as its producer sees it (`ConsumerState`): the batches of each epoch it was given,
the slots it holds, what it lacks, how far the stream may wait for it, and its pace.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from gpudesk.loader.fetch import Key

RATE_WINDOW_S = 5.0  # batches/s are measured over this window
LOOKAHEAD = 2  # batches a consumer may have waiting beyond the ones it is reading
HOLD_WINDOW_S = 5.0  # the stream's waits for a consumer are counted over this window (decaying)


def need_slots(batch_size: int, per_slot: int) -> int:
    """The slots one of a consumer's batches may span: a batch that does not start on a slot
    boundary may span one slot more. The producer lends it `need + LOOKAHEAD` (`cap`)."""
    return math.ceil(batch_size / per_slot) + (1 if batch_size % per_slot else 0)


@dataclass
class ConsumerState:
    """A consumer as its producer sees it: what it was given, holds and lacks, its pace."""

    ident: bytes
    pid: int
    started: float | None  # gpudesk.hw.process_start: its pid is its while this holds
    batch_size: int
    need: int  # slots one of its batches may span
    epoch: int  # the producer epoch it reads now: its first one not wholly given to it
    joined_at: float
    got: dict[int, set[int]] = field(default_factory=dict)  # epoch -> batches given to it
    missing: set[Key] = field(default_factory=set)  # of its epoch: passed by, not given
    ordered: set[Key] = field(default_factory=set)  # coming for it (room kept for them)
    held: set[int] = field(default_factory=set)  # slots given and not released
    delivered: int = 0
    position: Key | None = None  # the last key delivered
    times: deque[float] = field(default_factory=lambda: deque(maxlen=512))
    keeps_pace: bool = True  # the stream waits (briefly) for it rather than leave it behind
    holding_since: float | None = None  # when the stream began to wait for it
    hold_debt: float = 0.0  # seconds the stream waited for it, decaying over HOLD_WINDOW_S
    debt_at: float = 0.0  # when hold_debt was last reckoned
    gap: Key = (0, 0)  # (epoch, j): where `first_gap` last found the first batch it lacks
    mirror_gen: int = 0  # the generation of the staged mirror it was handed (staging.py)
    data_path: str | None = None  # where it reads batches, as it said: "staged" or "host: why"

    def debt(self, now: float) -> float:
        return self.hold_debt * math.exp(-(now - self.debt_at) / HOLD_WINDOW_S)

    @property
    def cap(self) -> int:
        return self.need + LOOKAHEAD

    def room(self) -> int:
        return self.cap - len(self.held) - len(self.ordered)

    def has(self, key: Key) -> bool:
        return key[1] in self.got.get(key[0], ())

    def first_gap(self, per_epoch: int) -> int:
        """The first batch of its epoch it was not given. What it got of an epoch only grows,
        so the search goes on from where it last stopped: the producer asks on every turn of its
        loop, and an epoch may have thousands of batches."""
        epoch, j = self.gap
        if epoch != self.epoch:
            j = 0
        got = self.got.get(self.epoch, ())
        while j < per_epoch and j in got:
            j += 1
        self.gap = (self.epoch, j)
        return j

    def accepts(self, key: Key) -> bool:
        """Whether it would take `key` now (room aside from what it ordered)."""
        epoch = key[0]
        if self.has(key) or self.room() <= 0:
            return False
        if epoch == self.epoch:
            return True
        # Its next epoch, but only into room beyond what its current one may still need:
        # a consumer holding only batches of its next epoch could never finish this one.
        return epoch == self.epoch + 1 and self.room() > self.need

    def wants_later(self, key: Key) -> bool:
        return key[0] >= self.epoch and not self.has(key)

    def rate(self, now: float) -> float:
        recent = [t for t in self.times if t >= now - RATE_WINDOW_S]
        span = min(RATE_WINDOW_S, now - self.joined_at)
        return len(recent) / span if span > 0 else 0.0
