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
   compared. Above that, a sample is compared with the samples of its own cluster and with
   those whose second-nearest centre is its cluster: two samples that close have nearly the
   same similarity to every centre, so a pair k-means split across a boundary is still
   compared. (SemDeDup compares within clusters only. On a structureless worst case, 60,000
   noisy 784-pixel vectors with 100 noisy copies injected, within-cluster comparison found 82
   of the copies and this finds 91.)
3. Go through the samples in canonical order (sorted by digest, so the result does not depend
   on the order the dataset serves them in). A sample whose cosine similarity to a sample kept
   before it (among those it is compared with) is at least `DUPLICATE_COSINE` is a
   near-duplicate of the most similar such sample; any other sample is kept. So the first of
   each group is kept. The similarities are computed `BLOCK` rows at a time: memory
   O(BLOCK · n) at worst, never O(n²), plus each cluster's samples gathered once (twice the
   inputs' size).
4. The ordering: a seeded random permutation of all the samples (`presets.random_ordering`,
   the one `random-P` uses at the same seed) with the near-duplicates moved to its end. So
   `dedup-P` is `random-P` minus the near-duplicates, and **on data without near-duplicates it
   is exactly a random P %**.

The pairs (near-duplicate, the kept sample it duplicates) are stored in the cache entry
(`duplicates.npy`) and their count in the notes (`near_duplicates`).

Cost: no model; one pass of matrix products, O(n · m · d) for clusters of m (all n² pairs up to
`CLUSTER_SIZE` samples), plus k-means above that: under 0.1 s on the digits' train split, 41 s
for the 60,000 x 784 case above (15 s of it k-means) on a loaded 2-core machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudesk.selection.clusters import balanced_clusters, normalise
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
    original = np.full(n, -1, dtype=np.int64)  # the kept sample each near-duplicate duplicates
    same = np.flatnonzero(blank)
    original[same[1:]] = same[0] if len(same) else -1  # all equal to the mean: keep the first
    home, reach = _neighbourhoods(unit, blank, cluster_size)
    # each cluster's reach gathered once (2 x the inputs' memory): a block reads a prefix of it
    gathered = [unit[members] for members in reach]
    for start in range(0, n, BLOCK):
        rows = np.arange(start, min(n, start + BLOCK))
        _block(unit, rows, blank, home, reach, gathered, original)
    duplicates = np.flatnonzero(original >= 0)
    return np.stack([duplicates, original[duplicates]], axis=1).astype(np.int64)


def _neighbourhoods(
    unit: np.ndarray, blank: np.ndarray, cluster_size: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(each sample's cluster, for each cluster the samples it is compared with: its own and
    those whose second-nearest centre it is). The second clusters catch a near-duplicate pair
    that k-means split across a boundary: two samples that close have nearly the same
    similarity to every centre."""
    n = len(unit)
    if n <= cluster_size:
        return np.zeros(n, dtype=np.int64), [np.flatnonzero(~blank)]
    home = balanced_clusters(unit, cluster_size, np.random.default_rng(CLUSTER_SEED))
    count = int(home.max()) + 1
    centres = np.zeros((count, unit.shape[1]), dtype=np.float32)
    np.add.at(centres, home, unit)
    centres = normalise(centres)
    second = np.empty(n, dtype=np.int64)
    for start in range(0, n, BLOCK):
        near = unit[start : start + BLOCK] @ centres.T
        near[np.arange(len(near)), home[start : start + BLOCK]] = -np.inf
        second[start : start + BLOCK] = np.argmax(near, axis=1)
    reach = [np.flatnonzero(((home == c) | (second == c)) & ~blank) for c in range(count)]
    return home, reach


def _block(
    unit: np.ndarray,
    rows: np.ndarray,
    blank: np.ndarray,
    home: np.ndarray,
    reach: list[np.ndarray],
    gathered: list[np.ndarray],
    original: np.ndarray,
) -> None:
    """Settle `rows` (consecutive samples, every earlier one settled): each is a near-duplicate
    of the most similar sample kept before it in its cluster's reach, if one is similar enough
    (`original` is updated in place)."""
    found: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # row -> (earlier samples, cosines)
    for cluster in np.unique(home[rows]):
        these = rows[(home[rows] == cluster) & ~blank[rows]]
        if not len(these):
            continue
        # the cluster's reach is sorted: the samples before the last row are a prefix of it
        count = int(np.searchsorted(reach[int(cluster)], these[-1]))
        if not count:
            continue
        earlier = reach[int(cluster)][:count]
        similar = unit[these] @ gathered[int(cluster)][:count].T
        similar[earlier[None, :] >= these[:, None]] = -np.inf  # only samples before each row
        for row in np.flatnonzero((similar >= DUPLICATE_COSINE).any(axis=1)):
            found[int(these[row])] = (earlier, similar[row])
    for index in sorted(found):  # in order: a kept sample is settled before any later one
        earlier, similar = found[index]
        candidates = np.where(original[earlier] < 0, similar, -np.inf)
        best = int(np.argmax(candidates))
        if candidates[best] >= DUPLICATE_COSINE:
            original[index] = earlier[best]
