"""Batch lifetimes (gpudesk/loader/lease.py): a batch handed out stays intact for as long as any
tensor of it is alive, with a producer as without one.

Every pattern a training script uses to keep batches is run against a real producer and in the
local fallback, and every batch kept is checked at the end (sample i is filled with i, its label
and id are i): an epoch kept whole (`list(loader)`), batches kept for gradient accumulation,
`itertools.tee`, and a one-batch-ahead prefetcher as Lightning's and Accelerate's call `next()`
before they yield. A consumer keeping more than its lease gets a clear error, never a hang nor
recycled memory; with `copy_when_held=True` it gets private copies instead.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from test_loader import FACTORY, Loaders, SharedProducers, assert_exactly_once

from gpudesk.loader import LoaderError, SharedLoader
from gpudesk.loader.lease import Leases, owned_view
from gpudesk.paths import Home

SIZE, BATCH = 200, 8  # 25 batches an epoch
SHM = {"GPUDESK_LOADER_STAGING": "shm"}

# Its module-scoped producers are started once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_loader_lifetimes")


@pytest.fixture
def loaders(home: Home, tmp_path: Path) -> Iterator[Loaders]:
    launcher = Loaders(home, tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture(scope="module")
def producers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedProducers]:
    """The producer of the dataset that the tests here read from, started once (as the first
    test needs it)."""
    started = SharedProducers(tmp_path_factory.mktemp("producers"))
    try:
        yield started
    finally:
        started.close()


def open_loader(mode: str, home: Home, **options: Any) -> SharedLoader:
    """A loader of the synthetic dataset: from the running producer ("shared"), or the local
    fallback ("local") of the same factory."""
    name = "syn" if mode == "shared" else "nothere"
    loader = SharedLoader(
        name,
        factory=FACTORY,
        factory_kwargs={"size": SIZE, "shape": [2]},
        batch_size=options.pop("batch_size", BATCH),
        with_ids=True,
        fallback=mode == "local",
        home=home.root,
        **options,
    )
    assert loader.mode == mode
    return loader


def intact(batch: Any) -> list[int]:
    """The batch's ids, after checking its samples are the ones its ids say."""
    (features, labels), ids = batch
    assert torch.equal(labels.cpu(), ids), (labels, ids)
    assert bool((features.cpu() == ids.float().view(-1, 1)).all()), (features, ids)
    return [int(i) for i in ids.tolist()]


def one_ahead(iterable: Iterable[Any]) -> Iterator[Any]:
    """A prefetcher as Lightning's `_PrefetchDataFetcher` and Accelerate's `DataLoaderShard`:
    the next batch is fetched before the current one is yielded."""
    it = iter(iterable)
    buffered = next(it, None)
    while buffered is not None:
        current, buffered = buffered, next(it, None)
        yield current


def where(producers: SharedProducers, mode: str, home: Home) -> Home:
    """The home a test reads in: the module's producer's ("shared"), or its own ("local")."""
    return producers.home_for("host", size=SIZE, batch=BATCH) if mode == "shared" else home


MODES = ["shared", "local"]


@pytest.mark.parametrize("mode", MODES)
def test_an_epoch_kept_whole_is_every_batch_intact(
    producers: SharedProducers, home: Home, mode: str
) -> None:
    with open_loader(mode, where(producers, mode, home), copy_when_held=True) as loader:
        kept = list(loader)
        ids = [i for batch in kept for i in intact(batch)]  # checked after the whole epoch
        assert_exactly_once(ids, SIZE)
        assert len({tuple(b[1].tolist()) for b in kept}) == len(kept) == SIZE // BATCH
        if mode == "shared":  # the first batches are views; then copies, counted
            assert 0 < loader.copied_batches < len(kept)
        # The next epoch reads on: the copies hold no slot, the views were let go with them.
        del kept
        assert_exactly_once([i for batch in loader for i in intact(batch)], SIZE)


def test_keeping_more_than_the_lease_is_a_clear_error_not_a_hang(
    producers: SharedProducers, home: Home
) -> None:
    with open_loader("shared", where(producers, "shared", home)) as loader:
        kept = []
        began = time.monotonic()
        with pytest.raises(LoaderError) as error:
            for batch in loader:
                kept.append(batch)
        assert time.monotonic() - began < 10
        message = str(error.value)
        assert f"keeps {len(kept)} batches alive" in message, message
        assert f"of the {loader.lease_limit} ring slots" in message, message
        assert ".clone()" in message and "copy_when_held=True" in message, message
        assert loader.lease_limit == 3  # one slot a batch, and LOOKAHEAD = 2 more
        assert len(kept) == loader.lease_limit
        for batch in kept:  # nothing it kept was overwritten meanwhile
            intact(batch)
        # The error ended that epoch's iteration (as leaving the loop early does); with the
        # batches let go, the next epoch reads whole.
        del kept, batch
        assert_exactly_once([i for batch in loader for i in intact(batch)], SIZE)


@pytest.mark.parametrize("mode", MODES)
def test_batches_kept_for_gradient_accumulation_stay_intact(
    producers: SharedProducers, home: Home, mode: str
) -> None:
    """Four steps of inputs kept before each update: more than the lease, so copies beyond it."""
    seen: list[int] = []
    with open_loader(mode, where(producers, mode, home), copy_when_held=True) as loader:
        window: list[Any] = []
        for batch in loader:
            window.append(batch)
            if len(window) == 4:  # the update: every input of the window still as it came
                seen += [i for kept in window for i in intact(kept)]
                window = []
        seen += [i for kept in window for i in intact(kept)]
    assert_exactly_once(seen, SIZE)


@pytest.mark.parametrize("mode", MODES)
def test_a_one_batch_ahead_prefetcher_reads_views_without_copies(
    producers: SharedProducers, home: Home, mode: str
) -> None:
    # copy_when_held left False: no room to spare
    with open_loader(mode, where(producers, mode, home)) as loader:
        for _ in range(2):  # two epochs, the slots given back as batches die
            assert_exactly_once([i for batch in one_ahead(loader) for i in intact(batch)], SIZE)
        assert loader.copied_batches == 0


@pytest.mark.parametrize("mode", MODES)
def test_itertools_tee_gets_intact_batches_in_both_branches(
    producers: SharedProducers, home: Home, mode: str
) -> None:
    with open_loader(mode, where(producers, mode, home), copy_when_held=True) as loader:
        first, second = itertools.tee(loader)
        ahead = [i for batch in first for i in intact(batch)]  # tee keeps them all for second
        behind = [i for batch in second for i in intact(batch)]
    assert ahead == behind
    assert_exactly_once(ahead, SIZE)


def test_a_batch_spanning_slots_holds_every_slot_it_reads(loaders: Loaders, home: Home) -> None:
    """Batches of 12 from a producer's 8 lie across two or three slots, one slot shared by two
    batches: a window of the last two kept stays intact while the stream goes on."""
    loaders.serve(size=SIZE, batch=BATCH, slots=4)  # a ring of its own size: not the module's
    seen: list[int] = []
    with open_loader("shared", home, batch_size=12) as loader:
        assert loader.lease_limit == 3 + 2  # two slots and one more when not aligned, + 2
        window: list[Any] = []
        for batch in loader:
            for kept in window:
                intact(kept)
            seen += intact(batch)
            window = [*window[-1:], batch]
        assert loader.copied_batches == 0
    assert_exactly_once(seen, SIZE)


@pytest.mark.parametrize("hold", ["kept", "error"])
def test_a_staged_mirror_is_held_as_the_host_ring_is(
    loaders: Loaders, home: Home, hold: str
) -> None:
    # A producer of its own: its mirror is a file in /dev/shm (GPUDESK_LOADER_STAGING=shm), which
    # a test beside it (assert_no_new_shm) would take for its own were it left for the module.
    loaders.serve(size=SIZE, batch=BATCH, extra=("--device", "cuda"), env=SHM)
    with open_loader("shared", home, copy_when_held=hold == "kept") as loader:
        assert loader.data_path == "staged"
        if hold == "error":
            with pytest.raises(LoaderError, match="keeps 3 batches alive"):
                kept = list(loader)
            return
        kept = list(loader)
        mirror = loader._mirror
        assert mirror is not None
        base = mirror.untyped_storage().data_ptr()
        staged = [b for b in kept if b[0][0].untyped_storage().data_ptr() == base]
        assert 0 < len(staged) == len(kept) - loader.copied_batches
        assert_exactly_once([i for batch in kept for i in intact(batch)], SIZE)


def test_a_lease_is_returned_when_the_last_view_of_its_batch_dies() -> None:
    """Unit: views, views of views and NumPy arrays of them keep the batch's slots; a slot two
    batches share goes back after both."""
    ring = torch.zeros(1024, dtype=torch.uint8)
    leases = Leases()
    for slot in (1, 2):
        leases.hold(slot)
    first, owner = owned_view(ring)
    assert first.data_ptr() == ring.data_ptr()
    leases.lend([1, 2], [owner])
    second, owner = owned_view(ring)
    leases.lend([2], [owner])
    del owner
    assert leases.spent([1, 2]) == []  # read to their end, but lent
    array = first[8:16].view(torch.int32).numpy()
    del first
    assert leases.collect() == []
    del array
    assert leases.collect() == [1]  # slot 2 is still read by the second batch
    assert leases.alive() == 1
    del second
    assert leases.collect() == [2]
    leases.reset()  # a batch of a former connection releases nothing in the new one
    stale, owner = owned_view(ring)
    leases.hold(5)
    leases.lend([5], [owner])
    leases.reset()
    del stale, owner
    assert leases.collect() == []
