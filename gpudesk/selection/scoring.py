"""The proxy models the scored presets train, and the `loss-P` and `el2n-P` orderings.

**The proxy.** `models.build_model(shape, classes, seed)`: an MLP for flat samples, a small CNN
for image-shaped ones, so the proxy reads the data the way the workload's model does.
`train_proxy` trains one with Adam on some rows of the data for `PROXY_EPOCHS` epochs (at most
`PROXY_MAX_STEPS` steps); `proxy_outputs` runs it over any samples and gives the penultimate
activations (`models.embed`) and the class probabilities.

**`loss-P` and `el2n-P`** follow Paul et al. (2021, "Deep Learning on a Data Diet"): a
difficulty score of each training sample from a model a few epochs into training, averaged over
independent initialisations, then the hardest samples first. Here:

1. The samples are split into `PROXY_FOLDS` seeded folds, and one proxy is trained per fold on
   the other folds (each with its own seeded initialisation and batch order). Every sample is
   therefore trained on by `PROXY_FOLDS - 1` proxies and held out of exactly one.
2. A sample's score is the mean, over the proxies that trained on it, of its cross-entropy
   (`loss`) or of its EL2N, ‖softmax(f(x)) − onehot(y)‖₂ (`el2n`, Paul et al. §2): the score
   of a training sample under models that learned from it, as in the paper, over
   `PROXY_FOLDS - 1` initialisations.
3. The proxies' accuracy is measured on the fold each one held out: every sample is predicted
   once, by the one proxy that never saw it (`proxy_accuracy`, in the selection's notes). The
   check costs no extra training and touches no score: a score comes only from proxies that
   trained on its sample, and every sample has the same number of them.
4. The ordering is hardest first (the top-k of the score), except that the hardest
   `PRUNE_HARDEST` of the data goes last (least hard of them first), so any prefix is "top-k
   after pruning the very hardest": the highest scores include the noisy and ambiguous
   samples, and at high pruning rates keeping them hurts (Paul et al., 2021; Sorscher et al.,
   2022, "Beyond neural scaling laws"; Zheng et al., 2023, CCS, whose "hard cutoff" β prunes
   them first; Fayyaz et al., 2022, "BERT on a Data Diet", pruning a small share of the
   highest EL2N scores).

Cost on the digits' train split (1,388 samples, an MLP): 5 proxies × 20 epochs of ~1,110
samples, 1.7 s on one CPU thread (`PROXY_THREADS`) of a loaded 2-core machine. On a large
dataset each proxy stops at `PROXY_MAX_STEPS` steps: for 60,000 images of 28x28 (a CNN), one
proxy's 2,000 steps took 45 s there and a forward pass over all 12 s, so about 5 minutes in all.
Everything runs on the CPU, so a cached ordering is reproducible; torch is imported inside the
functions only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudesk import optimizers
from gpudesk.selection import models

# The proxy's training recipe (one constant each, part of every scored cache key):
PROXY_FOLDS = 5  # assumption: 4 initialisations per score (Paul et al. average 10) + a held-out
# fold per proxy for its accuracy, at 5 trainings' cost
PROXY_EPOCHS = 20  # Paul et al. (2021) score EL2N at epoch 20 (of 200, on CIFAR-10)
PROXY_MAX_STEPS = 2_000  # assumption: a cap for large datasets (MNIST: ~2.7 epochs of 48,000);
# Coleman et al. (2020, "Selection via Proxy") rank data well with proxies trained far less
PROXY_BATCH = 64  # assumption (a common small-model batch size)
PROXY_LR = 1e-3  # Adam's default step size (Kingma & Ba, 2015, Algorithm 1)
# torch intra-op threads while a proxy trains or runs: the proxies are too small to gain from
# more, and on a shared machine they lose badly (measured on a loaded 2-core machine: the digits'
# loss pre-pass took 12 s with 1 thread and 88 s with 2)
PROXY_THREADS = 1
FORWARD_CHUNK = 1024  # samples per forward pass (a CNN on 28x28: ~25 KB per sample and layer)
PROXY_STREAM = 0x5C0E  # mixed with the seed: the proxies' random streams
# assumption: between CCS's β = 0 at low pruning rates and β = 0.3 at 90 % pruning on CIFAR-10
# (Zheng et al., 2023, its README's example); one cached ordering serves every percent
PRUNE_HARDEST = 0.10
SCORE_METHODS = ("loss", "el2n")


def proxy_recipe() -> dict[str, Any]:
    """The proxy training's constants, for the cache key of every method that trains one with
    `train_proxy` (loss, el2n, coverage): a change to them is a new entry for each."""
    return {
        "epochs": PROXY_EPOCHS,
        "max_steps": PROXY_MAX_STEPS,
        "batch": PROXY_BATCH,
        "optimizer": f"adam-{PROXY_LR:g}",
    }


def key_params() -> dict[str, Any]:
    """The recipe constants a `loss`/`el2n` cache key names (a change is a new entry)."""
    return {
        "recipe": "crossfit-hard-first",
        "folds": PROXY_FOLDS,
        **proxy_recipe(),
        "prune": PRUNE_HARDEST,
    }


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
    """A trained proxy: the torch model (`models.build_model`) and what it reads."""

    model: Any  # a torch.nn.Module; typed loosely so this module imports without torch
    classes: int
    shape: tuple[int, ...]  # one sample's shape (the model reads samples flattened)
    seed: int


def stream(seed: int, *parts: int) -> int:
    """A 63-bit seed for one of the proxies' random streams (a fold, a model)."""
    state = np.random.SeedSequence((seed, PROXY_STREAM, *parts)).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


@contextlib.contextmanager
def proxy_threads() -> Iterator[None]:
    """Run torch with `PROXY_THREADS` intra-op threads inside, as many as before after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(PROXY_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_proxy(
    inputs: np.ndarray,
    labels: np.ndarray,
    shape: tuple[int, ...],
    seed: int,
    rows: np.ndarray | None = None,
    classes: int | None = None,
) -> Proxy:
    """A proxy for samples of `shape` (`models.build_model`, initialised from `seed`), trained
    with Adam on `rows` of (inputs, labels) (all of them by default) for `PROXY_EPOCHS` epochs
    of `PROXY_BATCH`, at most `PROXY_MAX_STEPS` steps, in a seeded batch order."""
    import torch
    from torch import nn

    inputs = np.ascontiguousarray(inputs, dtype=np.float32).reshape(len(labels), -1)
    labels = np.asarray(labels, dtype=np.int64)
    classes = int(labels.max()) + 1 if classes is None else classes
    part = np.arange(len(labels)) if rows is None else np.asarray(rows, dtype=np.int64)
    model = models.build_model(tuple(shape), classes, stream(seed, 0))
    optimizer = optimizers.Adam(model.parameters(), lr=PROXY_LR)
    order = np.random.default_rng(stream(seed, 1))
    x, y = torch.from_numpy(inputs), torch.from_numpy(labels)
    steps = 0
    model.train()
    with proxy_threads():
        for _ in range(PROXY_EPOCHS):
            shuffled = part[order.permutation(len(part))]
            for start in range(0, len(shuffled), PROXY_BATCH):
                if steps == PROXY_MAX_STEPS:
                    break
                batch = torch.from_numpy(shuffled[start : start + PROXY_BATCH])
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
                optimizer.step()
                steps += 1
    model.eval()
    return Proxy(model=model, classes=classes, shape=tuple(shape), seed=seed)


def _forward(proxy: Proxy, inputs: np.ndarray) -> tuple[Any, Any]:
    """(penultimate activations, logits) as torch tensors, without gradients; run over
    `FORWARD_CHUNK` samples at a time, so a CNN's activations stay small."""
    import torch

    flat = np.ascontiguousarray(inputs, dtype=np.float32).reshape(len(inputs), -1)
    hidden, logits = [], []
    with torch.no_grad(), proxy_threads():
        for start in range(0, len(flat), FORWARD_CHUNK):
            x = torch.from_numpy(flat[start : start + FORWARD_CHUNK])
            embedded = models.embed(proxy.model, x)
            hidden.append(embedded)
            logits.append(models.head(proxy.model)(embedded))
    if not hidden:
        return torch.zeros((0, 0)), torch.zeros((0, proxy.classes))
    return torch.cat(hidden), torch.cat(logits)


def proxy_outputs(proxy: Proxy, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings float32 [n, hidden]: the penultimate activations, probabilities float32
    [n, classes]: the softmax of the logits)."""
    import torch

    hidden, logits = _forward(proxy, inputs)
    probabilities = torch.softmax(logits, dim=1)
    return (
        hidden.numpy().astype(np.float32, copy=False),
        probabilities.numpy().astype(np.float32, copy=False),
    )


@dataclass(frozen=True)
class Scores:
    values: np.ndarray  # one per sample, higher = harder
    method: str
    proxy_accuracy: float | None  # on held-out folds (None: too few samples to hold any out)


def sample_scores(proxy: Proxy, inputs: np.ndarray, labels: np.ndarray, method: str) -> Any:
    """float64 [n]: each sample's cross-entropy (`loss`) or EL2N (`el2n`) under `proxy`, and
    bool [n]: whether the proxy predicts its label."""
    import torch
    from torch import nn

    _, logits = _forward(proxy, inputs)
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    with torch.no_grad():
        if method == "loss":
            values = nn.functional.cross_entropy(logits, y, reduction="none")
        else:
            onehot = nn.functional.one_hot(y, proxy.classes).float()
            values = (torch.softmax(logits, dim=1) - onehot).norm(dim=1)
        right = logits.argmax(dim=1) == y
    return values.numpy().astype(np.float64), right.numpy()


def proxy_scores(
    inputs: np.ndarray, labels: np.ndarray, method: str, seed: int, shape: tuple[int, ...]
) -> Scores:
    """Cross-fitted scores (steps 1 to 3 of the module doc)."""
    if method not in SCORE_METHODS:
        raise ValueError(f"no proxy score called {method!r}")
    labels = np.asarray(labels, dtype=np.int64)
    inputs = np.ascontiguousarray(inputs, dtype=np.float32).reshape(len(labels), -1)
    n, classes = len(labels), int(labels.max()) + 1
    folds = min(PROXY_FOLDS, n)
    if folds < 2:  # one sample: nothing to hold out
        proxy = train_proxy(inputs, labels, shape, seed, classes=classes)
        return Scores(sample_scores(proxy, inputs, labels, method)[0], method, None)
    fold = np.random.default_rng(stream(seed, 2)).permutation(n) % folds
    total = np.zeros(n, dtype=np.float64)
    correct = 0
    for k in range(folds):
        held = fold == k
        proxy = train_proxy(
            inputs, labels, shape, stream(seed, 3, k), np.flatnonzero(~held), classes
        )
        values, right = sample_scores(proxy, inputs, labels, method)
        total[~held] += values[~held]
        correct += int(right[held].sum())
    return Scores(total / (folds - 1), method, correct / n)


def hard_first_ordering(scores: np.ndarray, seed: int) -> np.ndarray:
    """Hardest first, the hardest `PRUNE_HARDEST` of the samples last (least hard of them
    first); equal scores in a seeded random order."""
    n = len(scores)
    tie = np.random.default_rng(seed).permutation(n)
    by_score = np.lexsort((tie, -np.asarray(scores)))  # hardest first
    pruned = round(n * PRUNE_HARDEST)
    return np.concatenate([by_score[pruned:], by_score[:pruned][::-1]]).astype(np.int64)
