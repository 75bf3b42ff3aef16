"""Run (or reuse) a preset's pre-pass for one dataset: the ordering comes from the cache when
an entry for (dataset, method, parameters, proxy) exists and is intact, else it is computed
and stored. Any percent of a cached method is free: the percent is not part of the key.

`stratified` and every scored method (`loss`, `el2n`, `dedup`, `less`) keep the labels with
the ordering, so a subset takes each class's first samples up to its quota (class-balanced, in
proportion to the class sizes); `random` keeps the plain prefix. `less` also needs a `Target`,
whose fingerprint is part of its key. A reused entry gives exactly the indices a fresh
computation would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpudesk.selection import diversity, scoring, targeted
from gpudesk.selection.cache import Cost, Entry, SelectionCache, cache_key
from gpudesk.selection.presets import Preset, PresetError, random_ordering, take
from gpudesk.selection.targeted import Target

__all__ = ["SCORED", "Selection", "Target", "cached", "prepare"]


@dataclass(frozen=True)
class Selection:
    preset: Preset
    indices: np.ndarray  # the kept samples, sorted
    key: str | None  # the cache entry it came from (None for `full`)
    reused: bool  # True when the ordering came from the cache
    cost: Cost  # what computing the ordering took (when it was computed)
    notes: dict[str, Any] = field(default_factory=dict)  # e.g. {"near_duplicates": 3} (dedup)


SCORED = ("loss", "el2n", "dedup", "less")


def prepare(
    preset: Preset,
    labels: np.ndarray,
    fingerprint: str,
    cache: SelectionCache,
    seed: int = 0,
    used_by: str | None = None,
    inputs: np.ndarray | None = None,
    target: Target | None = None,
) -> Selection:
    """The kept indices of a dataset of `len(labels)` samples under `preset`. Scored presets
    also need the samples as features (`scoring.features`); `less` also needs `target`."""
    n = len(labels)
    labels = np.asarray(labels, dtype=np.int64)
    if preset.method == "full":
        return Selection(preset, np.arange(n, dtype=np.int64), None, False, Cost())
    if preset.method in SCORED and inputs is None:
        raise PresetError(
            f"{preset.name} scores samples with a proxy model: pass the samples' features"
        )
    found = cached(
        preset,
        n,
        fingerprint,
        cache,
        seed,
        used_by,
        target.fingerprint if target is not None else None,
    )
    if found is not None:
        return found
    params, proxy = _key_parts(preset, seed, target.fingerprint if target else None)
    key = cache_key(fingerprint, preset.method, params, proxy)
    started, cpu = time.perf_counter(), time.process_time()
    order, notes = _ordering(preset.method, labels, seed, inputs, target)
    entry = Entry(
        key=key,
        fingerprint=fingerprint,
        method=preset.method,
        params=params,
        proxy=proxy,
        order=order,
        labels=None if preset.method == "random" else labels,
        cost=Cost(wall_s=time.perf_counter() - started, cpu_s=time.process_time() - cpu),
        created_at=time.time(),
        notes=notes,
    )
    cache.store(entry)
    return _selection(preset, entry, n, reused=False)


def cached(
    preset: Preset,
    n: int,
    fingerprint: str,
    cache: SelectionCache,
    seed: int = 0,
    used_by: str | None = None,
    target_fingerprint: str | None = None,
) -> Selection | None:
    """The selection from an intact cache entry alone (recording `used_by` as a reuse), or
    None when the pre-pass has to run."""
    params, proxy = _key_parts(preset, seed, target_fingerprint)
    key = cache_key(fingerprint, preset.method, params, proxy)
    entry = cache.load(key)
    if entry is None:
        return None
    if used_by:
        cache.note_reuse(key, used_by)
    return _selection(preset, entry, n, reused=True)


def _selection(preset: Preset, entry: Entry, n: int, reused: bool) -> Selection:
    if len(entry.order) != n:
        raise PresetError(
            f"cache entry {entry.key} orders {len(entry.order)} samples, the dataset has {n}"
        )
    indices = take(entry.order, preset.percent, entry.labels)
    return Selection(preset, indices, entry.key, reused, entry.cost, dict(entry.notes))


def _key_parts(
    preset: Preset, seed: int, target_fingerprint: str | None
) -> tuple[dict[str, Any], str | None]:
    """(the parameters, the proxy name) that key the preset's cache entry."""
    if preset.method == "rs2":
        raise PresetError(
            "rs2 has no pre-pass: it draws a new subset every epoch "
            "(gpudesk.selection.presets.rs2_subset)"
        )
    if preset.method not in ("random", "stratified", *SCORED):
        raise PresetError(f"the {preset.method} pre-pass is not available")
    params: dict[str, Any] = {"seed": seed}
    if preset.method not in SCORED:
        return params, None
    # "quotas" marks entries that keep labels: older scored entries (no labels) are not reused
    params["quotas"] = "class"
    if preset.method in ("loss", "el2n", "less"):
        params.update(prune=scoring.PRUNE_HARDEST, bins=scoring.SCORE_BINS)
    if preset.method == "dedup":
        params.update(cluster_size=diversity.CLUSTER_SIZE)
    if preset.method == "less":
        if target_fingerprint is None:
            raise PresetError(
                f"{preset.name} ranks samples by similarity to a target set: give "
                "the dataset a selection target (samples of the task to serve, "
                "e.g. a validation set) with its labels and fingerprint"
            )
        params.update(target=target_fingerprint, **targeted.key_params())
    return params, scoring.PROXY_NAME


def _ordering(
    method: str, labels: np.ndarray, seed: int, inputs: np.ndarray | None, target: Target | None
) -> tuple[np.ndarray, dict[str, Any]]:
    """(the method's ordering, its notes), computed."""
    if method in ("random", "stratified"):
        return random_ordering(len(labels), seed), {}
    assert inputs is not None  # checked by _key_parts
    if method == "dedup":
        result = diversity.dedup(inputs, labels, seed)
        return result.order, {"near_duplicates": result.near_duplicates}
    if method == "less":
        assert target is not None  # checked by _key_parts
        return targeted.less(inputs, labels, target, seed, (inputs.shape[1],))
    scores = scoring.proxy_scores(inputs, labels, method, seed)
    return scoring.coverage_ordering(scores.values, seed), {}
