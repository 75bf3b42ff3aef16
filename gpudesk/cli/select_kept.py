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

import hashlib
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpudesk.selection.cache import INDEX_DIR, Entry, SelectionCache
from gpudesk.selection.prepass import _selection
from gpudesk.selection.presets import PresetError, parse_preset


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
    # prepass._selection is how `cached` turns an entry into the kept indices; it takes the
    # entry itself, so no key is rebuilt here (the key needs what only the samples say)
    chosen = _selection(preset, entry, len(entry.order), reused=True)
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
            f"dataset positions of {self.factory}({json.dumps(self.kwargs, sort_keys=True)}), "
            "through its index under selection/datasets/"
        )
        if self.also:
            text += f" ({self.also} more index(es) hold the same samples under other arguments)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"factory": self.factory, "kwargs": self.kwargs, "note": self.note}


def positions_for(cache: SelectionCache, fingerprint: str) -> DatasetPositions:
    """The dataset index whose content is `fingerprint` (the first by factory and arguments
    when several are), read and checked against its recorded sha256."""
    found: list[tuple[str, dict[str, Any], np.ndarray]] = []
    root = cache.root / INDEX_DIR
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        index = _read_index(folder)
        if index is None or index[0] != fingerprint:
            continue
        identity, canon = index[1], index[2]
        found.append((json.dumps(identity, sort_keys=True, default=str), identity, canon))
    if not found:
        return DatasetPositions(None, None, None, 0)
    found.sort(key=lambda item: item[0])
    _, identity, canon = found[0]
    factory = identity.get("factory")
    kwargs = identity.get("kwargs")
    return DatasetPositions(
        str(factory) if factory is not None else None,
        dict(kwargs) if isinstance(kwargs, dict) else None,
        canon,
        len(found) - 1,
    )


def _read_index(folder: Path) -> tuple[str, dict[str, Any], np.ndarray] | None:
    """(fingerprint, identity, canonical order) of one dataset index; None if unreadable
    or damaged (an index is only a shortcut: a damaged one is not an error here)."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        data = (folder / "canon.npy").read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            return None
        canon = np.load(io.BytesIO(data), allow_pickle=False)
        identity = meta.get("identity")
        if len(canon) != meta["n"] or not isinstance(identity, dict):
            return None
        return str(meta["fingerprint"]), identity, canon.astype(np.int64)
    except (OSError, ValueError, KeyError, TypeError):
        return None
