"""The `less-P` preset: rank training samples by how much their gradient looks like a target
set's, in the spirit of LESS (Xia et al., 2024), on the shared proxy instead of an LLM.

What it computes:

1. Train a proxy (`scoring.train_proxy`: `models.build_model` for the samples' shape, seeded) on
   the training data only; the target set never trains it.
2. Gradient features of the proxy's last layer, per sample: for softmax cross-entropy the
   gradient with respect to the last weights is (p - onehot(y)) ⊗ h and with respect to the bias
   p - onehot(y), where h is the penultimate ReLU activation and p the class probabilities. The
   C × (H + 1) values are flattened, projected to `PROJECTION_DIM` dimensions with a seeded
   Gaussian matrix (Johnson-Lindenstrauss: inner products survive up to a small distortion) and
   L2-normalised. The same for every target sample, under the same projection.
3. Score each training sample by the maximum, over the target's classes c, of its mean cosine
   similarity to the target samples of class c (LESS's max over target subtasks).
4. Order by the score, most target-like first (top-k; equal scores in a seeded order). The
   pre-pass keeps the labels, so `less-P-perclass` can take per-class quotas.

How well it does (honestly): on sklearn's digits, where the target is a sample of the same
distribution, plain top-k by this score reached 0.877 validation accuracy and the coverage
ordering 0.933, both below random-25 (0.947): gradient similarity to a small target pays off
when the target differs from the bulk of the training data (a task or domain to specialise to),
not as a general-purpose pruner. (Measured with an earlier MLP proxy and ordering.)

Cost: the proxy (as for `loss`/`el2n`), one forward pass over the training and target samples,
and a projection of C × (H + 1) → `PROJECTION_DIM` per sample: O(n · C · H · PROJECTION_DIM),
done in chunks of `CHUNK` samples so memory stays O(CHUNK · C · H). Well under a second for
digits; the projection matrix is C · (H + 1) × 256 float32 (1.3 MB for 10 classes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudesk.selection import models
from gpudesk.selection.presets import PresetError
from gpudesk.selection.scoring import Proxy, proxy_outputs, train_proxy

PROJECTION_DIM = 256
PROJECTION_STREAM = 0x1E55  # mixed with the seed, so the projection is not the proxy's stream
CHUNK = 4096


@dataclass(frozen=True)
class Target:
    """The samples a `less` selection should serve: features like `scoring.features` gives,
    integer labels, and the target's content fingerprint (part of the cache key)."""

    inputs: np.ndarray
    labels: np.ndarray
    fingerprint: str


def less(
    inputs: np.ndarray, labels: np.ndarray, target: Target, seed: int, shape: tuple[int, ...]
) -> tuple[np.ndarray, dict[str, Any]]:
    """(the `less` ordering of the training samples, most wanted first: the top-k order; its
    notes). See the module doc."""
    scores = less_scores(inputs, labels, target, seed, shape)
    tie = np.random.default_rng(seed).permutation(len(scores))
    return np.lexsort((tie, -scores)).astype(np.int64), {}


def key_params() -> dict[str, Any]:
    """The recipe constants a `less` cache key names (a change is a new entry)."""
    return {"recipe": "last-layer-gradient-top-k", "projection": PROJECTION_DIM}


def less_scores(
    inputs: np.ndarray, labels: np.ndarray, target: Target, seed: int, shape: tuple[int, ...]
) -> np.ndarray:
    """float64 [n]: each training sample's best per-class mean cosine similarity to the
    target's gradient features."""
    labels = np.asarray(labels, dtype=np.int64)
    inputs = np.ascontiguousarray(inputs, dtype=np.float32).reshape(len(labels), -1)
    target_inputs, target_labels = _checked_target(target, inputs.shape[1])
    proxy = train_proxy(inputs, labels, shape, seed)
    if int(target_labels.max()) >= proxy.classes:
        raise PresetError(
            f"the selection target has label {int(target_labels.max())}; the "
            f"training data has labels 0..{proxy.classes - 1} only"
        )
    hidden = models.head(proxy.model).in_features
    projection = projection_matrix(proxy.classes * (hidden + 1), seed)
    train = gradient_features(proxy, inputs, labels, projection)
    aim = gradient_features(proxy, target_inputs, target_labels, projection)
    # the mean cosine similarity to a class's targets is the dot product with their mean
    means = np.stack([aim[target_labels == c].mean(axis=0) for c in np.unique(target_labels)])
    return (train @ means.T).max(axis=1).astype(np.float64)


def projection_matrix(rows: int, seed: int) -> np.ndarray:
    """A seeded Gaussian [rows, PROJECTION_DIM] float32 matrix with entries N(0, 1/dim)."""
    rng = np.random.default_rng((seed, PROJECTION_STREAM))
    scale = 1.0 / math.sqrt(PROJECTION_DIM)
    return (rng.standard_normal((rows, PROJECTION_DIM)) * scale).astype(np.float32)


def gradient_features(
    proxy: Proxy, inputs: np.ndarray, labels: np.ndarray, projection: np.ndarray
) -> np.ndarray:
    """float32 [n, PROJECTION_DIM]: the projected, L2-normalised gradient of each sample's
    cross-entropy with respect to the proxy's last layer (weights and bias)."""
    n = len(labels)
    features = np.empty((n, projection.shape[1]), dtype=np.float32)
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        hidden, probabilities = proxy_outputs(proxy, inputs[start:stop])
        error = probabilities.copy()
        error[np.arange(stop - start), labels[start:stop]] -= 1.0  # p - onehot(y)
        extended = np.concatenate([hidden, np.ones((stop - start, 1), np.float32)], axis=1)
        gradient = (error[:, :, None] * extended[:, None, :]).reshape(stop - start, -1)
        features[start:stop] = gradient @ projection
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return np.divide(features, norms, out=np.zeros_like(features), where=norms > 0)


def _checked_target(target: Target, width: int) -> tuple[np.ndarray, np.ndarray]:
    labels = np.asarray(target.labels, dtype=np.int64).reshape(-1)
    if len(labels) == 0:
        raise PresetError("the selection target is empty: give it at least one sample")
    if len(target.inputs) != len(labels):
        raise PresetError(
            f"the selection target has {len(target.inputs)} samples and {len(labels)} labels"
        )
    inputs = np.ascontiguousarray(target.inputs, dtype=np.float32).reshape(len(labels), -1)
    if inputs.shape[1] != width:
        raise PresetError(
            f"the selection target's samples have {inputs.shape[1]} features, "
            f"the dataset's have {width}"
        )
    if int(labels.min()) < 0:
        raise PresetError("the selection target has a negative label")
    return inputs, labels
