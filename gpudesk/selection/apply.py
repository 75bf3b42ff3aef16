"""A preset applied to a whole dataset: read it (labels, fingerprint and, for scored methods, the
samples as features), run or reuse the pre-pass, and say which samples each epoch trains on.
Used by the shared loader's producer and by `gpudesk select run`.

Cached orderings name samples by their place in the dataset's *canonical order* (sorted by
sample digest), not by position, because the cache key is the order-independent fingerprint: the
same samples served in another order reuse the entry and still get the same samples.

Reading every sample to fingerprint it would cost a reuse about one pass over the data, so the
index of each dataset (its fingerprint and canonical order) is remembered under
`selection/datasets/`, keyed by how the dataset is built (factory and arguments) and checked on
every use against its length and the digests of up to `PROBE_SAMPLES` samples spread over it.
A change that keeps the factory, its arguments, the length and all probed samples is not seen:
`gpudesk select clear` (or `--verify`) forgets the indexes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpudesk.selection.cache import INDEX_DIR, SelectionCache
from gpudesk.selection.fingerprint import fingerprint_digests, sample_digest
from gpudesk.selection.prepass import SCORED, Selection, Target, cached, prepare
from gpudesk.selection.preset_names import PROXY_METHODS, Preset, PresetError, parse_preset
from gpudesk.selection.presets import keep_count, rs2_subset

PROBE_SAMPLES = 256


STRATA_ATTRIBUTE = "selection_strata"  # a dataset's own strata: one hashable per sample


@dataclass(frozen=True)
class Scan:
    """One read of a dataset: what every preset needs from it."""

    labels: np.ndarray  # int64 by position: class codes, or strata codes when unlabelled
    labelled: bool  # False: `labels` are strata (source or size buckets), not classes
    named: bool  # the labels were names (numbered in sorted order), not integers
    fingerprint: str
    canon: np.ndarray  # positions in canonical (digest) order
    digests: list[bytes]
    inputs: np.ndarray | None  # float32 [n, d] by position, when asked for
    shape: tuple[int, ...] | None  # every sample's input shape (None: they differ, or are text)

    @property
    def classes(self) -> int:
        """How many classes (or strata) the label codes number."""
        return int(self.labels.max()) + 1 if len(self.labels) else 0


def scan(dataset: Sequence[Any], features: bool) -> Scan:
    """Read every sample once. A labelled sample is (input, label, ...) with an integer or
    string label; anything else is unlabelled, and is stratified by the dataset's
    `selection_strata` (e.g. each sample's source) or else by the size of the sample (a
    power-of-two bucket of its length: short and long texts keep their shares).

    With `features`, the inputs are also read as numbers (`flat_features`); they must all have
    one shape, which the scan keeps (it picks the proxy model)."""
    digests, labels, inputs, sizes = [], [], [], []
    shape: tuple[int, ...] | None = None
    uniform = True
    for index in range(len(dataset)):
        sample = dataset[index]
        labels.append(_label(sample))
        sizes.append(_size_bucket(sample))  # the strata of unlabelled data
        try:
            digests.append(sample_digest(sample))
        except TypeError as exc:
            raise PresetError(f"sample {index}: {exc}") from None
        part = sample[0] if _is_pair(sample) else sample
        this = _input_shape(part)
        if index == 0:
            shape = this
        elif this != shape:
            uniform = False
            if features:
                raise PresetError(
                    f"a scored preset reads samples of one shape: sample 0's input has shape "
                    f"{_shape_text(shape)}, sample {index}'s {_shape_text(this)}"
                )
        if features:
            try:
                inputs.append(flat_features(part))
            except (TypeError, ValueError):
                raise PresetError(
                    f"sample {index}: a scored preset reads each input as numbers (an array "
                    f"or tensor), not a {type(part).__name__}"
                ) from None
    strata = getattr(dataset, STRATA_ATTRIBUTE, None)
    labelled = all(label is not None for label in labels)
    if strata is not None:
        if len(strata) != len(labels):
            raise PresetError(
                f"the dataset's {STRATA_ATTRIBUTE} has {len(strata)} entries for "
                f"{len(labels)} samples"
            )
        keys: list[Any] = list(strata)
    elif labelled:
        keys = labels
    else:
        keys = sizes
    canon = np.asarray(sorted(range(len(digests)), key=digests.__getitem__), dtype=np.int64)
    codes = _codes(keys)
    named = not all(isinstance(key, int) and key >= 0 for key in keys)
    return Scan(
        codes,
        labelled and strata is None,
        named,
        fingerprint_digests(digests),
        canon,
        digests,
        np.stack(inputs) if features else None,
        shape if uniform else None,
    )


def _input_shape(part: Any) -> tuple[int, ...] | None:
    """The shape of a sample's input when it is numeric: an array, a tensor, a list of numbers
    (None for text and anything else)."""
    if hasattr(part, "detach") and hasattr(part, "shape"):  # a torch tensor
        return tuple(int(d) for d in part.shape)
    if isinstance(part, (str, bytes)):
        return None
    try:
        array = np.asarray(part)
    except (TypeError, ValueError):  # e.g. ragged nested lists
        return None
    return tuple(array.shape) if array.dtype.kind in "biuf" else None


def _shape_text(shape: tuple[int, ...] | None) -> str:
    return "(not an array)" if shape is None else str(list(shape))


def _is_pair(sample: Any) -> bool:
    return isinstance(sample, (tuple, list)) and len(sample) >= 2


def _label(sample: Any) -> int | str | None:
    if not _is_pair(sample):
        return None
    label = sample[1]
    if hasattr(label, "item") and getattr(label, "ndim", 0) == 0:
        label = label.item()  # a 0-d tensor or array
    if isinstance(label, str) or (
        isinstance(label, (int, np.integer)) and not isinstance(label, bool)
    ):
        return label if isinstance(label, str) else int(label)
    return None


def _size_bucket(sample: Any) -> int:
    part = sample[0] if _is_pair(sample) else sample
    size = np.asarray(part).size if not isinstance(part, (str, bytes)) else len(part)
    return int(size).bit_length()


def _codes(keys: list[Any]) -> np.ndarray:
    """Integer codes for the keys: non-negative integer labels stay as they are; anything else
    (class names, sources) is numbered in sorted order, so the codes are reproducible."""
    if all(isinstance(key, int) and key >= 0 for key in keys):
        return np.asarray(keys, dtype=np.int64)
    distinct = sorted(set(keys), key=lambda key: (type(key).__name__, str(key)))
    code = {key: number for number, key in enumerate(distinct)}
    return np.asarray([code[key] for key in keys], dtype=np.int64)


def flat_features(sample: Any) -> np.ndarray:
    """A sample's input as float32 [d], bytes scaled to [0, 1] (what the proxy reads)."""
    if hasattr(sample, "detach"):
        sample = sample.detach().cpu().numpy()
    array = np.asarray(sample)
    scale = 255.0 if array.dtype == np.uint8 else 1.0
    return array.astype(np.float32).reshape(-1) / np.float32(scale)


@dataclass(frozen=True)
class DatasetSelection:
    """What a loader trains on under a preset."""

    preset: Preset
    size: int  # samples in the whole dataset
    seed: int
    selection: Selection | None  # the pre-pass result, in canonical order (None: none ran)
    indices: np.ndarray | None  # the kept positions, sorted (None for rs2: every epoch's own)
    fingerprint: str | None
    select_s: float  # what choosing took here: reading, and the pre-pass or the cache
    # dedup: int64 [m, 2] (near-duplicate, the kept sample it duplicates), as positions
    duplicates: np.ndarray | None = None

    @property
    def kept(self) -> int:
        return (
            self.size
            if self.preset.method == "full"
            else keep_count(self.size, self.preset.percent)
        )

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """The samples epoch `epoch` trains on (sorted positions)."""
        if self.preset.method == "rs2":
            return rs2_subset(self.size, self.preset.percent, self.seed, epoch)
        assert self.indices is not None
        return self.indices

    def describe(self) -> dict[str, Any]:
        chosen = self.selection
        return {
            "preset": self.preset.name,
            "kept": self.kept,
            "of": self.size,
            "seed": self.seed,
            "key": chosen.key if chosen else None,
            "reused": chosen.reused if chosen else None,
            "prepass_wall_s": round(chosen.cost.wall_s, 4) if chosen else 0.0,
            "select_s": round(self.select_s, 4),
            "notes": dict(chosen.notes) if chosen else {},
        }


def select(
    dataset: Sequence[Any],
    preset: str | Preset,
    cache: SelectionCache,
    *,
    seed: int = 0,
    used_by: str | None = None,
    target: Sequence[Any] | None = None,
    identity: dict[str, Any] | None = None,
    verify: bool = False,
) -> DatasetSelection:
    """The selection of `dataset` under `preset`, from the cache or computed (and cached).
    `identity` (how the dataset is built, JSON) lets a reuse skip reading every sample."""
    started = time.perf_counter()
    # NumPy's generators take no negative seed, and a profile's may be one: any 64-bit seed is
    # taken mod 2**64, which leaves every seed >= 0 (and its cache entries) as it was
    seed %= 2**64
    chosen = parse_preset(preset) if isinstance(preset, str) else preset
    size = len(dataset)
    if size < 1:
        raise PresetError("cannot select from an empty dataset")
    if chosen.method in ("rs2", "full"):
        everything = np.arange(size, dtype=np.int64) if chosen.method == "full" else None
        return DatasetSelection(
            chosen, size, seed, None, everything, None, time.perf_counter() - started
        )
    goal = _target(chosen, target)
    index = DatasetIndex(cache.root / INDEX_DIR)
    known = None if identity is None or verify else index.recall(identity, dataset)
    if known is not None and (known.shape is not None or chosen.method not in SCORED):
        reused = _reused(chosen, size, known, cache, seed, used_by, goal, started)
        if reused is not None:
            return reused
    read = scan(dataset, features=chosen.method in SCORED)
    _check_readable(chosen, read, goal)
    if identity is not None:
        cache.make()  # first: the index is made in it, and a station's makes no state folder
        index.remember(identity, read)
    canon = read.canon
    result = prepare(
        chosen,
        read.labels[canon],
        read.fingerprint,
        cache,
        seed=seed,
        used_by=used_by,
        inputs=None if read.inputs is None else read.inputs[canon],
        target=goal,
        shape=read.shape,
    )
    return DatasetSelection(
        chosen,
        size,
        seed,
        result,
        np.sort(canon[result.indices]),
        read.fingerprint,
        time.perf_counter() - started,
        None if result.duplicates is None else canon[result.duplicates],
    )


def _reused(
    chosen: Preset,
    size: int,
    known: KnownDataset,
    cache: SelectionCache,
    seed: int,
    used_by: str | None,
    goal: Target | None,
    started: float,
) -> DatasetSelection | None:
    """The selection from the cache, for a dataset the index already knows (`known`: its
    fingerprint, shape, classes and canonical order); None where the cache has none."""
    hit = cached(
        chosen,
        size,
        known.fingerprint,
        cache,
        seed,
        used_by,
        goal.fingerprint if goal else None,
        known.shape,
        known.classes,
    )
    if hit is not None:
        return DatasetSelection(
            chosen,
            size,
            seed,
            hit,
            np.sort(known.canon[hit.indices]),
            known.fingerprint,
            time.perf_counter() - started,
            None if hit.duplicates is None else known.canon[hit.duplicates],
        )
    return None


def _check_readable(chosen: Preset, read: Scan, goal: Target | None) -> None:
    """Refuse a preset the dataset's samples cannot serve: a proxy classifier without labels, a
    per-class comparison with the target set without integer labels."""
    if chosen.method in PROXY_METHODS and not read.labelled:
        raise PresetError(
            f"{chosen.name} trains a proxy classifier: it needs samples of "
            "(input, label); this dataset is unlabelled (random-P, "
            "stratified-P, rs2-P and dedup-P work without labels)"
        )
    if goal is not None and read.named:
        raise PresetError(
            f"{chosen.name} compares class by class with the target set: it "
            "needs integer class labels, not names"
        )


def _target(preset: Preset, target: Sequence[Any] | None) -> Target | None:
    if preset.method != "less":
        return None
    if target is None:
        raise PresetError(
            f"{preset.name} ranks samples by their similarity to a target set: "
            "give the dataset a selection target (selection_target = "
            '"MODULE:FACTORY" in its [datasets.NAME] table, or --target)'
        )
    aim = scan(target, features=True)
    if not aim.labelled or aim.named:
        raise PresetError(
            f"{preset.name}: the target set needs samples of (input, integer "
            "class label), labelled as the dataset is"
        )
    assert aim.inputs is not None
    return Target(aim.inputs[aim.canon], aim.labels[aim.canon], aim.fingerprint)


@dataclass(frozen=True)
class KnownDataset:
    """What the dataset index remembers of one dataset."""

    fingerprint: str
    canon: np.ndarray  # positions in canonical (digest) order
    shape: tuple[int, ...] | None  # every sample's input shape (as `Scan.shape`)
    classes: int  # as `Scan.classes`


@dataclass(frozen=True)
class StoredIndex:
    """One dataset index as stored: how the dataset is built, its size, the digests probed on
    a reuse, and what it remembers."""

    identity: dict[str, Any]  # the factory and its arguments
    n: int
    probe: list[str]  # hex digests of the samples at `probe_positions(n)`
    known: KnownDataset


class DatasetIndex:
    """Each dataset's fingerprint, canonical order, sample shape and number of classes,
    remembered by how it is built."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, identity: dict[str, Any]) -> Path:
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
        return self.root / hashlib.sha256(text.encode()).hexdigest()[:24]

    @staticmethod
    def probe_positions(size: int) -> np.ndarray:
        return np.unique(np.linspace(0, size - 1, min(size, PROBE_SAMPLES)).astype(np.int64))

    def recall(self, identity: dict[str, Any], dataset: Sequence[Any]) -> KnownDataset | None:
        """What was remembered of this dataset, when it was indexed and still matches."""
        stored = self.read(self._dir(identity))
        if stored is None:
            return None
        size = len(dataset)
        if stored.n != size:
            return None
        probe = [sample_digest(dataset[int(i)]).hex() for i in self.probe_positions(size)]
        if probe != stored.probe:
            return None
        return stored.known

    def matching(self, fingerprint: str) -> list[StoredIndex]:
        """Every intact index of the content `fingerprint` (the same samples built by other
        factories or arguments each have their own), ordered by their identity."""
        found = [
            stored
            for folder in (sorted(self.root.iterdir()) if self.root.is_dir() else [])
            if (stored := self.read(folder)) is not None and stored.known.fingerprint == fingerprint
        ]
        return sorted(found, key=lambda stored: json.dumps(stored.identity, sort_keys=True))

    @staticmethod
    def read(folder: Path) -> StoredIndex | None:
        """One index as written by `remember`, checked against its recorded sha256; None when
        it is missing, damaged or of another layout (an index is only a shortcut)."""
        try:
            meta = json.loads((folder / "meta.json").read_text())
            data = (folder / "canon.npy").read_bytes()
            if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                return None
            canon = np.load(io.BytesIO(data), allow_pickle=False).astype(np.int64)
            identity, shape = meta["identity"], meta["shape"]
            if len(canon) != meta["n"] or not isinstance(identity, dict):
                return None
            known = KnownDataset(
                str(meta["fingerprint"]),
                canon,
                None if shape is None else tuple(int(d) for d in shape),
                int(meta["classes"]),
            )
            return StoredIndex(identity, int(meta["n"]), list(meta["probe"]), known)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def remember(self, identity: dict[str, Any], read: Scan) -> None:
        size = len(read.labels)
        buffer = io.BytesIO()
        np.save(buffer, read.canon, allow_pickle=False)
        data = buffer.getvalue()
        meta = {
            "identity": identity,
            "n": size,
            "fingerprint": read.fingerprint,
            "shape": None if read.shape is None else list(read.shape),
            "classes": read.classes,
            "sha256": hashlib.sha256(data).hexdigest(),
            "probe": [read.digests[int(i)].hex() for i in self.probe_positions(size)],
        }
        with contextlib.suppress(OSError):  # only a shortcut: a full disk costs a re-read
            self.root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".index.", dir=self.root))
            try:
                (staging / "canon.npy").write_bytes(data)
                (staging / "meta.json").write_text(json.dumps(meta, default=str))
                target = self._dir(identity)
                if target.exists():
                    shutil.rmtree(target)
                os.replace(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
