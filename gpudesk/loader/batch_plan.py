"""The stream of batch requests a producer's DataLoader samples: each epoch's order (shuffled
under the producer's seed, a data selection's subset), the stream's next key, make-ups slipped
in between, and the ring slot reserved for each request.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence

from gpudesk.loader.fetch import Key, Request, batch_seed

ORDERS_KEPT = 8  # epochs whose shuffled order is kept at hand (a laggard may reach back)


def torch_seed(value: int) -> int:
    """`value` as a seed torch takes (-2**63 .. 2**64 - 1): as it is where it already is one, so
    an order seeded so stays the same; else reduced mod 2**64 (a profile's seed may be any
    64-bit integer, and an epoch's is that times 1,000,003)."""
    return value if -(2**63) <= value < 2**64 else value % 2**64


class BatchPlan:
    """The DataLoader's batch sampler: the stream, with make-ups slipped in between.

    Each request it yields carries the batch's seed and the ring slot reserved for it
    (`reserve`, the producer's), so the worker can write the batch in place."""

    def __init__(
        self,
        length: int,
        batch_size: int,
        seed: int,
        shuffle: bool,
        start: Key = (0, 0),
        subset: Callable[[int], Sequence[int]] | None = None,
        reserve: Callable[[], tuple[int | None, tuple[tuple[int, int], ...]]] | None = None,
        needed: Callable[[Key], bool] | None = None,
    ) -> None:
        """`length`: samples per epoch; `subset(epoch)`, when given, names them (a data
        selection), else they are 0 .. length - 1."""
        self.length, self.batch_size, self.seed, self.shuffle = length, batch_size, seed, shuffle
        self.subset = subset
        self.reserve = reserve
        self.needed = needed  # whether a stream batch is of use to anyone (else it is skipped)
        self.per_epoch = math.ceil(length / batch_size)
        self.stream_next: Key = start  # the next stream key to hand to the DataLoader
        self.makeups: deque[Key] = deque()
        self.in_flight: deque[tuple[Request, bool]] = deque()  # (request, is a make-up), in order
        self._last_makeup = False
        self._orders: OrderedDict[int, list[int]] = OrderedDict()

    def order(self, epoch: int) -> list[int]:
        if epoch in self._orders:
            self._orders.move_to_end(epoch)
            return self._orders[epoch]
        import torch

        if self.shuffle:
            generator = torch.Generator().manual_seed(torch_seed(self.seed * 1_000_003 + epoch))
            order = torch.randperm(self.length, generator=generator).tolist()
        else:
            order = list(range(self.length))
        if self.subset is not None:
            chosen = self.subset(epoch)
            order = [int(chosen[i]) for i in order]
        self._orders[epoch] = order
        while len(self._orders) > ORDERS_KEPT:
            self._orders.popitem(last=False)
        return order

    def indices(self, key: Key) -> list[int]:
        epoch, index = key
        return self.order(epoch)[index * self.batch_size : (index + 1) * self.batch_size]

    def advance(self, key: Key) -> Key:
        epoch, index = key
        return (epoch, index + 1) if index + 1 < self.per_epoch else (epoch + 1, 0)

    def request(self, key: Key) -> Request:
        slot, regions = self.reserve() if self.reserve is not None else (None, ())
        return Request(key, tuple(self.indices(key)), batch_seed(self.seed, *key), slot, regions)

    def peek(self) -> Key:
        """The key the next request will be for."""
        return self.makeups[0] if self.makeups and not self._last_makeup else self._next_stream()

    def _next_stream(self) -> Key:
        """The stream's next key, past what everyone already has (after a rewind, a restart)."""
        key = self.stream_next
        for _ in range(3 * self.per_epoch):  # a consumer needs all of its epoch after next
            if self.needed is None or self.needed(key):
                break
            key = self.advance(key)
        return key

    def coming(self) -> set[Key]:
        """Batches asked for and not yet made."""
        return set(self.makeups) | {r.key for r, _ in self.in_flight}

    def __iter__(self) -> Iterator[Request]:
        while True:
            # Make-ups take turns with the stream: a consumer that lags gets its batches at its
            # own pace, and the stream goes on meanwhile for the others.
            if self.makeups and not self._last_makeup:
                key, makeup = self.makeups.popleft(), True
            else:
                key, makeup = self._next_stream(), False
                self.stream_next = self.advance(key)
            self._last_makeup = makeup
            request = self.request(key)
            self.in_flight.append((request, makeup))
            yield request
