"""Which samples a cached selection keeps, named so anyone can check them: `gpudesk select show
KEY --percent P` and `gpudesk select compare`'s class mixes.

A cache entry names samples by their place in the dataset's *canonical* (digest-sorted) order
(gpudesk.selection.apply). The dataset indexes under `selection/datasets/` remember, for each
way a dataset was built (factory and arguments), its fingerprint and canonical order; the index
whose fingerprint is the entry's maps canonical places back to the dataset's own positions
(`dataset[i]`). The kept set at a percent is taken from the entry by the selection package's own
rule, the one a loader's cache hit goes through.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudesk.selection.apply import DatasetIndex
from gpudesk.selection.cache import INDEX_DIR, Entry, SelectionCache
from gpudesk.selection.prepass import entry_selection
from gpudesk.selection.preset_names import PresetError, parse_preset
from gpudesk.text import json_text


@dataclass(frozen=True)
class Kept:
    """The samples a preset keeps of a cache entry."""

    preset: str
    canonical: np.ndarray  # sorted places in the canonical order


def kept_of(entry: Entry, preset_name: str) -> Kept:
    """What `preset_name` (a preset of the entry's method: any percent, and whatever else the
    preset's name says of how to take from the ordering) keeps of `entry`, taken by the
    selection package's own rule, the one a loader's cache hit goes through. Raises
    PresetError when the preset does not parse, is of another method, or cannot be taken from
    this entry."""
    preset = parse_preset(preset_name)
    if preset.method != entry.method:
        raise PresetError(
            f"entry {entry.key} is an ordering by {entry.method}; {preset.name} is another "
            f"method (give {entry.method}-P)"
        )
    # the entry itself, not its key: the key needs what only the samples say
    chosen = entry_selection(preset, entry, len(entry.order), reused=True)
    return Kept(preset.name, np.sort(np.asarray(chosen.indices, dtype=np.int64)))


def class_counts(labels: np.ndarray, places: Iterable[int] | None = None) -> dict[int, int]:
    """label -> how many of `places` (default: all) have it, labels in ascending order."""
    chosen = labels if places is None else labels[np.asarray(list(places), dtype=np.int64)]
    found, counts = np.unique(chosen, return_counts=True)
    return {int(label): int(count) for label, count in zip(found, counts, strict=True)}


@dataclass(frozen=True)
class DatasetPositions:
    """How an entry's canonical places map to a dataset's own positions."""

    factory: str | None  # the dataset index it maps through (None: no index matched)
    kwargs: dict[str, Any] | None
    canon: np.ndarray | None  # canon[c]: the dataset position of canonical place c
    also: int  # further indexes of the same content (other factories or arguments)

    def of(self, canonical: np.ndarray) -> np.ndarray:
        """Dataset positions of canonical places (canonical places when no index matched)."""
        if self.canon is None:
            return np.asarray(canonical, dtype=np.int64)
        return np.asarray(self.canon[np.asarray(canonical, dtype=np.int64)], dtype=np.int64)

    @property
    def note(self) -> str:
        if self.canon is None:
            return (
                "no dataset index under selection/datasets/ matches the entry's fingerprint: "
                "indices are canonical places (the samples sorted by their digest), not "
                "dataset positions"
            )
        text = (
            f"dataset positions of {self.factory}({json_text(self.kwargs, sort_keys=True)}), "
            "through its index under selection/datasets/"
        )
        if self.also:
            text += f" ({self.also} more index(es) hold the same samples under other arguments)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"factory": self.factory, "kwargs": self.kwargs, "note": self.note}


def positions_for(cache: SelectionCache, fingerprint: str) -> DatasetPositions:
    """The dataset index whose content is `fingerprint` (the first by factory and arguments
    when several are), read and checked by the selection package's own reader."""
    found = DatasetIndex(cache.root / INDEX_DIR).matching(fingerprint)
    if not found:
        return DatasetPositions(None, None, None, 0)
    factory, kwargs = found[0].identity.get("factory"), found[0].identity.get("kwargs")
    return DatasetPositions(
        str(factory) if factory is not None else None,
        dict(kwargs) if isinstance(kwargs, dict) else None,
        found[0].known.canon,
        len(found) - 1,
    )
