"""Fetching a batch for the shared loader: what a DataLoader worker does with one request.

**Randomness by the batch, not by the worker.** A DataLoader gives each epoch fresh randomness:
it draws a base seed from the main process's generator every epoch and seeds each worker's
Python `random`, torch and NumPy generators from it, and training scripts call `set_epoch` on
their dataset or sampler. A producer cannot copy that as it is. It serves one stream to many
consumers for many epochs with workers that live as long as it does, makes batches again for a
consumer that joined late, and a restarted producer makes the rest of an epoch again. A worker's
seed would then make a sample's augmentation depend on which worker happened to fetch it.

So every batch is fetched under a seed of its own, `batch_seed(seed, epoch, batch)`: Python's
`random`, torch's default generator and NumPy's global generator are seeded with it before its
first sample, and the samples draw from them in order, as they would in a DataLoader worker. A
dataset with a `set_epoch` method is told the epoch before the first batch of each epoch. A batch
of epoch `e` therefore holds the same augmented samples for every consumer, every time it is
made, in every epoch's new draw; a consumer's local fallback fetches through this same code, so
a script sees the same samples with or without a producer (at the producer's batch size).
Where the fetch runs in the training process itself (a fallback with no workers), the generators
are put back afterwards: loading data does not disturb the script's own random state.
`torch.utils.data.get_worker_info()` works in a producer's workers as in any DataLoader's; its
`seed` is the worker's, fixed for the producer's life (as with `persistent_workers=True`).

**Straight into the ring.** In a producer, the request also names the ring slot reserved for the
batch and that slot's regions. The worker lays the samples out there itself (`batch.pack`) and
hands back only their description; no tensor passes through the DataLoader's result queue,
which would cost a shared-memory file and a descriptor hand-over per tensor, and a copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpudesk.loader.batch import Packed, pack
from gpudesk.loader.ring import Ring

Key = tuple[int, int]  # (epoch, batch within the epoch)


@dataclass(frozen=True)
class Request:
    """One batch to fetch: what a batch sampler yields in place of a list of indices."""

    key: Key
    indices: tuple[int, ...]
    seed: int  # batch_seed(...) of the batch
    slot: int | None = None  # the ring slot reserved for it (a producer's request)
    regions: tuple[tuple[int, int], ...] = ()  # that slot's (offset, capacity) per field


def batch_seed(seed: int, epoch: int, index: int) -> int:
    """The seed batch `index` of epoch `epoch` is fetched under: a hash, so that neighbouring
    batches and epochs get unrelated streams."""
    digest = hashlib.blake2b(f"{seed}:{epoch}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@contextlib.contextmanager
def seeded(seed: int, restore: bool) -> Iterator[None]:
    """Seed Python's, torch's (CPU) and NumPy's global generators; put them back after when
    `restore` (in a training process)."""
    import numpy as np
    import torch

    saved = (random.getstate(), torch.get_rng_state(), np.random.get_state()) if restore else None
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        if saved is not None:
            random.setstate(saved[0])
            torch.set_rng_state(saved[1])
            np.random.set_state(saved[2])


class RingWriter:
    """A worker's access to the producer's ring, opened on first use (so it works with forked
    and spawned workers alike)."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        self._ring: Ring | None = None
        self._failed = False

    def __getstate__(self) -> dict[str, Any]:
        return {"pid": self.pid, "fd": self.fd, "_ring": None, "_failed": False}

    def ring(self) -> Ring | None:
        if self._ring is None and not self._failed:
            try:
                self._ring = Ring.open(self.pid, self.fd)
            except OSError:
                self._failed = True  # the producer places every batch itself, a copy
        return self._ring


class Source:
    """The dataset a DataLoader runs over for the shared loader: it takes `Request`s.

    With a `RingWriter` (a producer's workers) a request yields a `batch.Packed`; without one
    (a consumer's local fallback) the list of samples, for the DataLoader's collate_fn."""

    def __init__(self, dataset: Any, writer: RingWriter | None = None) -> None:
        self.dataset = dataset
        self.writer = writer
        self.epoch: int | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        raise TypeError("a shared-loader source is read by batch requests only")

    def fetch(self, request: Request) -> list[Any]:
        from torch.utils.data import get_worker_info

        epoch = request.key[0]
        if epoch != self.epoch:
            setter = getattr(self.dataset, "set_epoch", None)
            if callable(setter):
                setter(epoch)
            self.epoch = epoch
        many = getattr(self.dataset, "__getitems__", None)
        with seeded(request.seed, restore=get_worker_info() is None):
            if callable(many):
                return list(many(list(request.indices)))
            return [self.dataset[i] for i in request.indices]

    def __getitems__(self, request: Request) -> Any:
        fetched = self.fetch(request)
        if self.writer is None:
            return fetched
        ring = self.writer.ring() if request.slot is not None else None
        regions = request.regions

        def place(field: int, nbytes: int) -> tuple[int, Any] | None:
            if ring is None or field >= len(regions) or nbytes > regions[field][1]:
                return None
            offset = regions[field][0]
            return offset, ring.view(offset, nbytes)

        return pack(request.key, fetched, list(request.indices), place)


def passthrough(packed: Packed) -> Packed:
    """The producer DataLoader's collate_fn: the worker has already laid the batch out."""
    return packed
