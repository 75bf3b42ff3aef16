"""DataLoader's options for `SharedLoader`: `drop_last`, `shard`, `pin_memory` and the check of
`set_epoch` (its `state_dict` is in `resume.py`).

**Which split for a multi-GPU job.** Every rank is a consumer of its own and is handed every
batch of the stream; it keeps *its share of each batch* and lets the rest go at once. Its share of
a batch is one contiguous run of it (so it stays a view of the ring, no copy), as long as the
share DistributedSampler gives a rank of the same positions: of the epoch's positions `q` (its
order cut in the producer's batches, `q = j * B + i`) a rank `r` of `w` takes as many from each
batch as there are `q` with `q % w == r` in it. A rank's epoch is then `ceil((len - r) / w)`
samples, the ranks' epochs are disjoint and together the epoch, every sample once.

Why every batch and not blocks of the epoch (DistributedSampler's other reading): the ranks of a
DDP job step in lockstep (every step all-reduces), so they need the same part of the stream at
the same time. With the epoch cut in blocks, rank 1 would wait for the stream to reach its half
while rank 0 waits for rank 1 in the all-reduce, and the producer would make rank 0's batches
again for it later. Split by the batch, the ranks take the stream together, one producer for all
ranks and all jobs, and it does not know there are ranks at all.

Unlike DistributedSampler nothing is padded (padding repeats samples: "every sample once per
epoch" would no longer hold), so where `len % w != 0` the ranks' epochs differ by one sample,
and may differ by one batch: that is said when the loader is made, and `drop_last=True` gives
every rank the same number of full batches (as DistributedSampler's `drop_last` does, by
dropping the epoch's tail: every rank reads `len // w` samples at most).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpudesk.loader.protocol import LoaderError

if TYPE_CHECKING:
    from gpudesk.loader.batch_plan import BatchPlan
    from gpudesk.loader.fetch import Request


@dataclass(frozen=True)
class Shard:
    """Rank `rank` of a job of `world` ranks."""

    rank: int
    world: int

    def _below(self, position: int, rank: int) -> int:
        """How many epoch positions `q < position` have `q % world == rank`."""
        return max(0, (position - rank + self.world - 1) // self.world)

    def share(self, first: int, count: int) -> tuple[int, int]:
        """This rank's run `[a, c)` of a batch of `count` samples whose first is at epoch
        position `first`: each rank's run is as long as its positions among them, in rank order."""
        end = first + count
        sizes = [self._below(end, k) - self._below(first, k) for k in range(self.rank + 1)]
        a = sum(sizes[:-1])
        return a, a + sizes[-1]

    def samples(self, length: int) -> int:
        """This rank's samples of an epoch of `length`."""
        return self._below(length, self.rank)


def resolve_shard(shard: tuple[int, int] | None) -> Shard | None:
    """The shard asked for, checked; else this process's rank in an initialised
    torch.distributed process group of more than one rank; else none."""
    if shard is None:
        try:
            import torch.distributed as dist
        except ImportError:  # a torch built without distributed
            return None
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        return Shard(dist.get_rank(), dist.get_world_size())
    try:
        rank, world = (int(x) for x in shard)
    except (TypeError, ValueError):
        raise LoaderError(f"shard={shard!r}: expected (rank, world_size), two integers") from None
    if world < 1 or not 0 <= rank < world:
        raise LoaderError(
            f"shard={shard!r}: the rank must be in 0 .. world_size - 1 and world_size at least 1"
        )
    return Shard(rank, world) if world > 1 else None


class Contract:
    """A loader's DataLoader options: how many batches an epoch has, which of a batch is this
    rank's, whether the last is dropped, pinning, and the check of `set_epoch`."""

    def __init__(self, drop_last: bool, shard: Shard | None, pin_memory: bool) -> None:
        self.drop_last = drop_last
        self.shard = shard
        self.pin_memory = pin_memory
        self.epoch_offset: int | None = None  # the stream's epoch minus the script's, once set
        # (the epoch it was welcomed at, the one the ranks agreed on), where a group agreed
        self.joined: tuple[int, int] | None = None
        self._warned: set[tuple[int, int]] = set()
        if pin_memory:
            import torch

            if not torch.cuda.is_available():
                # As a DataLoader does: say so once, and hand out unpinned batches.
                warnings.warn(
                    "pin_memory=True but this torch sees no CUDA device, so batches are not "
                    "pinned (page-locked memory only speeds up copies to a GPU)",
                    stacklevel=3,
                )
                self.pin_memory = False

    def samples(self, length: int) -> int:
        """Samples of an epoch of `length` that this rank reads (before drop_last)."""
        return self.shard.samples(length) if self.shard else length

    def batches(self, length: int, batch_size: int) -> int:
        """Batches this loader yields in an epoch of `length` samples (its `len()`)."""
        if not self.drop_last:
            return math.ceil(self.samples(length) / batch_size)
        # Every rank the same count: the fewest samples any rank has, as DistributedSampler's
        # drop_last cuts the epoch to len // world for every rank.
        fewest = length // self.shard.world if self.shard else length
        return fewest // batch_size

    def limit(self, length: int, batch_size: int) -> int | None:
        """The most batches to yield in an epoch, where the samples alone would give more."""
        return self.batches(length, batch_size) if self.drop_last else None

    def yields(self, have: int, want: int, finished: bool) -> bool:
        """Whether `have` samples at hand make a batch of the `want` asked: a full one, or the
        epoch's last, shorter one unless it is dropped."""
        return have >= want or (finished and have > 0 and not self.drop_last)

    def run(self, index: int, per_batch: int, count: int) -> tuple[int, int]:
        """This rank's run of batch `index` (of `count` samples, `per_batch` a full one)."""
        return self.shard.share(index * per_batch, count) if self.shard else (0, count)

    def plan_batch(self, batch_size: int) -> int:
        """The fallback plan's batch: a job's whole batch when sharded (every rank takes its
        share of each, as under a producer of that batch size), else the loader's."""
        return batch_size * (self.shard.world if self.shard else 1)

    def local_requests(self, plan: BatchPlan, epoch: int) -> list[Request]:
        """The fallback's requests of an epoch: this rank's share of each plan batch (its ids are
        a producer's of the plan's batch size; their augmentations are drawn in another order,
        as only the share is fetched), none where a rank's share of the last one is empty."""
        requests = []
        for j in range(plan.per_epoch):
            request = plan.request((epoch, j))
            a, c = self.run(j, plan.batch_size, len(request.indices))
            if c > a:
                requests.append(dataclasses.replace(request, indices=request.indices[a:c]))
        return requests

    def uneven(self, length: int, batch_size: int) -> str | None:
        """Why this job's ranks would yield different numbers of batches an epoch, if they do."""
        if self.shard is None or self.drop_last:
            return None
        counts = {
            math.ceil(Shard(r, self.shard.world).samples(length) / batch_size)
            for r in range(self.shard.world)
        }
        if len(counts) == 1:
            return None
        return (
            f"with {length} samples an epoch, batch_size={batch_size} and {self.shard.world} "
            f"ranks, some ranks yield {min(counts)} batches an epoch and others {max(counts)} "
            "(nothing is padded: every sample is read once), so a DDP step that all-reduces "
            "would wait for ever on the last one; pass drop_last=True for the same count on "
            "every rank"
        )

    def pin(self, batch: Any) -> Any:
        """The batch with its host tensors page-locked (copied into pinned memory, as a
        DataLoader's pin thread does); tensors already on a GPU are left as they are."""
        return _pinned(batch) if self.pin_memory else batch

    def check_epoch(self, script_epoch: int, stream_epoch: int) -> None:
        """A script's `set_epoch` under a producer: the first call ties the script's epochs to
        the stream's (a job that joins a running producer reads its epochs from where it is);
        later ones are checked against that, and a mismatch is warned about, once."""
        offset = stream_epoch - script_epoch
        if self.epoch_offset is None:
            self.epoch_offset = offset
            return
        if offset == self.epoch_offset or (script_epoch, stream_epoch) in self._warned:
            return
        self._warned.add((script_epoch, stream_epoch))
        expected = stream_epoch - self.epoch_offset
        warnings.warn(
            f"set_epoch({script_epoch}), but the next epoch this loader reads is the producer's "
            f"epoch {stream_epoch}, which the script's earlier calls make its epoch {expected}: "
            "under a producer the stream decides the epochs, and a consumer reads them in turn "
            "(an epoch left early counts as read). The order is the stream's, not the one "
            f"set_epoch({script_epoch}) would give without a producer",
            RuntimeWarning,
            stacklevel=3,
        )


def agree_on_epoch(epoch: int, mode: str) -> int:
    """The epoch all ranks of the process group start at: the latest any of them was welcomed
    at (the stream may pass an epoch's end between two ranks' hellos). Every rank must make its
    loader at the same point, as with any collective call."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (mode, epoch))
    modes = {m for m, _ in gathered}
    if len(modes) > 1:
        raise LoaderError(
            "the ranks of this job read the shared loader in different modes (some from a "
            "producer, some locally, as no producer was running when they started), so they "
            "cannot share its epochs: start the producer before the job, or none"
        )
    return max(int(e) for _, e in gathered)


def _pinned(data: Any) -> Any:
    import torch

    if isinstance(data, torch.Tensor):
        return data.pin_memory() if data.device.type == "cpu" and not data.is_pinned() else data
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
        return type(data)(*(_pinned(x) for x in data))
    if isinstance(data, (tuple, list)):
        return type(data)(_pinned(x) for x in data)
    if isinstance(data, dict):
        return {k: _pinned(v) for k, v in data.items()}
    return data
