"""Spherical k-means on unit vectors, and a partition into clusters of bounded size: how the
`coverage` and `dedup` pre-passes keep their pairwise work at O(m²) per cluster of m samples
rather than O(n²) over the dataset (as SemDeDup does, Abbas et al., 2023)."""

from __future__ import annotations

import math

import numpy as np

KMEANS_ITERATIONS = 25  # assumption: Lloyd steps at most (they stop when the assignment holds)


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; an all-zero row becomes one fixed direction, so such
    samples are each other's duplicates rather than arbitrary."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    unit[norms[:, 0] == 0] = 1.0 / math.sqrt(vectors.shape[1])
    return unit


def balanced_clusters(unit: np.ndarray, cluster_size: int, rng: np.random.Generator) -> np.ndarray:
    """A cluster id per sample of `unit` (rows of unit length), ids 0..k-1 by first
    appearance, k = ceil(n / cluster_size) to start with; no cluster above 2 × cluster_size
    (a larger one is split again by k-means and, if its samples will not separate, cut into
    seeded random pieces)."""
    n = len(unit)
    k = math.ceil(n / cluster_size)
    assignment = spherical_kmeans(unit, k, rng) if k > 1 else np.zeros(n, dtype=np.int64)
    parts: list[np.ndarray] = []
    for cluster in range(int(assignment.max()) + 1):
        members = np.flatnonzero(assignment == cluster)
        if len(members) <= 2 * cluster_size:
            parts.append(members)
            continue
        pieces = math.ceil(len(members) / cluster_size)
        split = spherical_kmeans(unit[members], pieces, rng)
        for piece in range(int(split.max()) + 1):
            sub = members[split == piece]
            if len(sub) <= 2 * cluster_size:
                parts.append(sub)
            else:  # the samples do not separate (e.g. all alike): cut at random
                shuffled = sub[rng.permutation(len(sub))]
                parts.extend(
                    np.sort(chunk)
                    for chunk in np.array_split(shuffled, math.ceil(len(sub) / cluster_size))
                )
    parts = [p for p in parts if len(p)]
    parts.sort(key=lambda members: int(members[0]))
    labels = np.empty(n, dtype=np.int64)
    for cluster, members in enumerate(parts):
        labels[members] = cluster
    return labels


def spherical_kmeans(unit: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Spherical k-means on unit rows: k-means++ start (cosine distance), Lloyd steps until the
    assignment holds; returns ids 0..k'-1 (k' ≤ k when clusters empty out)."""
    n = len(unit)
    k = min(k, n)
    centres = np.empty((k, unit.shape[1]), dtype=np.float32)
    centres[0] = unit[rng.integers(n)]
    nearest = 1.0 - unit @ centres[0]
    for c in range(1, k):
        weights = np.clip(nearest, 0.0, None).astype(np.float64) ** 2
        total = weights.sum()
        pick = rng.choice(n, p=weights / total) if total > 0 else rng.integers(n)
        centres[c] = unit[pick]
        nearest = np.minimum(nearest, 1.0 - unit @ centres[c])
    assignment = np.full(n, -1, dtype=np.int64)
    for _ in range(KMEANS_ITERATIONS):
        updated = np.argmax(unit @ centres.T, axis=1)
        if np.array_equal(updated, assignment):
            break
        assignment = updated
        for c in range(k):
            members = assignment == c
            if members.any():
                centres[c] = normalise(unit[members].sum(axis=0, keepdims=True))[0]
    _, relabelled = np.unique(assignment, return_inverse=True)
    return relabelled.reshape(-1).astype(np.int64)
