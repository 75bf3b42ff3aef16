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
from gpudesk.selection.presets import Preset, class_quotas, keep_count
from gpudesk.workloads.data import make_digits


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
@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", ["random", "stratified", "loss", "el2n"])
def test_two_seeds_keep_different_samples(train, tmp_path: Path, method: str) -> None:
    inputs, labels, digest = train
    cache = SelectionCache(tmp_path / "sel")
    kept = [
        set(prepare(Preset(method, 25), labels, digest, cache, seed, inputs=inputs).indices)
        for seed in (0, 1)
    ]
    assert kept[0] != kept[1] and len(kept[0]) == len(kept[1]) == keep_count(len(labels), 25)
