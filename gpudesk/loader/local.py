"""A shared loader's local fallback: the epochs a producer with this loader's seed would give,
from a DataLoader in the training process, through the same fetching (`fetch.Source`), for a
script run without a producer (`SharedLoader(..., factory=..., fallback=True)`); for a job told
its data selection (a Slurm job: `gpudesk.core.local_selection`), the epochs of that selection,
as a producer applying it would choose them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from gpudesk.core.datasets import selection_told
from gpudesk.core.local_selection import ENV_SELECTION
from gpudesk.loader.fetch import Source
from gpudesk.loader.protocol import LoaderError

if TYPE_CHECKING:
    from gpudesk.core.datasets import DatasetSpec
    from gpudesk.loader.consumer import SharedLoader


def told_selection(name: str) -> DatasetSpec | None:
    """The data selection this job's environment tells a loader of `name` to read, if any; a
    value that is not what `gpudesk run` writes is refused (LoaderError), not ignored: the job
    would train on the whole dataset instead."""
    value = os.environ.get(ENV_SELECTION)
    if not value:
        return None
    try:
        return selection_told(value, name)
    except ValueError as exc:
        raise LoaderError(f"the shared loader {name!r}: {exc}") from None


def dataset_of(loader: SharedLoader) -> Any:
    if loader._local is None:
        from gpudesk.loader.producer_config import load_factory

        if loader._told is not None:
            loader._local = _selected(loader, loader._told)
        else:
            assert loader.factory is not None
            loader._local = load_factory(loader.factory)(**loader.factory_kwargs)
    return loader._local


def epoch_length(loader: SharedLoader) -> int:
    """Samples an epoch of the fallback reads: its selection's, else the whole dataset's."""
    dataset = dataset_of(loader)
    return len(dataset) if loader._local_subset is None else loader._local_subset.kept


def _selected(loader: SharedLoader, served: DatasetSpec) -> Any:
    """The dataset `served` names (its factory and arguments: the pre-pass's, not the
    script's), with the selection a producer serving it would apply, kept in
    `loader._local_subset`: reused from the selection cache under the job's home, where the
    pre-pass job before it put it, else computed here (as a producer would)."""
    from gpudesk.loader.producer_config import ProducerConfig, open_dataset, select_data
    from gpudesk.selection.cache import loader_use

    config = ProducerConfig(
        served.name,
        served.factory,
        served.args,
        seed=served.seed,
        selection=served.selection,
        target=served.selection_target,
        target_kwargs=served.selection_target_args,
    ).check()
    dataset, _ = open_dataset(config)
    chosen, cache = select_data(config, loader.home, dataset)
    loader._local_subset = chosen
    about = chosen.describe()
    if about["reused"]:  # a training job's use of a pre-pass, as a producer records it
        job = os.environ.get("GPUDESK_JOB_ID")
        who = f"job {job}" if job else f"pid {os.getpid()}"
        try:
            cache.note_reuse(about["key"], loader_use(who, served.name))
        except (OSError, ValueError) as exc:
            print(f"gpudesk: could not record the reuse of {about['key']}: {exc}", file=sys.stderr)
    how = "from the selection cache" if about["reused"] else "chosen here"
    print(
        f"gpudesk: the shared loader {loader.name!r} has no producer here: reading its data "
        f"selection {about['preset']} locally, {about['kept']} of {about['of']} samples ({how})",
        file=sys.stderr,
    )
    return dataset


def iterate(loader: SharedLoader) -> Iterator[Any]:
    """The same epochs as a producer with this seed would give, from a local DataLoader,
    through the same fetching (`fetch.Source`): the same order, and the same samples where
    the batch size is the producer's."""
    import torch
    from torch.utils.data import DataLoader, default_collate

    from gpudesk.loader.batch_plan import BatchPlan

    dataset, length = loader._local_dataset(), epoch_length(loader)
    epoch, start = loader._local_epoch, loader._local_start
    loader._local_epoch, loader._local_start = epoch + 1, 0
    # A producer's own plan of the stream, so the order and the batches' seeds are its (and a
    # selection's samples, as its producer would choose them each epoch).
    subset = None if loader._local_subset is None else loader._local_subset.epoch_indices
    plan = BatchPlan(length, loader._plan_batch(), loader.seed, loader.shuffle, subset=subset)
    requests = loader.contract.local_requests(plan, epoch)
    count = loader.contract.batches(length, loader.batch_size or 64)
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
