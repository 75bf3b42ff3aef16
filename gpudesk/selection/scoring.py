"""The proxy model every scored preset shares, and the `loss-P` and `el2n-P` scores.

The proxy is a small MLP (flattened samples -> `PROXY_HIDDEN` ReLU units -> classes), trained by
`train_proxy` on a seeded random `PROXY_FRACTION` of the data for `PROXY_EPOCHS` epochs.
`proxy_outputs` runs it once over any samples and gives the penultimate activations (the
embedding `dedup` uses, and half of `less`'s gradient features) and the class probabilities.

The two scores of this module, one forward pass over every sample:

- `loss`: the proxy's cross-entropy on the sample;
- `el2n`: the L2 norm of softmax(proxy(x)) - onehot(y) (Paul et al., 2021).

High scores are hard examples. Keeping only the top of the ranking collapses onto outliers and
mislabelled samples at small fractions, so the ordering mixes difficulty with coverage
(in the spirit of coverage-centric selection, Zheng et al., 2023): the hardest `PRUNE_HARDEST`
of the data goes last, and the rest is ordered round-robin over equal-size score bins, hardest
first within each bin. Any prefix of the ordering is then a spread-out subset, which is what lets
one cached ordering serve every percent. (The pre-pass also keeps the labels, so a subset is
taken with per-class quotas: see `presets.take`.)

Cost: the proxy trains on `PROXY_FRACTION` of the data for `PROXY_EPOCHS` epochs, then one
forward pass over everything, all on the CPU: well under a second for digits (1,797 samples),
linear in the dataset size. torch is imported inside the functions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

PROXY_FRACTION = 0.2
PROXY_EPOCHS = 5
PROXY_HIDDEN = 128
PROXY_BATCH = 64
PROXY_LR = 0.05
PRUNE_HARDEST = 0.05
SCORE_BINS = 10
PROXY_NAME = f"mlp{PROXY_HIDDEN}-f{PROXY_FRACTION}-e{PROXY_EPOCHS}"


@dataclass(frozen=True)
class Scores:
    values: np.ndarray  # one per sample, higher = harder
    method: str


def features(dataset: Any) -> tuple[np.ndarray, np.ndarray]:
    """(float32 [n, d] flattened inputs scaled to about [0, 1], int64 labels)."""
    inputs, labels = [], []
    for i in range(len(dataset)):
        sample, label = dataset[i][0], dataset[i][1]
        if hasattr(sample, "detach"):
            sample = sample.detach().cpu().numpy()
        array = np.asarray(sample)
        scale = 255.0 if array.dtype == np.uint8 else 1.0
        inputs.append(array.astype(np.float32).reshape(-1) / scale)
        labels.append(int(label))
    return np.stack(inputs), np.asarray(labels, dtype=np.int64)


@dataclass(frozen=True)
class Proxy:
    """A trained proxy: the torch model (Linear, ReLU, Linear) and what it was trained on."""

    model: Any  # torch.nn.Sequential; typed loosely so this module imports without torch
    classes: int
    seed: int


def train_proxy(inputs: np.ndarray, labels: np.ndarray, seed: int) -> Proxy:
    """Train the proxy on a seeded random `PROXY_FRACTION` of (inputs, labels)."""
    import torch
    from torch import nn

    inputs = np.ascontiguousarray(inputs, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    torch.manual_seed(seed)
    generator = np.random.default_rng(seed)
    n, classes = len(labels), int(labels.max()) + 1
    part = generator.permutation(n)[: max(classes, round(n * PROXY_FRACTION))]
    x, y = torch.from_numpy(inputs), torch.from_numpy(labels)
    model = nn.Sequential(
        nn.Linear(inputs.shape[1], PROXY_HIDDEN), nn.ReLU(), nn.Linear(PROXY_HIDDEN, classes)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=PROXY_LR, momentum=0.9)
    for _ in range(PROXY_EPOCHS):
        for start in range(0, len(part), PROXY_BATCH):
            batch = torch.from_numpy(part[start : start + PROXY_BATCH])
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    model.eval()
    return Proxy(model=model, classes=classes, seed=seed)


def _forward(proxy: Proxy, inputs: np.ndarray) -> tuple[Any, Any]:
    """(penultimate ReLU activations, logits) as torch tensors, without gradients."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.float32))
    first, relu, last = proxy.model
    with torch.no_grad():
        hidden = relu(first(x))
        return hidden, last(hidden)


def proxy_outputs(proxy: Proxy, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings float32 [n, PROXY_HIDDEN]: the penultimate ReLU activations,
    probabilities float32 [n, classes]: the softmax of the logits)."""
    import torch

    hidden, logits = _forward(proxy, inputs)
    probabilities = torch.softmax(logits, dim=1)
    return (
        hidden.numpy().astype(np.float32, copy=False),
        probabilities.numpy().astype(np.float32, copy=False),
    )


def proxy_scores(inputs: np.ndarray, labels: np.ndarray, method: str, seed: int) -> Scores:
    """Train the proxy on a random part of the data, then score every sample."""
    import torch
    from torch import nn

    if method not in ("loss", "el2n"):
        raise ValueError(f"no proxy score called {method!r}")
    labels = np.asarray(labels, dtype=np.int64)
    proxy = train_proxy(inputs, labels, seed)
    _, logits = _forward(proxy, inputs)
    y = torch.from_numpy(labels)
    with torch.no_grad():
        if method == "loss":
            values = nn.functional.cross_entropy(logits, y, reduction="none")
        else:
            onehot = nn.functional.one_hot(y, proxy.classes).float()
            values = (torch.softmax(logits, dim=1) - onehot).norm(dim=1)
    return Scores(values.numpy().astype(np.float64), method)


def coverage_ordering(scores: np.ndarray, seed: int) -> np.ndarray:
    """Hardest-but-not-outliers first, spread over the score range (see the module doc)."""
    n = len(scores)
    # ties broken by a seeded permutation, so equal scores do not follow sample order
    tie = np.random.default_rng(seed).permutation(n)
    by_score = np.lexsort((tie, -scores))  # hardest first
    pruned = round(n * PRUNE_HARDEST)
    outliers, kept = by_score[:pruned], by_score[pruned:]
    bins = [list(chunk) for chunk in np.array_split(kept, min(SCORE_BINS, max(1, len(kept))))]
    ordering: list[int] = []
    position = 0
    while len(ordering) < len(kept):
        for chunk in bins:
            if position < len(chunk):
                ordering.append(int(chunk[position]))
        position += 1
    return np.asarray(ordering + [int(i) for i in outliers], dtype=np.int64)
