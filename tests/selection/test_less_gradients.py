"""The mechanics of `less-P`'s gradient features (gpudesk.selection.gradients): per-sample
gradients against a plain autograd loop, the Adam transform against LESS's formula by hand, and
the seeded Rademacher projection. Real torch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpudesk import optimizers
from gpudesk.selection import gradients
from gpudesk.selection.models import build_model

LESS_DIM = 8192  # LESS's default projection dimension (its README)


def autograd_loop(model, x, y) -> np.ndarray:
    """Each sample's gradient by a plain backward pass on that sample alone."""
    import torch

    rows = []
    for i in range(len(y)):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone())
    return torch.stack(rows).numpy()


# ------------------------------------------------------------------ per-sample gradients
@pytest.mark.parametrize(
    ("shape", "parameters"), [((64,), 64 * 128 + 128 + 128 * 10 + 10), ((1, 28, 28), 26_698)]
)
def test_per_sample_gradients_equal_a_loop_of_autograd(shape, parameters) -> None:
    import torch

    model = build_model(shape, 10, seed=3)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((5, math.prod(shape)), dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, 10, 5))
    params = gradients.trainable_parameters(model)
    batched = gradients.flattened(gradients.per_sample_gradients(model, params, x, y)).numpy()
    assert batched.shape == (5, parameters) == (5, gradients.parameter_count(model))
    looped = autograd_loop(model, x, y)
    assert np.allclose(batched, looped, atol=1e-6, rtol=1e-4)
    # samples are independent: not a batch mean repeated
    assert not np.allclose(batched[0], batched[1])


def test_gradients_are_taken_at_the_given_parameters_not_the_models() -> None:
    import torch

    model = build_model((64,), 10, seed=0)
    x = torch.rand(3, 64)
    y = torch.tensor([1, 2, 3])
    other = build_model((64,), 10, seed=1)
    at_other = gradients.per_sample_gradients(model, gradients.trainable_parameters(other), x, y)
    assert np.allclose(gradients.flattened(at_other).numpy(), autograd_loop(other, x, y), atol=1e-6)


# ------------------------------------------------------------------ Adam
def test_adam_transform_is_lesss_formula() -> None:
    import torch

    rng = np.random.default_rng(1)
    g = rng.standard_normal((4, 50)).astype(np.float32)
    m = rng.standard_normal(50).astype(np.float32) * 0.1
    v = rng.random(50).astype(np.float32) * 0.01
    got = gradients.adam_preconditioned(
        torch.from_numpy(g.copy()), torch.from_numpy(m), torch.from_numpy(v)
    )
    # LESS's obtain_gradients_with_adam: beta1 0.9, beta2 0.999, eps 1e-8 inside the square
    # root, no bias correction
    first = 0.9 * m + 0.1 * g
    second = 0.999 * v + 0.001 * g.astype(np.float64) ** 2
    expected = first / np.sqrt(second + 1e-8)
    assert np.allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_flat_moments_are_the_optimizers_state_in_parameter_order() -> None:
    import torch

    model = build_model((64,), 10, seed=0)
    params = list(model.parameters())
    optimizer = optimizers.Adam(params, lr=1e-3)
    torch.nn.functional.cross_entropy(model(torch.rand(8, 64)), torch.arange(8)).backward()
    optimizer.step()
    first, second = gradients.flat_moments(optimizer)
    assert first.shape == second.shape == (gradients.parameter_count(model),)
    expected = torch.cat([optimizer.state[i]["exp_avg"].reshape(-1) for i in range(len(params))])
    assert torch.equal(first, expected)
    # after one step from zero: m = 0.1 g and v = 0.001 g^2 (torch stores them uncorrected)
    grads = torch.cat([p.grad.reshape(-1) for p in params])
    assert torch.allclose(first, 0.1 * grads) and torch.allclose(second, 0.001 * grads**2)


# ------------------------------------------------------------------ projection
def test_projection_is_seeded_rademacher_and_independent_of_chunking() -> None:
    import torch

    rows = 2_100  # not a multiple of the block size
    one = gradients.RademacherProjection(rows, 256, seed=5)
    values = torch.unique(one.block(0) * math.sqrt(256))
    assert values.tolist() == [-1.0, 1.0]
    assert 0.4 < (one.block(1) > 0).float().mean() < 0.6
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((3, rows)).astype(np.float32))
    whole = one.project(x)
    assert torch.equal(gradients.RademacherProjection(rows, 256, seed=5).project(x), whole)
    assert not torch.allclose(gradients.RademacherProjection(rows, 256, seed=6).project(x), whole)
    # projecting a vector part by part (one parameter at a time) is projecting it whole
    parts = torch.zeros_like(whole)
    for start, stop in [(0, 700), (700, 1000), (1000, rows)]:
        one.accumulate(parts, x[:, start:stop], start)
    assert torch.allclose(parts, whole, atol=1e-4)
    with pytest.raises(ValueError, match="outside"):
        one.accumulate(parts, x, 1)


def test_projection_to_lesss_dimension_roughly_preserves_inner_products() -> None:
    import torch

    rng = np.random.default_rng(3)
    a = rng.standard_normal((20, 3_000)).astype(np.float32)
    b = a + 0.7 * rng.standard_normal((20, 3_000)).astype(np.float32)  # correlated pairs
    projection = gradients.RademacherProjection(3_000, LESS_DIM, seed=0)
    pa, pb = (
        projection.project(torch.from_numpy(a)).numpy(),
        projection.project(torch.from_numpy(b)).numpy(),
    )
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    pcos = (pa * pb).sum(1) / np.linalg.norm(pa, axis=1) / np.linalg.norm(pb, axis=1)
    # Johnson-Lindenstrauss: the error of a cosine is about 1/sqrt(8192) = 0.011
    assert np.abs(pcos - cos).max() < 0.05
    assert np.allclose(np.linalg.norm(pa, axis=1) / np.linalg.norm(a, axis=1), 1.0, atol=0.05)


def test_projected_gradients_are_the_projection_of_the_adam_step_of_the_gradients() -> None:
    """The pre-pass's one-pass path (per parameter, per block of the projection, Adam applied
    block by block) equals the three steps done whole: gradients, Adam, then the projection;
    and its stage timings add up."""
    import torch

    model = build_model((1, 28, 28), 10, seed=2)
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.random((6, 784), dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, 10, 6))
    params = gradients.trainable_parameters(model)
    rows = gradients.parameter_count(model)
    m = torch.from_numpy(rng.standard_normal(rows).astype(np.float32) * 0.01)
    v = torch.from_numpy(rng.random(rows).astype(np.float32) * 1e-4)
    projection = gradients.RademacherProjection(rows, 256, seed=5)
    whole = gradients.flattened(gradients.per_sample_gradients(model, params, x, y))
    times = gradients.StageTimes()
    got = gradients.projected_gradients(model, params, x, y, projection, (m, v), times)
    expected = projection.project(gradients.adam_preconditioned(whole.clone(), m, v))
    assert np.allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    plain = gradients.projected_gradients(model, params, x, y, projection)
    assert np.allclose(plain.numpy(), projection.project(whole).numpy(), rtol=1e-4, atol=1e-5)
    assert times.gradients > 0 and times.projection > 0
