"""How a preset's ordering becomes the kept subset (the names, `METHOD-PERCENT` or
`METHOD-PERCENT-perclass`, and their check are gpudesk.selection.preset_names).

- `full`: every sample (no percent).
- `random-P`: a seeded random ordering; the first P % are kept.
- `stratified-P`: a seeded random ordering, kept per class in proportion to the class's size
  (exact quotas by largest remainder, so the total is exactly round(P % of n)).
- `rs2-P`: a different P % every epoch, no pre-pass (repeated sampling without
  replacement: the next part of a random permutation).

Scored methods are named here so a profile can be checked, and are computed by their own
modules (see `ABOUT` and docs/selection.md).

A scored preset keeps the first P % of its method's ordering: the top of the ranking, whatever
classes that holds. `-perclass` (e.g. `el2n-25-perclass`) asks for per-class quotas instead:
the first samples of each class in the ordering, up to quotas in proportion to the class sizes
(`take` with labels). The quota choice is applied when the subset is taken from the cached
ordering, so both spellings share one cache entry.
"""

from __future__ import annotations

import numpy as np


def keep_count(n: int, percent: int) -> int:
    """How many of `n` samples P % keeps: rounded, at least one of a non-empty dataset."""
    if n <= 0:
        return 0
    return min(n, max(1, round(n * percent / 100)))


def random_ordering(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n).astype(np.int64)


def class_quotas(labels: np.ndarray, total: int) -> dict[int, int]:
    """Per-class counts in proportion to the class sizes, summing to exactly `total` (largest
    remainder; ties go to the smaller class label)."""
    classes, counts = np.unique(labels, return_counts=True)
    n = int(counts.sum())
    exact = counts * (total / n) if n else counts * 0.0
    quotas = np.floor(exact).astype(np.int64)
    left = total - int(quotas.sum())
    order = sorted(range(len(classes)), key=lambda i: (-(exact[i] - quotas[i]), classes[i]))
    for i in order[:left]:
        quotas[i] += 1
    return {int(c): int(q) for c, q in zip(classes, quotas, strict=True)}


def take(ordering: np.ndarray, percent: int, labels: np.ndarray | None = None) -> np.ndarray:
    """The kept sample indices (sorted) of an ordering: its first P %, or, given labels, the
    first samples of each class up to the class quotas."""
    n = len(ordering)
    total = keep_count(n, percent)
    if labels is None:
        return np.sort(ordering[:total])
    quotas = class_quotas(labels, total)
    kept = []
    for index in ordering:
        label = int(labels[index])
        if quotas[label] > 0:
            quotas[label] -= 1
            kept.append(int(index))
            if len(kept) == total:
                break
    return np.sort(np.asarray(kept, dtype=np.int64))


def rs2_subset(n: int, percent: int, seed: int, epoch: int) -> np.ndarray:
    """RS2 (repeated sampling without replacement): each epoch trains on the next P % of a
    random permutation, so every sample is seen once before any is seen twice; a new
    permutation starts when one is used up. Sorted, reproducible from the seed."""
    size = keep_count(n, percent)
    per_cycle = -(-n // size) if size else 1
    cycle, part = divmod(epoch, per_cycle)
    order = random_ordering(n, seed * 1_000_003 + cycle)
    return np.sort(order[part * size : (part + 1) * size])
