"""The `coverage-P` preset: a k-center (farthest-point) ordering of the proxy's embeddings, so
every prefix spreads over the data and samples close to ones already taken come late. It is
the greedy k-center "core-set" of Sener & Savarese (2018), taken cluster by cluster.

What it computes:

1. Train one proxy on all the samples (`scoring.train_proxy`: `models.build_model` for the
   samples' shape, the shared recipe, seeded), embed every sample with its penultimate layer
   (`models.embed`) and L2-normalise the embeddings; distances are cosine distances, 1 - cos.
   Byte-identical samples share one embedding.
2. Partition into clusters with a seeded spherical k-means, k = ceil(n / `CLUSTER_SIZE`)
   (`clusters.balanced_clusters`): a dataset of up to 4,096 samples is one cluster.
3. Within each cluster, order the samples by farthest-point traversal: start at a seeded random
   sample; each next sample is the one farthest from every sample already chosen. Byte-identical
   copies follow at the very end of their cluster, after the sample they copy.
4. Merge the clusters into one ordering, each taking its share: the j-th sample of a cluster of
   m samples has the position (j + 1/2) / m, and the merged ordering sorts by that (ties by
   cluster), so every prefix holds each cluster's share to within one sample.

The seed changes the proxy (its initialisation and batch order), the k-means start and each
cluster's first sample. `coverage-P` keeps the first P % of the ordering; with `-perclass`,
the first samples of each class up to its quota (`presets.take`).

Cost: the proxy (`PROXY_EPOCHS` epochs over the data, one model), one forward pass, k-means
(O(n · k · d) per step), then farthest-point traversal, O(m² · d) for a cluster of m samples:
~0.1 s for m = 1,797 and under a second for m = 4,096, which is why clusters are capped near
`CLUSTER_SIZE`. Memory stays O(n · d). torch is imported only by the proxy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudesk.selection import scoring
from gpudesk.selection.clusters import balanced_clusters, normalise
from gpudesk.selection.scoring import proxy_outputs, train_proxy

CLUSTER_SIZE = 4096  # samples per k-means cluster, on average: k = ceil(n / CLUSTER_SIZE)


def key_params() -> dict[str, Any]:
    """The recipe constants a `coverage` cache key names (with the proxy's own)."""
    return {
        "recipe": "k-center",
        "cluster_size": CLUSTER_SIZE,
        **scoring.proxy_recipe(),
    }


@dataclass(frozen=True)
class CoverageOrdering:
    order: np.ndarray  # int64 sample indices, most wanted first
    clusters: np.ndarray  # int64 cluster of each sample (0..k-1)


def coverage(
    inputs: np.ndarray,
    labels: np.ndarray,
    seed: int,
    shape: tuple[int, ...],
    cluster_size: int = CLUSTER_SIZE,
) -> CoverageOrdering:
    """Train the proxy (seeded), embed every sample and order them (see the module doc)."""
    labels = np.asarray(labels, dtype=np.int64)
    inputs = np.ascontiguousarray(inputs, dtype=np.float32).reshape(len(labels), -1)
    proxy = train_proxy(inputs, labels, shape, seed)
    # embed each distinct sample once, so byte-identical samples get identical embeddings
    _, first, inverse = np.unique(inputs, axis=0, return_index=True, return_inverse=True)
    embeddings = proxy_outputs(proxy, inputs[first])[0][inverse.reshape(-1)]
    return coverage_ordering(embeddings, seed, cluster_size)


def coverage_ordering(
    embeddings: np.ndarray, seed: int, cluster_size: int = CLUSTER_SIZE
) -> CoverageOrdering:
    """The coverage ordering of samples given their embeddings [n, d] (steps 2 to 4 of the
    module doc). Deterministic in `seed`."""
    n = len(embeddings)
    if n == 0:
        return CoverageOrdering(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    rng = np.random.default_rng(seed)
    unit = normalise(np.asarray(embeddings, dtype=np.float32).reshape(n, -1))
    clusters = balanced_clusters(unit, cluster_size, rng)
    orders = [
        _farthest_point(unit, np.flatnonzero(clusters == cluster), rng)
        for cluster in range(int(clusters.max()) + 1)
    ]
    return CoverageOrdering(_merge(orders), clusters)


# ------------------------------------------------------------------ within a cluster
def _farthest_point(unit: np.ndarray, members: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The cluster's samples in farthest-point order. Identical embeddings are traversed once,
    through their first sample; the other copies go to the end of the cluster in sample
    order."""
    _, first = np.unique(unit[members], axis=0, return_index=True)
    distinct = members[np.sort(first)]
    copies = np.setdiff1d(members, distinct)  # sorted
    points = unit[distinct]
    m = len(distinct)
    # the smallest cosine distance from each sample to those chosen so far
    nearest = np.full(m, np.inf, dtype=np.float32)
    chosen = np.empty(m, dtype=np.int64)
    current = int(rng.integers(m))
    for step in range(m):
        chosen[step] = current
        nearest[current] = -np.inf  # never chosen again (min keeps it there)
        if step + 1 < m:
            np.minimum(nearest, 1.0 - points @ points[current], out=nearest)
            current = int(np.argmax(nearest))
    return np.concatenate([distinct[chosen], copies])


# ------------------------------------------------------------------ merging
def _merge(orders: list[np.ndarray]) -> np.ndarray:
    """One ordering from the clusters' orderings, each cluster at its share of every prefix: the
    j-th sample of a cluster of m sits at (j + 1/2) / m; ties go to the lower cluster."""
    if len(orders) == 1:
        return orders[0].astype(np.int64)
    positions = np.concatenate([(np.arange(len(o)) + 0.5) / len(o) for o in orders])
    cluster = np.concatenate([np.full(len(o), c) for c, o in enumerate(orders)])
    merged = np.concatenate(orders)
    return merged[np.lexsort((cluster, positions))].astype(np.int64)
