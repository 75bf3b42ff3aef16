"""The `dedup-P` preset: near-duplicate removal. It finds the samples that are near-copies of an
earlier one, lists them, and keeps a random P % of the rest.

What it computes (after SemDeDup, Abbas et al., 2023: embed, cluster with k-means, and within
each cluster drop the samples whose cosine similarity to a kept one passes a threshold):

1. Embed every sample as its own input, mean-centred over the dataset and L2-normalised. A
   near-duplicate is the same sample re-encoded or lightly perturbed, and the inputs show that
   directly. SemDeDup embeds with a pre-trained model, which does not ship here; a proxy trained
   on the labels would not do: it is trained to map different samples of a class close
   together, so it would call distinct samples of a class duplicates. Centring removes what
   every sample shares (on the digits the nearest neighbours' median cosine drops from 0.97
   raw to 0.88 centred), so the cosine compares what differs.
2. Partition into clusters of about `CLUSTER_SIZE` with spherical k-means
   (`clusters.balanced_clusters`, a fixed seed, so which samples are duplicates does not depend
   on the preset's seed). Up to `CLUSTER_SIZE` samples are one cluster, and every pair is
   compared; above that a duplicate whose original fell in another cluster is missed (SemDeDup
   accepts the same).
3. Within a cluster, go through the samples in canonical order (sorted by digest, so the result
   does not depend on the order the dataset serves them in). A sample whose cosine similarity
   to a sample kept before it is at least `DUPLICATE_COSINE` is a near-duplicate of the most
   similar such sample; any other sample is kept. So the first of each group is kept. The
   similarities are computed `BLOCK` rows at a time: memory O(BLOCK · cluster), never O(n²).
4. The ordering: a seeded random permutation of all the samples (`presets.random_ordering`,
   the one `random-P` uses at the same seed) with the near-duplicates moved to its end. So
   `dedup-P` is `random-P` minus the near-duplicates, and **on data without near-duplicates it
   is exactly a random P %**.

The pairs (near-duplicate, the kept sample it duplicates) are stored in the cache entry
(`duplicates.npy`) and their count in the notes (`near_duplicates`).

Cost: one pass of matrix products, O(n · m · d) for clusters of m (all n² pairs up to
`CLUSTER_SIZE` samples), no model: under 0.1 s on the digits' train split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudesk.selection.clusters import balanced_clusters
from gpudesk.selection.presets import random_ordering

# assumption: the cosine (of centred inputs) at which two samples count as one. On the digits'
# train split (1,388 8x8 images) it flags 1 pair of distinct samples (two "1"s whose 64 pixels
# differ by at most 3 of 16 levels; nearest neighbours' cosines: median 0.88, 99.9th
# percentile 0.984), while a copy with Gaussian pixel noise of sd 2 % of the range lies at
# 0.995 or more and one of 5 % at 0.97 to 0.99. (SemDeDup's thresholds are for a pre-trained
# model's embeddings, a different space: NeMo Curator's default is 1 - cos = 0.07.)
DUPLICATE_COSINE = 0.98
CLUSTER_SIZE = 4096  # assumption: samples per k-means cluster, as coverage's
CLUSTER_SEED = 0  # fixed: the duplicates are a property of the data, not of the preset's seed
BLOCK = 1024  # rows of similarities at a time: 1024 x (at most 2 x 4096) float32 = 32 MB


def key_params() -> dict[str, Any]:
    """The recipe constants a `dedup` cache key names (a change is a new entry)."""
    return {
        "recipe": "near-duplicates",
        "embedding": "centred-inputs",
        "cosine": DUPLICATE_COSINE,
        "cluster_size": CLUSTER_SIZE,
    }


@dataclass(frozen=True)
class DedupOrdering:
    order: np.ndarray  # int64 sample indices, most wanted first: the near-duplicates last
    pairs: np.ndarray  # int64 [m, 2]: (near-duplicate, the kept sample it duplicates)


def dedup(inputs: np.ndarray, seed: int, cluster_size: int = CLUSTER_SIZE) -> DedupOrdering:
    """The dedup ordering and the near-duplicate pairs of samples `inputs` [n, ...] (see the
    module doc); sample i is row i, in canonical order."""
    pairs = near_duplicates(inputs, cluster_size)
    duplicate = np.zeros(len(inputs), dtype=bool)
    duplicate[pairs[:, 0]] = True
    permutation = random_ordering(len(inputs), seed)
    last = duplicate[permutation]
    return DedupOrdering(np.concatenate([permutation[~last], permutation[last]]), pairs)


def near_duplicates(inputs: np.ndarray, cluster_size: int = CLUSTER_SIZE) -> np.ndarray:
    """int64 [m, 2]: (near-duplicate, the kept sample it duplicates), sorted by the first
    (steps 1 to 3 of the module doc)."""
    n = len(inputs)
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    flat = np.asarray(inputs, dtype=np.float32).reshape(n, -1)
    centred = flat - flat.mean(axis=0, dtype=np.float64).astype(np.float32)
    norms = np.linalg.norm(centred, axis=1, keepdims=True)
    blank = norms[:, 0] == 0  # equal to the mean: cosine says nothing, equality does
    unit = np.divide(centred, norms, out=np.zeros_like(centred), where=~blank[:, None])
    found: list[np.ndarray] = []
    if blank.sum() > 1:  # all equal to the mean, so to each other: keep the first
        same = np.flatnonzero(blank)
        found.append(np.stack([same[1:], np.full(len(same) - 1, same[0])], axis=1))
    rng = np.random.default_rng(CLUSTER_SEED)
    clusters = (
        balanced_clusters(unit, cluster_size, rng) if n > cluster_size else np.zeros(n, np.int64)
    )
    for cluster in np.unique(clusters):
        members = np.flatnonzero((clusters == cluster) & ~blank)
        found.append(_within(unit, members))
    pairs = np.concatenate(found).astype(np.int64) if found else np.zeros((0, 2), np.int64)
    return pairs[np.argsort(pairs[:, 0], kind="stable")].reshape(-1, 2)


def _within(unit: np.ndarray, members: np.ndarray) -> np.ndarray:
    """The (near-duplicate, kept) pairs among `members` (sorted sample indices): each in turn
    is a near-duplicate of the most similar sample kept before it, if any is similar enough."""
    m = len(members)
    kept = np.ones(m, dtype=bool)
    original = np.full(m, -1, dtype=np.int64)
    points = unit[members]
    for start in range(0, m, BLOCK):
        stop = min(m, start + BLOCK)
        similar = points[start:stop] @ points[:stop].T  # [rows, every sample up to them]
        later = np.arange(stop)[None, :] >= np.arange(start, stop)[:, None]
        similar[later] = -np.inf  # only samples before each row count
        for row in np.flatnonzero((similar >= DUPLICATE_COSINE).any(axis=1)):
            index = start + int(row)
            candidates = np.where(kept[:index], similar[row, :index], -np.inf)
            best = int(np.argmax(candidates))
            if candidates[best] >= DUPLICATE_COSINE:
                kept[index] = False
                original[index] = best
    duplicates = np.flatnonzero(~kept)
    return np.stack([members[duplicates], members[original[duplicates]]], axis=1)
