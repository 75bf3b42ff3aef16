"""The selection methods themselves, on the digits' train split (real handwritten digits that
ship with scikit-learn): `loss`/`el2n` (a cross-fitted proxy of sound accuracy, hard-first
top-k after pruning the hardest), and that the seed changes what every seeded method keeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpudesk.selection import models
from gpudesk.selection.cache import SelectionCache
from gpudesk.selection.fingerprint import fingerprint
from gpudesk.selection.prepass import prepare
from gpudesk.selection.preset_names import Preset
from gpudesk.selection.presets import class_quotas, keep_count
from gpudesk.workloads.data import make_digits

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_selection_methods")


@pytest.fixture(scope="module")
def train() -> tuple[np.ndarray, np.ndarray, str]:
    """(inputs float32 [n, 64], labels, fingerprint) of the digits' train split."""
    data = make_digits(split="train")
    return data.images, data.labels, fingerprint(data)


# ------------------------------------------------------------------ loss and el2n
def test_hard_first_ordering_is_top_k_after_pruning_the_hardest() -> None:
    from gpudesk.selection.scoring import PRUNE_HARDEST, hard_first_ordering

    scores = np.arange(1000, dtype=np.float64)  # sample i has score i: 999 is the hardest
    order = hard_first_ordering(scores, seed=0)
    pruned = round(1000 * PRUNE_HARDEST)
    kept = 1000 - pruned
    # the hardest after the pruned ones come first, in score order ...
    assert order[:kept].tolist() == list(range(kept - 1, -1, -1))
    # ... and the pruned hardest last, the very hardest at the very end
    assert order[kept:].tolist() == list(range(kept, 1000))
    # equal scores: a seeded order, not the samples' order
    ties = hard_first_ordering(np.zeros(50), seed=0)
    assert sorted(ties.tolist()) == list(range(50)) and ties.tolist() != list(range(50))
    assert np.array_equal(ties, hard_first_ordering(np.zeros(50), seed=0))


@pytest.mark.parametrize(("shape", "kind"), [((64,), "mlp"), ((8, 8), "cnn")])
def test_the_proxy_follows_the_samples_shape(train, shape: tuple[int, ...], kind: str) -> None:
    from gpudesk.selection.scoring import proxy_outputs, sample_scores, train_proxy

    inputs, labels, _ = train
    proxy = train_proxy(inputs, labels, shape, seed=2, rows=np.arange(300))
    assert models.model_kind(shape) == kind
    assert isinstance(proxy.model, models.small_cnn_class()) == (kind == "cnn")
    embeddings, probabilities = proxy_outputs(proxy, inputs[:100])
    width = models.CNN_HIDDEN if kind == "cnn" else models.MLP_HIDDEN
    assert embeddings.shape == (100, width) and embeddings.dtype == np.float32
    assert probabilities.shape == (100, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    # el2n is the distance of those probabilities from the one-hot labels
    el2n, right = sample_scores(proxy, inputs[:100], labels[:100], "el2n")
    onehot = np.eye(10, dtype=np.float32)[labels[:100]]
    assert np.allclose(el2n, np.linalg.norm(probabilities - onehot, axis=1), atol=1e-5)
    assert np.array_equal(right, probabilities.argmax(axis=1) == labels[:100])


@pytest.mark.timeout(300)
def test_el2n_proxy_is_sound_and_its_pruned_hardest_are_the_mislabelled(train) -> None:
    from gpudesk.selection.scoring import PRUNE_HARDEST, hard_first_ordering, proxy_scores

    inputs, labels, _ = train
    rng = np.random.default_rng(5)
    flipped = rng.choice(len(labels), 20, replace=False)
    noisy = labels.copy()
    noisy[flipped] = (noisy[flipped] + rng.integers(1, 10, len(flipped))) % 10
    scores = proxy_scores(inputs, noisy, "el2n", seed=0, shape=(64,))
    # held-out accuracy of the proxies (against the noisy labels: 20 of 1,388 are wrong)
    assert scores.proxy_accuracy is not None and scores.proxy_accuracy >= 0.9
    order = hard_first_ordering(scores.values, seed=0)
    pruned = round(len(labels) * PRUNE_HARDEST)
    assert set(flipped.tolist()) <= set(order[-pruned:].tolist())


@pytest.mark.slow(12)
@pytest.mark.timeout(300)
def test_loss_and_el2n_presets_are_top_k_report_accuracy_and_are_cached(
    train, tmp_path: Path
) -> None:
    from gpudesk.selection.scoring import hard_first_ordering, proxy_scores

    inputs, labels, digest = train
    cache = SelectionCache(tmp_path / "sel")
    for method in ("loss", "el2n"):
        chosen = prepare(Preset(method, 25), labels, digest, cache, seed=3, inputs=inputs)
        accuracy = chosen.notes["proxy_accuracy"]
        assert isinstance(accuracy, float) and 0.9 <= accuracy <= 1.0
        scores = proxy_scores(inputs, labels, method, seed=3, shape=(64,))
        assert scores.proxy_accuracy == accuracy
        order = hard_first_ordering(scores.values, seed=3)
        assert np.array_equal(chosen.indices, np.sort(order[: keep_count(len(labels), 25)]))
        entry = cache.load(chosen.key)
        assert entry is not None and entry.proxy is not None
        assert entry.proxy.startswith(models.model_name((64,), 10))
        again = prepare(Preset(method, 10, per_class=True), labels, digest, cache, 3, inputs=inputs)
        assert again.reused and again.notes == chosen.notes
        counts = dict(zip(*np.unique(labels[again.indices], return_counts=True), strict=True))
        assert counts == class_quotas(labels, keep_count(len(labels), 10))


# ------------------------------------------------------------------ the seed
@pytest.mark.slow(10)
@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", ["random", "stratified", "loss", "el2n", "coverage", "dedup"])
def test_two_seeds_keep_different_samples(train, tmp_path: Path, method: str) -> None:
    inputs, labels, digest = train
    cache = SelectionCache(tmp_path / "sel")
    for per_class in (False, True) if method not in ("random", "stratified") else (False,):
        preset = Preset(method, 25, per_class)
        kept = [
            set(prepare(preset, labels, digest, cache, seed, inputs=inputs).indices)
            for seed in (0, 1)
        ]
        assert kept[0] != kept[1], preset.name
        assert len(kept[0]) == len(kept[1]) == keep_count(len(labels), 25)


def test_the_coverage_start_alone_changes_the_kept_set(train) -> None:
    """The same embeddings, two seeds: farthest-point traversal from another start keeps
    another set (not merely another order of one set)."""
    from gpudesk.selection.coverage import coverage_ordering
    from gpudesk.selection.scoring import proxy_outputs, train_proxy

    inputs, labels, _ = train
    embeddings = proxy_outputs(train_proxy(inputs, labels, (64,), seed=0), inputs)[0]
    size = keep_count(len(labels), 25)
    first, second = (set(coverage_ordering(embeddings, seed).order[:size]) for seed in (0, 1))
    assert first != second


# ------------------------------------------------------------------ dedup
def noisy_copies(
    inputs: np.ndarray, count: int, sd: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(the inputs with `count` noisy copies appended, which sample each copy copies): Gaussian
    pixel noise of `sd` (pixels are in [0, 1]), clipped to [0, 1]."""
    rng = np.random.default_rng(seed)
    sources = rng.choice(len(inputs), count, replace=False)
    noise = rng.normal(0.0, sd, inputs[sources].shape).astype(np.float32)
    copies = np.clip(inputs[sources] + noise, 0.0, 1.0)
    return np.concatenate([inputs, copies]), sources


def test_dedup_finds_injected_noisy_copies_with_few_false_positives(train) -> None:
    from gpudesk.selection.dedup import near_duplicates

    inputs, _, _ = train
    n = len(inputs)
    plain = near_duplicates(inputs)
    # 50 copies with pixel noise of sd 2 % of the range
    data, sources = noisy_copies(inputs, 50, 0.02, seed=1)
    pairs = near_duplicates(data)
    groups: dict[int, int] = {}  # each flagged sample -> the sample kept for its group
    for duplicate, kept in pairs.tolist():
        groups[duplicate] = kept
    for copy, source in enumerate(sources.tolist(), start=n):
        # the copy and its source end up in one group (whichever of them comes first)
        root_copy, root_source = groups.get(copy, copy), groups.get(source, source)
        assert root_copy == root_source, (copy, source)
    involved = set(range(n, n + 50)) | set(sources.tolist())
    false = [pair for pair in pairs.tolist() if not set(pair) & involved]
    assert len(false) <= len(plain) <= 2  # only what the plain split has itself
    assert len(pairs) <= 50 + len(plain)


def test_dedup_ordering_is_random_with_the_near_duplicates_last(train, tmp_path: Path) -> None:
    from gpudesk.selection.dedup import dedup
    from gpudesk.selection.presets import random_ordering

    inputs, _, _ = train
    data, _ = noisy_copies(inputs, 30, 0.01, seed=2)
    result = dedup(data, seed=4)
    flagged = result.pairs[:, 0]
    assert len(flagged) >= 30 and len(set(flagged.tolist())) == len(flagged)
    tail = result.order[len(data) - len(flagged) :]
    assert set(tail.tolist()) == set(flagged.tolist())
    # the rest is random-P's permutation at the same seed, the duplicates taken out
    permutation = random_ordering(len(data), 4)
    rest = permutation[~np.isin(permutation, flagged)]
    assert np.array_equal(result.order[: len(rest)], rest)
    # so without near-duplicates, dedup-25 keeps exactly what random-25 keeps
    unique = np.delete(inputs, np.unique(dedup(inputs, 0).pairs[:, 0]), axis=0)
    data_fingerprint = f"fp-unique-{len(unique)}"
    cache = SelectionCache(tmp_path / "sel")
    no_labels = np.zeros(len(unique), dtype=np.int64)
    plain = prepare(Preset("dedup", 25), no_labels, data_fingerprint, cache, 4, inputs=unique)
    rand = prepare(Preset("random", 25), no_labels, data_fingerprint, cache, 4)
    assert plain.notes == {"near_duplicates": 0} and np.array_equal(plain.indices, rand.indices)


def test_dedup_lists_its_pairs_in_the_cache_and_the_selection(train, tmp_path: Path) -> None:
    from gpudesk.selection.apply import select

    inputs, labels, _ = train
    data, sources = noisy_copies(inputs, 10, 0.0, seed=3)  # exact copies
    dataset = [
        (data[i], int(np.concatenate([labels, labels[sources]])[i])) for i in range(len(data))
    ]
    cache = SelectionCache(tmp_path / "sel")
    chosen = select(dataset, "dedup-25", cache, seed=0)
    assert chosen.duplicates is not None and chosen.selection is not None
    # as positions in the dataset: each copy is paired with its source (or the other way)
    pairs = {tuple(sorted(pair)) for pair in chosen.duplicates.tolist()}
    for copy, source in enumerate(sources.tolist(), start=len(inputs)):
        assert (source, copy) in pairs
    assert chosen.selection.notes["near_duplicates"] == len(chosen.duplicates)
    entry = cache.load(chosen.selection.key)
    assert entry is not None and entry.duplicates is not None and entry.proxy is None
    assert np.array_equal(entry.duplicates, chosen.selection.duplicates)
    # no kept sample is a near-duplicate at 25 %
    assert not set(chosen.duplicates[:, 0].tolist()) & set(chosen.indices.tolist())
    # a damaged pair list is caught like any other array
    (tmp_path / "sel" / entry.key / "duplicates.npy").write_bytes(b"not an array")
    assert cache.load(entry.key) is None and "damaged" in cache.problems[0]


def test_dedup_works_on_unlabelled_samples_and_refuses_text(tmp_path: Path) -> None:
    from gpudesk.selection.apply import select
    from gpudesk.selection.preset_names import PresetError

    cache = SelectionCache(tmp_path / "sel")
    rng = np.random.default_rng(0)
    vectors = [rng.normal(size=16).astype(np.float32) for _ in range(40)]
    vectors.append(vectors[3] + np.float32(1e-3))
    chosen = select(vectors, "dedup-50", cache)
    assert chosen.duplicates is not None and chosen.duplicates.tolist() == [[40, 3]]
    with pytest.raises(PresetError, match="reads each input as numbers"):
        select([f"text {i}" for i in range(10)], "dedup-50", cache)


def test_dedup_in_clusters_finds_what_comparing_every_pair_finds(train) -> None:
    """Above `cluster_size` samples, pairs are compared within k-means clusters (and each
    sample's second-nearest one), a block of rows at a time; on the digits with noisy copies
    that finds the same near-duplicates as comparing every pair."""
    from gpudesk.selection.dedup import near_duplicates

    inputs, _, _ = train
    data, _ = noisy_copies(inputs, 40, 0.01, seed=6)
    every_pair = near_duplicates(data)
    clustered = near_duplicates(data, cluster_size=200)  # k = ceil(1428 / 200) = 8 clusters
    assert len(every_pair) >= 40
    assert set(clustered[:, 0].tolist()) == set(every_pair[:, 0].tolist())
