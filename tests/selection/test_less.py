"""The LESS recipe of `less-P` (gpudesk.selection.targeted): the warm-up and its checkpoint
weights, the whole score against a brute-force recomputation, and the one result the preset
exists for: a target of two classes pulls those classes to the top. Real torch, real digits.
(The gradient features' mechanics: test_less_gradients.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_less_gradients import autograd_loop  # same folder: on sys.path under pytest

from gpudesk.selection import gradients
from gpudesk.selection.preset_names import PresetError
from gpudesk.selection.targeted import (
    PROJECTION_DIM,
    WARMUP_EPOCHS,
    WARMUP_LR,
    Target,
    checkpoint_weights,
    key_params,
    learning_rates,
    less,
    less_scores,
    warm_up,
)
from gpudesk.workloads.data import make_digits

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_less")


@pytest.fixture(scope="module")
def digits_train() -> tuple[np.ndarray, np.ndarray]:
    train = make_digits("train")
    return train.images, train.labels


@pytest.fixture
def narrow_projection(monkeypatch: pytest.MonkeyPatch) -> None:
    """LESS's random projection at 1,024 dimensions instead of the recipe's 8,192, for tests of
    what does not depend on its width (seeds, determinism, cache keys, which target): at 8,192
    the projection is most of a pre-pass's time. The recipe at its own width:
    `test_a_target_of_3s_and_8s_pulls_3s_and_8s_to_the_top` and the brute-force check above."""
    from gpudesk.selection import targeted

    monkeypatch.setattr(targeted, "PROJECTION_DIM", 1024)


def three_and_eight_target() -> Target:
    """The digits' target split, only its 3s and 8s: a task narrower than the training data."""
    target = make_digits("target")
    keep = np.isin(target.labels, [3, 8])
    return Target(target.images[keep], target.labels[keep], "digits-target-3-8")


# ------------------------------------------------------------------ warm-up and weights
def test_learning_rates_follow_the_linear_schedule_and_weight_the_checkpoints() -> None:
    rates = learning_rates(12)
    # ceil(3 % of 12) = 1 warm-up step from 0, then linear decay: (12 - s) / 11
    assert rates[0] == 0.0 and rates[1] == pytest.approx(WARMUP_LR)
    assert np.allclose(rates[1:], WARMUP_LR * (12 - np.arange(1, 12)) / 11)
    means = [float(rates[3 * e : 3 * e + 3].mean()) for e in range(4)]
    weights = checkpoint_weights(means)
    assert sum(weights) == pytest.approx(1.0)
    assert np.allclose(weights, np.array(means) / sum(means))
    assert checkpoint_weights([0.0, 0.0]) == [0.5, 0.5]


def test_warm_up_trains_on_a_seeded_part_and_keeps_a_checkpoint_per_epoch(digits_train) -> None:
    import torch

    images, labels = digits_train
    first = warm_up(images, labels, 10, seed=0, shape=(64,))
    assert len(first.checkpoints) == WARMUP_EPOCHS
    assert len(first.part) == round(0.05 * len(labels))
    assert first.steps == WARMUP_EPOCHS * math.ceil(len(first.part) / 32)
    names = list(first.checkpoints[0].params)
    for before, after in zip(first.checkpoints, first.checkpoints[1:], strict=False):
        assert not torch.equal(before.params[names[0]], after.params[names[0]])
        assert not torch.equal(before.exp_avg_sq, after.exp_avg_sq)
    assert all(c.exp_avg_sq.min() >= 0 for c in first.checkpoints)
    again = warm_up(images, labels, 10, seed=0, shape=(64,))
    assert np.array_equal(again.part, first.part)
    assert torch.equal(again.checkpoints[-1].exp_avg, first.checkpoints[-1].exp_avg)
    other = warm_up(images, labels, 10, seed=1, shape=(64,))
    assert not np.array_equal(other.part, first.part)


# ------------------------------------------------------------------ the score
def brute_force_scores(images, labels, target: Target, seed: int, shape) -> np.ndarray:
    """The recipe written out plainly: a loop of autograd per sample, Adam by hand, the whole
    projection matrix, cosines averaged per target class, weighted over checkpoints, max."""
    import torch

    warmup = warm_up(images, labels, int(labels.max()) + 1, seed, shape)
    model = warmup.model
    rows = gradients.parameter_count(model)
    projection = gradients.RademacherProjection(rows, PROJECTION_DIM, seed)
    matrix = torch.cat([projection.block(j) for j in range(projection.blocks)]).double()
    weights = checkpoint_weights([c.mean_lr for c in warmup.checkpoints])
    classes = np.unique(target.labels)
    total = np.zeros((len(labels), len(classes)))
    for checkpoint, weight in zip(warmup.checkpoints, weights, strict=True):
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(checkpoint.params[name])
        g = autograd_loop(model, torch.from_numpy(images), torch.from_numpy(labels)).astype(
            np.float64
        )
        m, v = checkpoint.exp_avg.double().numpy(), checkpoint.exp_avg_sq.double().numpy()
        gamma = (0.9 * m + 0.1 * g) / np.sqrt(0.999 * v + 0.001 * g**2 + 1e-8)
        t = autograd_loop(model, torch.from_numpy(target.inputs), torch.from_numpy(target.labels))
        train = (torch.from_numpy(gamma) @ matrix).numpy()
        aim = (torch.from_numpy(t.astype(np.float64)) @ matrix).numpy()
        train /= np.linalg.norm(train, axis=1, keepdims=True)
        aim /= np.linalg.norm(aim, axis=1, keepdims=True)
        cosines = train @ aim.T
        for k, c in enumerate(classes):
            total[:, k] += weight * cosines[:, target.labels == c].mean(axis=1)
    return total.max(axis=1)


@pytest.mark.slow(17)
def test_the_score_is_the_recipe_computed_plainly(digits_train) -> None:
    images, labels = digits_train
    # 60 samples: the brute force's cost is per sample (a 60 x 9,610 by 9,610 x 8,192 product
    # in float64 per checkpoint); every sample is checked, and 60 take each path 120 did (one
    # gradient chunk, every projection block, the warm-up's 10 samples, one per class)
    images, labels = images[:60], labels[:60]
    spare = make_digits("target")
    target = Target(spare.images[:12], spare.labels[:12], "twelve")
    got = less_scores(images, labels, target, seed=4, shape=(64,))
    expected = brute_force_scores(images, labels, target, seed=4, shape=(64,))
    assert np.allclose(got.values, expected, atol=2e-4)
    assert got.notes["target_classes"] == sorted(set(spare.labels[:12].tolist()))


@pytest.mark.slow(8)
@pytest.mark.timeout(300)
def test_a_target_of_3s_and_8s_pulls_3s_and_8s_to_the_top(digits_train) -> None:
    images, labels = digits_train
    # the first 400 of the 1,388 samples: the projection (most of the cost, at the recipe's
    # 8,192) is per sample, and the pull does not depend on how many there are (25 % kept of
    # 400: 80 % 3s and 8s against 20 % in the data; of all 1,388: 78 % against 20 %)
    images, labels = images[:400], labels[:400]
    target = three_and_eight_target()
    order, notes = less(images, labels, target, seed=0, shape=(64,))
    assert sorted(order.tolist()) == list(range(len(labels)))
    kept = order[: round(0.25 * len(labels))]
    share = np.isin(labels, [3, 8]).mean()
    kept_share = np.isin(labels[kept], [3, 8]).mean()
    assert kept_share >= 2 * share, (kept_share, share)
    assert notes["target_classes"] == [3, 8] and notes["projection_dim"] == PROJECTION_DIM
    assert len(notes["checkpoint_weights"]) == WARMUP_EPOCHS
    assert set(notes["timings_s"]) == {"warmup", "gradients", "projection"}
    assert notes["warmup_samples"] == round(0.05 * len(labels))


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("narrow_projection")
def test_the_seed_changes_the_ordering_and_the_warm_up_ignores_the_target(digits_train) -> None:
    images, labels = digits_train
    images, labels = images[:200], labels[:200]
    target = three_and_eight_target()
    first, notes = less(images, labels, target, seed=0, shape=(64,))
    again, _ = less(images, labels, target, seed=0, shape=(64,))
    assert np.array_equal(first, again)
    other, _ = less(images, labels, target, seed=1, shape=(64,))
    assert not np.array_equal(first, other)
    spare = make_digits("target")
    _, other_target = less(images, labels, Target(spare.images, spare.labels, "all"), 0, (64,))
    assert other_target["warmup_accuracy"] == notes["warmup_accuracy"]
    assert other_target["target_classes"] == list(range(10))


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("narrow_projection")
def test_a_cnn_shaped_input_works() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((40, 784), dtype=np.float32)
    y = rng.integers(0, 10, 40)
    target = Target(rng.random((6, 784), dtype=np.float32), np.array([3, 3, 3, 8, 8, 8]), "t")
    order, notes = less(x, y, target, seed=0, shape=(1, 28, 28))
    assert sorted(order.tolist()) == list(range(40))
    assert notes["model"].startswith("cnn") and notes["parameters"] == 26_698
    import json

    json.dumps(notes)  # the cache stores the notes as JSON


def test_bad_input_is_one_clear_error() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((20, 64), dtype=np.float32), rng.integers(0, 5, 20)
    good = Target(x[:4], np.array([0, 1, 2, 3]), "t")
    with pytest.raises(PresetError, match="shape"):
        less(x, y, good, 0, (1, 28, 28))
    with pytest.raises(PresetError, match="label 7"):
        less(x, y, Target(x[:2], np.array([1, 7]), "t"), 0, (64,))
    with pytest.raises(PresetError, match="empty"):
        less(x, y, Target(x[:0], np.array([], dtype=np.int64), "t"), 0, (64,))
    with pytest.raises(PresetError, match="features"):
        less(x, y, Target(x[:2, :10], np.array([1, 2]), "t"), 0, (64,))


def test_the_key_names_every_constant_of_the_recipe() -> None:
    import json

    params = key_params()
    json.dumps(params)
    assert params["projection_dim"] == PROJECTION_DIM and params["warmup_epochs"] == WARMUP_EPOCHS
    assert params["warmup_fraction"] == 0.05 and params["adam"] == [0.9, 0.999, 1e-8]
