"""A preset applied to a whole dataset (gpudesk.selection.apply): cached orderings name samples,
not positions, so a reordered dataset keeps the same samples; a reuse skips reading every
sample through the dataset index, which still notices a changed dataset. On the real digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpudesk.selection.apply import PROBE_SAMPLES, DatasetIndex, select
from gpudesk.selection.cache import SelectionCache
from gpudesk.selection.preset_names import PresetError
from gpudesk.selection.presets import keep_count, rs2_subset
from gpudesk.workloads.data import load_digits

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_selection_apply")


class Counting:
    """A map-style dataset of (image, label) that counts the samples read."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels, self.reads = images, labels, 0

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        self.reads += 1
        return self.images[index], int(self.labels[index])


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return load_digits()


@pytest.mark.parametrize("preset", ["random-25", "stratified-25", "coverage-25", "dedup-25"])
def test_a_reordered_dataset_reuses_the_entry_and_keeps_the_same_samples(
    digits, tmp_path: Path, preset: str
) -> None:
    images, labels = digits
    cache = SelectionCache(tmp_path / "sel")
    first = select(Counting(images, labels), preset, cache, seed=4)
    perm = np.random.default_rng(9).permutation(len(labels))
    again = select(Counting(images[perm], labels[perm]), preset, cache, seed=4)
    assert first.selection is not None and again.selection is not None
    assert not first.selection.reused and again.selection.reused
    assert first.fingerprint == again.fingerprint
    assert first.indices is not None and again.indices is not None
    # position j of the reordered set is sample perm[j] of the original
    assert sorted(perm[again.indices].tolist()) == first.indices.tolist()
    assert len(first.indices) == keep_count(len(labels), 25)


@pytest.mark.slow(7)
def test_the_dataset_index_lets_a_reuse_skip_the_full_read(digits, tmp_path: Path) -> None:
    images, labels = digits
    cache = SelectionCache(tmp_path / "sel")
    identity = {"factory": "tests:digits", "kwargs": {}}
    first = Counting(images, labels)
    fresh = select(first, "el2n-25", cache, identity=identity)
    assert first.reads >= len(labels)
    second = Counting(images, labels)
    reused = select(second, "el2n-25", cache, identity=identity)
    assert second.reads <= PROBE_SAMPLES  # the probe only
    assert reused.selection is not None and reused.selection.reused
    assert np.array_equal(reused.indices, fresh.indices)
    assert reused.select_s < fresh.select_s


def test_the_dataset_index_notices_a_changed_probed_sample_and_verify_reads_all(
    digits, tmp_path: Path
) -> None:
    images, labels = digits
    cache = SelectionCache(tmp_path / "sel")
    identity = {"factory": "tests:digits", "kwargs": {}}
    before = select(Counting(images, labels), "random-25", cache, identity=identity)
    probed = int(DatasetIndex.probe_positions(len(labels))[3])
    changed = images.copy()
    changed[probed, 10] += 1 / 16
    after = select(Counting(changed, labels), "random-25", cache, identity=identity)
    assert after.fingerprint != before.fingerprint
    assert after.selection is not None and not after.selection.reused
    # a change the probe does not reach is found by a full read (`--verify`)
    unprobed = next(
        i
        for i in range(len(labels))
        if i not in set(DatasetIndex.probe_positions(len(labels)).tolist())
    )
    hidden = changed.copy()
    hidden[unprobed, 10] += 1 / 16
    trusting = select(Counting(hidden, labels), "random-25", cache, identity=identity)
    assert trusting.fingerprint == after.fingerprint  # the documented limit of the probe
    reading = Counting(hidden, labels)
    verified = select(reading, "random-25", cache, identity=identity, verify=True)
    assert reading.reads >= len(labels) and verified.fingerprint != after.fingerprint


def test_a_damaged_dataset_index_is_ignored(digits, tmp_path: Path) -> None:
    images, labels = digits
    cache = SelectionCache(tmp_path / "sel")
    identity = {"factory": "tests:digits", "kwargs": {"split": "all"}}
    first = select(Counting(images, labels), "random-10", cache, identity=identity)
    for canon in (tmp_path / "sel" / "datasets").glob("*/canon.npy"):
        canon.write_bytes(canon.read_bytes()[:-8])
    reading = Counting(images, labels)
    again = select(reading, "random-10", cache, identity=identity)
    assert reading.reads >= len(labels)  # not trusted: read again
    assert np.array_equal(again.indices, first.indices)
    assert [e.method for e in cache.entries()] == ["random"]  # the index is not an entry


def test_rs2_and_full_need_no_prepass(digits, tmp_path: Path) -> None:
    images, labels = digits
    cache = SelectionCache(tmp_path / "sel")
    rs2 = select(Counting(images, labels), "rs2-25", cache, seed=2)
    assert rs2.selection is None and rs2.kept == keep_count(len(labels), 25)
    epochs = [rs2.epoch_indices(e) for e in range(4)]
    assert all(np.array_equal(epochs[e], rs2_subset(len(labels), 25, 2, e)) for e in range(4))
    seen = np.concatenate(epochs[:3])
    assert len(set(seen.tolist())) == len(seen)  # no sample twice before all are seen
    full = select(Counting(images, labels), "full", cache)
    assert full.kept == len(labels) and np.array_equal(
        full.epoch_indices(5), np.arange(len(labels))
    )
    assert cache.entries() == []


def test_less_without_a_target_and_bad_samples_are_clear_errors(digits, tmp_path: Path) -> None:
    images, labels = digits
    cache = SelectionCache(tmp_path / "sel")
    with pytest.raises(PresetError, match="selection_target"):
        select(Counting(images, labels), "less-25", cache)
    with pytest.raises(PresetError, match="unlabelled"):
        select([np.full(3, i) for i in range(20)], "el2n-25", cache)


def test_named_classes_and_unlabelled_data_are_stratified(tmp_path: Path) -> None:
    cache = SelectionCache(tmp_path / "sel")
    named = [(np.full(4, i, dtype=np.float32), "cat" if i < 30 else "dog") for i in range(40)]
    chosen = select(named, "stratified-50", cache)
    assert chosen.indices is not None
    kept = [named[i][1] for i in chosen.indices]
    assert (kept.count("cat"), kept.count("dog")) == (15, 5)
    # unlabelled texts: short and long ones keep their shares (size buckets)
    texts = ["x" * 3] * 60 + ["y" * 300] * 20
    texts = [t + str(i) for i, t in enumerate(texts)]  # distinct samples
    chosen = select(texts, "stratified-25", cache)
    assert chosen.indices is not None
    lengths = [len(texts[i]) > 100 for i in chosen.indices]
    assert (lengths.count(False), lengths.count(True)) == (15, 5)

    class BySource(list):
        selection_strata = ["web"] * 10 + ["books"] * 30

    sourced = BySource(f"doc {i}" for i in range(40))
    chosen = select(sourced, "stratified-50", cache)
    assert chosen.indices is not None
    assert sum(1 for i in chosen.indices if i < 10) == 5


@pytest.mark.slow(6)
def test_image_shaped_samples_get_a_cnn_proxy_also_on_a_reuse(digits, tmp_path: Path) -> None:
    from gpudesk.selection import models

    images, labels = digits
    cache = SelectionCache(tmp_path / "sel")
    identity = {"factory": "tests:digit-images", "kwargs": {}}
    square = images[:400].reshape(-1, 8, 8)  # [H, W] images: a CNN proxy
    fresh = select(Counting(square, labels[:400]), "loss-25", cache, identity=identity)
    assert fresh.selection is not None and fresh.selection.key is not None
    entry = cache.load(fresh.selection.key)
    assert entry is not None and entry.proxy is not None
    assert entry.proxy.startswith(models.model_name((8, 8), 10)) and entry.proxy.startswith("cnn")
    # the dataset index remembers the shape, so a reuse finds the same entry without a read
    reading = Counting(square, labels[:400])
    reused = select(reading, "loss-25", cache, identity=identity)
    assert reused.selection is not None and reused.selection.reused
    assert reading.reads <= PROBE_SAMPLES
    # the same pixels as flat vectors are another proxy, so another entry
    flat = select(Counting(images[:400], labels[:400]), "loss-25", cache)
    assert flat.selection is not None and flat.selection.key != fresh.selection.key


def test_a_scored_preset_needs_samples_of_one_shape(tmp_path: Path) -> None:
    cache = SelectionCache(tmp_path / "sel")
    ragged = [(np.zeros(4 if i != 7 else 5, dtype=np.float32), i % 2) for i in range(20)]
    with pytest.raises(PresetError, match=r"one shape: sample 0's input has shape \[4\], sample 7"):
        select(ragged, "el2n-25", cache)
    chosen = select(ragged, "random-25", cache)  # a cheap method does not read the inputs
    assert chosen.kept == 5
