"""A shared loader's local fallback: the epochs a producer with this loader's seed would give,
from a DataLoader in the training process, through the same fetching (`fetch.Source`), for a
script run without a producer (`SharedLoader(..., factory=..., fallback=True)`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from gpudesk.loader.fetch import Source

if TYPE_CHECKING:
    from gpudesk.loader.consumer import SharedLoader


def dataset_of(loader: SharedLoader) -> Any:
    if loader._local is None:
        from gpudesk.loader.producer_config import load_factory

        assert loader.factory is not None
        loader._local = load_factory(loader.factory)(**loader.factory_kwargs)
    return loader._local


def iterate(loader: SharedLoader) -> Iterator[Any]:
    """The same epochs as a producer with this seed would give, from a local DataLoader,
    through the same fetching (`fetch.Source`): the same order, and the same samples where
    the batch size is the producer's."""
    import torch
    from torch.utils.data import DataLoader, default_collate

    from gpudesk.loader.batch_plan import BatchPlan

    dataset = loader._local_dataset()
    epoch, start = loader._local_epoch, loader._local_start
    loader._local_epoch, loader._local_start = epoch + 1, 0
    # A producer's own plan of the stream, so the order and the batches' seeds are its.
    plan = BatchPlan(len(dataset), loader._plan_batch(), loader.seed, loader.shuffle)
    requests = loader.contract.local_requests(plan, epoch)
    count = loader.contract.batches(len(dataset), loader.batch_size or 64)
    requests = requests[start:count]  # resumed: from where it was; drop_last: not the tail
    local = DataLoader(
        cast(Any, Source(dataset)),
        batch_sampler=cast(Any, requests),
        collate_fn=loader.collate_fn or default_collate,
        num_workers=loader.workers,
        # Its workers' seeds from a generator of its own, not the script's: every batch is
        # seeded by itself anyway (fetch.py), and the script's random state stays its own.
        generator=torch.Generator().manual_seed(loader.seed),
    )
    try:
        for done, (request, batch) in enumerate(zip(requests, local, strict=True), start + 1):
            batch_ids = torch.tensor(request.indices)
            loader.last_ids = batch_ids
            loader._local_reading = (epoch, done)
            batch = loader.contract.pin(batch)
            yield (batch, batch_ids) if loader.with_ids else batch
    finally:
        loader._local_reading = None
