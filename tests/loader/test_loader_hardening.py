"""The shared loader against what issue 16 found (findings 12, 14, 15), with real producers.

- 12: a script that moves from a DataLoader to `SharedLoader` must still get fresh random
  augmentations every epoch, from every source a DataLoader varies, with or without a producer.
- 14: a slow consumer that joins mid-epoch must not hold a fast one up.
- 15: samples of varying size go through the ring with the script's own `collate_fn`, and
  arrive as a plain DataLoader with that `collate_fn` would give them; no batch data is
  pickled on the way.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import test_loader
import torch
from conftest import wait_for
from test_loader import Loaders, assert_exactly_once, assert_whole_batches_of, canonical
from torch.utils.data import DataLoader

import gpudesk.loader.consumer as consumer_module
from gpudesk.loader import SharedLoader
from gpudesk.paths import Home
from gpudesk.workloads.synthetic import make_augmented, make_ragged

AUGMENTED = "gpudesk.workloads.synthetic:make_augmented"
RAGGED = "gpudesk.workloads.synthetic:make_ragged"
SOURCES = ("epoch", "torch", "random", "numpy")  # what make_augmented's samples draw from

# test_loader's fixture (its producers and consumers are stopped after each test), bound here
# rather than imported by name: a test's parameter would shadow the import (ruff F811).
loaders = test_loader.loaders


def by_sample(batches: list[Any]) -> dict[int, tuple[Any, ...]]:
    """make_augmented's batches (as lists) as {sample: (epoch, torch, random, numpy)}."""
    out = {}
    for columns in batches:
        for row in zip(*columns, strict=True):
            out[int(row[0])] = tuple(row[1:])
    return out


def changed(first: dict[int, tuple[Any, ...]], second: dict[int, tuple[Any, ...]]) -> list[bool]:
    """For each source: whether it changed between two epochs for every sample."""
    assert first.keys() == second.keys()
    return [all(first[i][s] != second[i][s] for i in first) for s in range(len(SOURCES))]


def shared_epochs(name: str, home: Home, epochs: int, **options: Any) -> list[list[Any]]:
    with SharedLoader(name, home=home.root, **options) as loader:
        out = []
        for epoch in range(epochs):
            loader.set_epoch(epoch)  # as a training script does; the producer decides
            # A batch is valid until the next is asked for: take its values at once.
            out.append([[column.tolist() for column in batch] for batch in loader])
        return out


@pytest.mark.slow(14)
def test_every_epoch_gets_fresh_augmentations_shared_and_local_as_with_a_dataloader(
    loaders: Loaders, home: Home, tmp_path: Path
) -> None:
    """Finding 12: the producer never told the dataset the epoch, so a dataset that draws its
    augmentations per epoch gave the same ones every epoch through a SharedLoader (128 of 128
    samples identical, none with a DataLoader)."""
    size, batch = 64, 8
    # What a plain DataLoader varies between epochs, as a training script drives it: its
    # workers are seeded anew every epoch, and the script tells the dataset the epoch.
    dataset = make_augmented(size)
    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_size=batch, num_workers=2)
    plain = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        plain.append(by_sample([[c.tolist() for c in batch] for batch in loader]))
    assert changed(*plain) == [True] * len(SOURCES)

    # A producer (two workers), and a second one of the same seed in another home.
    producer = loaders.serve(batch=batch, workers=2, dataset=(AUGMENTED, {"size": size}))
    other = Home(tmp_path / "other")
    twin = loaders.serve(
        "twin", home=other, batch=batch, workers=1, dataset=(AUGMENTED, {"size": size})
    )
    shared = [by_sample(b) for b in shared_epochs("syn", home, 2, fallback=False)]
    assert [s[0] for s in shared[0].values()] == [0] * size  # the dataset heard of epoch 0
    assert [s[0] for s in shared[1].values()] == [1] * size  # ... and then of epoch 1
    assert changed(*shared) == [True] * len(SOURCES)
    # The randomness is the seed's, batch by batch: the same from any producer of that seed,
    # whatever its workers, and the same again without any producer (the local fallback).
    assert [by_sample(b) for b in shared_epochs("twin", other, 2, fallback=False)] == shared
    local = shared_epochs(
        "nothere",
        home,
        2,
        batch_size=batch,
        factory=AUGMENTED,
        factory_kwargs={"size": size},
        workers=2,
    )
    assert [by_sample(b) for b in local] == shared
    # Loading data does not touch the training process's own random state.
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    shared_epochs("nothere", home, 1, batch_size=batch, factory=AUGMENTED)
    assert torch.equal(torch.rand(3), expected)
    assert producer.stop() == 0 and twin.stop() == 0


@pytest.mark.slow(15)
def test_a_slow_consumer_joining_mid_epoch_does_not_hold_up_a_fast_one(loaders: Loaders) -> None:
    """Finding 14: the slots kept for a joiner's make-ups starved the stream, and a fast
    consumer waited 5.5 s while a slow one caught up. Now the fast one never waits for the slow
    one (it waits only for its batches to be made), and the ring stays bounded."""
    size, batch, delay = 400, 8, 0.005  # 50 batches an epoch
    per_epoch = size // batch
    producer = loaders.serve(size=size, batch=batch, workers=1, cost_ms=0.2, slots=8)
    fast = loaders.thread(epochs=4, delay=delay)

    def fast_at(index: int) -> bool:
        return fast.batches() >= index

    wait_for(lambda: fast_at(per_epoch // 2), 20, what="the fast consumer to be mid-epoch")
    slow = loaders.thread(epochs=1, delay=0.1)  # a training step of 0.1 s
    wait_for(lambda: slow.batches() >= 1, 10, what="the slow consumer's first batch")
    epochs_seen = fast.finish(60)
    times = [e["t"] for e in fast.events("batch")]
    gaps = [b - a - delay for a, b in itertools.pairwise(times)]
    assert max(gaps) < 1.0, f"the fast consumer waited {max(gaps):.2f} s between two batches"
    assert slow.batches() < per_epoch  # it really was slow: the fast one went on meanwhile
    status = producer.status()
    assert status["slots"] <= 2 + 1 + 2 * 2 * 3, status  # bounded: it did not grow with the lag
    for e in epochs_seen:
        assert_exactly_once(e["ids"], size)
    [epoch] = slow.finish(60)
    assert_exactly_once(epoch["ids"], size, "the slow consumer's epoch")
    assert_whole_batches_of(epoch["ids"], canonical(size, 0, epoch["stream_epoch"]), batch)
    assert producer.stop() == 0


def pad(samples: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """A text-style collate_fn: pad to the longest sample of the batch, with the lengths."""
    lengths = torch.tensor([len(tokens) for tokens, _ in samples])
    padded = torch.full((len(samples), int(lengths.max())), -1, dtype=torch.int64)
    for row, (tokens, _) in enumerate(samples):
        padded[row, : len(tokens)] = tokens
    return {"tokens": padded, "lengths": lengths, "labels": torch.tensor([i for _, i in samples])}


@pytest.mark.slow(11)
def test_variable_size_samples_arrive_through_the_ring_as_a_dataloader_with_the_collate_fn_gives(
    loaders: Loaders, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 15: only fixed-shape samples could be shared, and there was no collate_fn."""
    size, batch, seed, longest = 100, 8, 3, 300
    producer = loaders.serve(
        batch=batch, seed=seed, workers=2, dataset=(RAGGED, {"size": size, "max_length": longest})
    )
    # Every control message the consumer gets, by size: batch data must not be among them.
    messages: list[tuple[str, int]] = []
    decode = consumer_module.decode

    def recorded(raw: bytes) -> dict[str, Any]:
        message = decode(raw)
        messages.append((message["type"], len(raw)))
        return message

    monkeypatch.setattr(consumer_module, "decode", recorded)
    handed: list[bool] = []
    with SharedLoader(
        "syn", home=home.root, fallback=False, with_ids=True, collate_fn=pad
    ) as loader:

        def collate(samples: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
            handed.extend(loader.ring.holds(tokens) for tokens, _ in samples)  # type: ignore[union-attr]
            return pad(samples)

        loader.collate_fn = collate
        # A batch's ids are a view, valid until the next batch: keep a copy.
        epochs = [[(batch, ids.clone()) for batch, ids in loader] for _ in range(2)]
        # Without a collate_fn a consumer batches as default_collate does, which cannot stack
        # samples of different lengths: the same error a DataLoader gives.
        loader.collate_fn = None
        with pytest.raises(RuntimeError, match="equal size"):
            next(iter(loader))

    dataset = make_ragged(size, longest)
    for epoch, got in enumerate(epochs):
        order = canonical(size, seed, epoch)
        plain = DataLoader(
            dataset, batch_size=batch, sampler=order, collate_fn=pad
        )  # the same samples in the same batches, through torch alone
        assert len(got) == len(plain)
        for (mine, ids), theirs in zip(got, plain, strict=True):
            assert mine.keys() == theirs.keys()
            for key in theirs:
                assert torch.equal(mine[key], theirs[key]), (epoch, key)
            assert torch.equal(ids, theirs["labels"])
    assert handed and all(handed)  # the collate_fn got views of the ring
    batches = [length for kind, length in messages if kind == "batch"]
    assert len(batches) >= 2 * len(epochs[0])
    data = sum(len(t) for t, _ in (dataset[i] for i in range(size))) * 8 // len(epochs[0])
    assert max(batches) < 2048 < data, (max(batches), data)  # descriptions, never the data
    status = producer.status()
    # Workers wrote what fitted the ring straight into it; the producer copied only the first
    # batches (before the ring was laid out) and samples longer than their slot had room for.
    assert status["bytes_copied"] < status["bytes_written"] / 2, status
    assert producer.stop() == 0
    assert json.dumps(status["consumers"]) == "[]"
