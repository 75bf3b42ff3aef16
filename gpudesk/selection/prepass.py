"""Run (or reuse) a preset's pre-pass for one dataset: the ordering comes from the cache when
an entry for (dataset, method, parameters, proxy) exists and is intact, else it is computed
and stored. Any percent of a cached method is free: the percent is not part of the key.

`stratified` and every scored method keep the labels with the ordering. A `stratified` subset,
and a scored one asked for `-perclass`, takes each class's first samples up to its quota (in
proportion to the class sizes); any other subset is the plain prefix of the ordering, the top
of the method's ranking. `less` also needs a `Target`, whose fingerprint is part of its key. A
reused entry gives exactly the indices a fresh computation would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpudesk.selection import coverage, dedup, models, scoring, targeted
from gpudesk.selection.cache import Cost, Entry, SelectionCache, cache_key
from gpudesk.selection.preset_names import PROXY_METHODS, SCORED_METHODS, Preset, PresetError
from gpudesk.selection.presets import random_ordering, take
from gpudesk.selection.targeted import Target

__all__ = ["SCORED", "Selection", "Target", "cached", "entry_selection", "prepare"]


@dataclass(frozen=True)
class Selection:
    preset: Preset
    indices: np.ndarray  # the kept samples, sorted
    key: str | None  # the cache entry it came from (None for `full`)
    reused: bool  # True when the ordering came from the cache
    cost: Cost  # what computing the ordering took (when it was computed)
    notes: dict[str, Any] = field(default_factory=dict)  # e.g. {"proxy_accuracy": 0.95}
    # dedup: int64 [m, 2] (near-duplicate, the kept sample it duplicates), in the sample
    # numbering of `indices`
    duplicates: np.ndarray | None = None


SCORED = SCORED_METHODS  # the methods whose pre-pass reads the samples themselves


def prepare(
    preset: Preset,
    labels: np.ndarray,
    fingerprint: str,
    cache: SelectionCache,
    seed: int = 0,
    used_by: str | None = None,
    inputs: np.ndarray | None = None,
    target: Target | None = None,
    shape: tuple[int, ...] | None = None,
) -> Selection:
    """The kept indices of a dataset of `len(labels)` samples under `preset`. Scored presets
    also need the samples, flattened to float32 [n, d] (`scoring.features`), and one sample's
    `shape` (default: a flat vector of d), which picks the proxy model
    (`models.build_model`); `less` also needs `target`."""
    n = len(labels)
    labels = np.asarray(labels, dtype=np.int64)
    if preset.method == "full":
        return Selection(preset, np.arange(n, dtype=np.int64), None, False, Cost())
    if preset.method in SCORED and inputs is None:
        raise PresetError(f"{preset.name} reads the samples themselves: pass them as features")
    if inputs is not None and shape is None:
        shape = tuple(np.asarray(inputs).shape[1:])
    classes = int(labels.max()) + 1 if n else 0
    target_fingerprint = target.fingerprint if target is not None else None
    found = cached(preset, n, fingerprint, cache, seed, used_by, target_fingerprint, shape, classes)
    if found is not None:
        return found
    params, proxy = _key_parts(preset, seed, target_fingerprint, shape, classes)
    key = cache_key(fingerprint, preset.method, params, proxy)
    started, cpu = time.perf_counter(), time.process_time()
    order, notes, duplicates = _ordering(preset.method, labels, seed, inputs, target, shape)
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
        duplicates=duplicates,
    )
    cache.store(entry)
    return entry_selection(preset, entry, n, reused=False)


def cached(
    preset: Preset,
    n: int,
    fingerprint: str,
    cache: SelectionCache,
    seed: int = 0,
    used_by: str | None = None,
    target_fingerprint: str | None = None,
    shape: tuple[int, ...] | None = None,
    classes: int | None = None,
) -> Selection | None:
    """The selection from an intact cache entry alone (recording `used_by` as a reuse), or
    None when the pre-pass has to run. A method with a proxy model needs the samples' `shape`
    and number of `classes` (they name the model in the key)."""
    params, proxy = _key_parts(preset, seed, target_fingerprint, shape, classes)
    key = cache_key(fingerprint, preset.method, params, proxy)
    entry = cache.load(key)
    if entry is None:
        return None
    if used_by:
        cache.note_reuse(key, used_by)
    return entry_selection(preset, entry, n, reused=True)


def entry_selection(preset: Preset, entry: Entry, n: int, reused: bool) -> Selection:
    """What `preset` keeps of a cache entry of its method (for a dataset of `n` samples): the
    one rule a cache hit, a fresh pre-pass and `gpudesk select show` take a subset by."""
    if len(entry.order) != n:
        raise PresetError(
            f"cache entry {entry.key} orders {len(entry.order)} samples, the dataset has {n}"
        )
    if preset.quotas and entry.labels is None:
        raise PresetError(f"cache entry {entry.key} has no labels for {preset.name}'s quotas")
    indices = take(entry.order, preset.percent, entry.labels if preset.quotas else None)
    return Selection(
        preset, indices, entry.key, reused, entry.cost, dict(entry.notes), entry.duplicates
    )


def _key_parts(
    preset: Preset,
    seed: int,
    target_fingerprint: str | None,
    shape: tuple[int, ...] | None,
    classes: int | None,
) -> tuple[dict[str, Any], str | None]:
    """(the parameters, the proxy model) that key the preset's cache entry. Whether a subset
    is taken per class is not part of it: every scored entry keeps the labels."""
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
    if preset.method == "dedup":  # no model: the samples' own inputs
        params.update(dedup.key_params())
        return params, None
    if preset.method in ("loss", "el2n"):
        params.update(scoring.key_params())
    if preset.method == "coverage":
        params.update(coverage.key_params())
    if preset.method == "less":
        if target_fingerprint is None:
            raise PresetError(
                f"{preset.name} ranks samples by similarity to a target set: give "
                "the dataset a selection target (samples of the task to serve, "
                "e.g. a validation set) with its labels and fingerprint"
            )
        params.update(target=target_fingerprint, **targeted.key_params())
    if shape is None or classes is None:
        raise PresetError(f"{preset.name} needs the samples' shape and classes for its proxy")
    # the proxy part names the model and how it was trained and used
    return params, f"{models.model_name(shape, classes)}/{params['recipe']}"


def _ordering(
    method: str,
    labels: np.ndarray,
    seed: int,
    inputs: np.ndarray | None,
    target: Target | None,
    shape: tuple[int, ...] | None,
) -> tuple[np.ndarray, dict[str, Any], np.ndarray | None]:
    """(the method's ordering, its notes, dedup's near-duplicate pairs), computed."""
    if method in ("random", "stratified"):
        return random_ordering(len(labels), seed), {}, None
    assert inputs is not None  # checked by prepare
    if method == "dedup":
        result = dedup.dedup(inputs, seed)
        return result.order, {"near_duplicates": len(result.pairs)}, result.pairs
    assert shape is not None and method in PROXY_METHODS  # checked by _key_parts
    if method == "coverage":
        return coverage.coverage(inputs, labels, seed, shape).order, {}, None
    if method == "less":
        assert target is not None  # checked by _key_parts
        order, notes = targeted.less(inputs, labels, target, seed, shape)
        return order, notes, None
    scores = scoring.proxy_scores(inputs, labels, method, seed, shape)
    notes = {} if scores.proxy_accuracy is None else {"proxy_accuracy": scores.proxy_accuracy}
    return scoring.hard_first_ordering(scores.values, seed), notes, None
