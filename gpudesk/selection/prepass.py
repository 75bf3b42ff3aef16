"""Run (or reuse) a preset's pre-pass for one dataset: the ordering comes from the cache when
an entry for (dataset, method, parameters, proxy) exists and is intact, else it is computed
and stored. Any percent of a cached method is free: the percent is not part of the key."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from gpudesk.selection import scoring
from gpudesk.selection.cache import Cost, Entry, SelectionCache, cache_key
from gpudesk.selection.presets import Preset, PresetError, random_ordering, take


@dataclass(frozen=True)
class Selection:
    preset: Preset
    indices: np.ndarray  # the kept samples, sorted
    key: str | None  # the cache entry it came from (None for `full`)
    reused: bool  # True when the ordering came from the cache
    cost: Cost  # what computing the ordering took (when it was computed)


SCORED = ("loss", "el2n")


def prepare(preset: Preset, labels: np.ndarray, fingerprint: str, cache: SelectionCache,
            seed: int = 0, used_by: str | None = None,
            inputs: np.ndarray | None = None) -> Selection:
    """The kept indices of a dataset of `len(labels)` samples under `preset`. Scored presets
    also need the samples as features (`scoring.features`)."""
    n = len(labels)
    if preset.method == "full":
        return Selection(preset, np.arange(n, dtype=np.int64), None, False, Cost())
    if preset.method == "rs2":
        raise PresetError("rs2 has no pre-pass: it draws a new subset every epoch "
                          "(gpudesk.selection.presets.rs2_subset)")
    if preset.method not in ("random", "stratified", *SCORED):
        raise PresetError(f"the {preset.method} pre-pass is not available yet")
    params: dict[str, object] = {"seed": seed}
    proxy = None
    if preset.method in SCORED:
        params.update(prune=scoring.PRUNE_HARDEST, bins=scoring.SCORE_BINS)
        proxy = scoring.PROXY_NAME
        if inputs is None:
            raise PresetError(f"{preset.name} scores samples with a proxy model: pass the "
                              "samples' features")
    key = cache_key(fingerprint, preset.method, params, proxy)
    entry = cache.load(key)
    reused = entry is not None
    if entry is None:
        started, cpu = time.perf_counter(), time.process_time()
        if preset.method in SCORED:
            assert inputs is not None
            scores = scoring.proxy_scores(inputs, np.asarray(labels), preset.method, seed)
            order = scoring.coverage_ordering(scores.values, seed)
        else:
            order = random_ordering(n, seed)
        entry = Entry(key=key, fingerprint=fingerprint, method=preset.method, params=params,
                      proxy=proxy, order=order,
                      labels=np.asarray(labels, dtype=np.int64)
                      if preset.method == "stratified" else None,
                      cost=Cost(wall_s=time.perf_counter() - started,
                                cpu_s=time.process_time() - cpu),
                      created_at=time.time())
        cache.store(entry)
    elif used_by:
        cache.note_reuse(key, used_by)
    if len(entry.order) != n:
        raise PresetError(f"cache entry {key} orders {len(entry.order)} samples, the dataset "
                          f"has {n}")
    indices = take(entry.order, preset.percent, entry.labels)
    return Selection(preset, indices, key, reused, entry.cost)
