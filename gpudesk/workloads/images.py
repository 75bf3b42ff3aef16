"""An image-classification dataset whose samples cost real CPU to prepare (JPEG decode + crop).

Made for benchmarking data loaders: every ``__getitem__`` decodes a 160×160 JPEG with
Pillow, takes a random resized crop, jitters colours, blurs, maybe flips, and returns uint8
tensors: about 2 ms of one CPU core per sample, like a small ImageNet-style input pipeline.

    from gpudesk.workloads.images import make_dataset
    dataset = make_dataset(size=2048, image_px=96, seed=0)
    image, label = dataset[0]     # uint8 [3, 96, 96], int64 scalar in 0..9

The pixels come from the two photos bundled with scikit-learn (``china.jpg`` and
``flower.jpg``, found without importing scikit-learn). ``make_dataset`` cuts ``size``
crops from them once, re-encodes each as a 160×160 JPEG and caches the lot as one
``.npz`` file (concatenated bytes, offsets, labels and a checksum), written atomically;
later calls load that file in a few tens of ms. A cache file that is unreadable, truncated
or fails its checksum is rebuilt, never used. The file is ``images-<hash>.npz`` in
``cache_dir``, by default in ``$GPUDESK_HOME/datasets/images-<hash>/``
(``~/.cache/gpudesk/datasets/...`` when ``GPUDESK_HOME`` is unset); ``image_px`` is applied
per sample, so it shares a cache.

Labels (10 classes) are learnable from pixels: label = photo × 5 + region, where region is
one of five fixed areas of the photo (top-left, top-right, bottom-left, bottom-right,
centre) that the stored crop was jittered around.

Randomness never touches global RNG state: the build draws from a numpy Generator seeded by
``seed``; each ``__getitem__`` from a ``random.Random`` seeded by (seed, epoch, index), so a
sample is identical in any process, DataLoader worker or not. ``set_epoch(e)`` (called
before an epoch is iterated) gives every epoch fresh augmentations.

torch and Pillow are imported lazily: importing this module costs numpy only. The dataset
class subclasses ``torch.utils.data.Dataset``, so it is created on first use and published
as ``ImageCropDataset`` in this module (PEP 562), which keeps instances picklable for
fork and spawn workers.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import math
import os
import random
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpudesk.workloads.data import DatasetUnavailable

if TYPE_CHECKING:
    import torch

NUM_CLASSES = 10
SOURCE_NAMES = ("china.jpg", "flower.jpg")
REGIONS = 5  # per photo: top-left, top-right, bottom-left, bottom-right, centre
# Where each region's crops are centred, as fractions of the photo's (width, height).
_REGION_CENTRES = ((0.27, 0.3), (0.73, 0.3), (0.27, 0.7), (0.73, 0.7), (0.5, 0.5))
_CENTRE_JITTER = 0.07  # of width / height
_CROP_SIDE = (0.40, 0.60)  # of the photo's shorter side
_CROP_ASPECT = (0.8, 1.25)
STORED_PX = 160
JPEG_QUALITY = 90
# Per-sample augmentation (see `augment`).
AUG_SCALE = (0.35, 1.0)  # fraction of the stored image's area
AUG_RATIO = (3 / 4, 4 / 3)
AUG_JITTER = 0.3  # brightness, contrast and saturation factors in [0.7, 1.3]
AUG_BLUR_RADIUS = (0.1, 1.5)  # pixels, at image_px
CACHE_VERSION = 1  # bump when the build or the file layout changes
_MISSING_SKLEARN = (
    "the images workload needs the photos bundled with scikit-learn; "
    "install it with `pip install scikit-learn`"
)

_builds = 0  # how many times this process encoded a dataset (the cache tests read it)
_class_lock = threading.Lock()


class CorruptCache(ValueError):
    """A cache file that must not be used."""


def builds() -> int:
    """How many datasets this process has encoded from the photos (cache misses)."""
    return _builds


def make_dataset(
    size: int = 2048, image_px: int = 96, seed: int = 0, cache_dir: str | None = None
) -> torch.utils.data.Dataset:
    """Return a map-style Dataset of `size` samples: (uint8 [3, px, px], int64 label)."""
    if size < 1:
        raise ValueError(f"size must be a positive integer, got {size}")
    if image_px < 8:
        raise ValueError(f"image_px must be at least 8, got {image_px}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    params = {
        "version": CACHE_VERSION,
        "size": size,
        "seed": seed,
        "stored_px": STORED_PX,
        "quality": JPEG_QUALITY,
    }
    encoded, cache_hit = load_or_build(cache_path(params, cache_dir), params)
    cls = _dataset_class()
    return cls(encoded, image_px=image_px, seed=seed, cache_hit=cache_hit)


def cache_path(params: dict[str, int], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache file: `images-<hash>.npz` in `cache_dir`, by default in
    `$GPUDESK_HOME/datasets/images-<hash>/` (`~/.cache/gpudesk/...` without GPUDESK_HOME).

    The hash covers every parameter of the encoded set, so sets of other sizes or seeds can
    share a `cache_dir` without overwriting each other.
    """
    name = f"images-{_params_hash(params)}"
    if cache_dir is not None:
        return Path(cache_dir).expanduser() / f"{name}.npz"
    home = os.environ.get("GPUDESK_HOME")
    root = Path(home).expanduser() if home else Path(os.path.expanduser("~"), ".cache", "gpudesk")
    return root.absolute() / "datasets" / name / f"{name}.npz"


def _params_hash(params: dict[str, int]) -> str:
    blob = json.dumps(params, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# --- the encoded set and its cache ---------------------------------------------------------


class Encoded:
    """The JPEG bytes of every sample, concatenated, with offsets and labels."""

    __slots__ = ("data", "labels", "offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray, labels: np.ndarray) -> None:
        self.data = data  # uint8 (total_bytes,)
        self.offsets = offsets  # int64 (size + 1,): sample i is data[offsets[i]:offsets[i+1]]
        self.labels = labels  # int64 (size,)

    def __len__(self) -> int:
        return len(self.labels)

    def checksum(self) -> str:
        digest = hashlib.blake2b(digest_size=16)
        for array in (self.data, self.offsets, self.labels):
            digest.update(np.ascontiguousarray(array).data)
        return digest.hexdigest()


def load_or_build(path: Path, params: dict[str, int]) -> tuple[Encoded, bool]:
    """The cached set at `path` if it is intact and matches `params`; else build and save it.

    Returns (encoded, cache_hit).
    """
    try:
        return read_cache(path, params), True
    except FileNotFoundError:
        pass
    except CorruptCache:
        pass  # rebuilt below and replaced atomically
    encoded = build_encoded(params["size"], params["seed"])
    write_cache(path, encoded, params)
    return encoded, False


def read_cache(path: Path, params: dict[str, int]) -> Encoded:
    """Load and verify a cache file; raise CorruptCache for anything that does not check out."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in ("data", "offsets", "labels", "meta")}
    except FileNotFoundError:
        raise
    except Exception as exc:  # a damaged zip fails in many ways (BadZipFile, EOFError, ...)
        raise CorruptCache(f"{path}: unreadable ({exc.__class__.__name__}: {exc})") from exc
    try:
        meta = json.loads(arrays["meta"].tobytes().decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptCache(f"{path}: bad metadata") from exc
    if not isinstance(meta, dict) or meta.get("params") != params:
        raise CorruptCache(f"{path}: made for other parameters")
    encoded = Encoded(arrays["data"], arrays["offsets"], arrays["labels"])
    size = params["size"]
    if (
        encoded.data.dtype != np.uint8
        or encoded.data.ndim != 1
        or encoded.offsets.dtype != np.int64
        or encoded.offsets.shape != (size + 1,)
        or encoded.labels.dtype != np.int64
        or encoded.labels.shape != (size,)
    ):
        raise CorruptCache(f"{path}: arrays have the wrong shape or type")
    if encoded.checksum() != meta.get("checksum"):
        raise CorruptCache(f"{path}: checksum mismatch")
    return encoded


def write_cache(path: Path, encoded: Encoded, params: dict[str, int]) -> None:
    """Write the cache file atomically: a temporary file in the same folder, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"params": params, "checksum": encoded.checksum()}).encode()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(
                handle,
                data=encoded.data,
                offsets=encoded.offsets,
                labels=encoded.labels,
                meta=np.frombuffer(meta, dtype=np.uint8),
            )
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def build_encoded(size: int, seed: int) -> Encoded:
    """Cut `size` labelled crops from the photos and JPEG-encode each (~1 ms a sample)."""
    global _builds
    image_module = _pillow()
    photos = [_open_photo(path) for path in source_paths()]
    rng = np.random.default_rng([seed, 0x1A6E])  # its own stream, apart from augmentation
    chunks: list[bytes] = []
    labels = np.empty(size, dtype=np.int64)
    for index in range(size):
        label = int(rng.integers(NUM_CLASSES))
        photo = photos[label // REGIONS]
        box = _region_box(rng, label % REGIONS, photo.width, photo.height)
        crop = photo.resize((STORED_PX, STORED_PX), image_module.Resampling.BILINEAR, box=box)
        out = io.BytesIO()
        crop.save(out, format="JPEG", quality=JPEG_QUALITY)
        chunks.append(out.getvalue())
        labels[index] = label
    offsets = np.zeros(size + 1, dtype=np.int64)
    np.cumsum([len(chunk) for chunk in chunks], out=offsets[1:])
    data = np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()
    _builds += 1
    return Encoded(data, offsets, labels)


def _region_box(
    rng: np.random.Generator, region: int, width: int, height: int
) -> tuple[float, float, float, float]:
    fx, fy = _REGION_CENTRES[region]
    cx = (fx + rng.uniform(-_CENTRE_JITTER, _CENTRE_JITTER)) * width
    cy = (fy + rng.uniform(-_CENTRE_JITTER, _CENTRE_JITTER)) * height
    side = rng.uniform(*_CROP_SIDE) * min(width, height)
    aspect = math.exp(rng.uniform(math.log(_CROP_ASPECT[0]), math.log(_CROP_ASPECT[1])))
    crop_w = min(side * math.sqrt(aspect), width)
    crop_h = min(side / math.sqrt(aspect), height)
    left = min(max(cx - crop_w / 2, 0.0), width - crop_w)
    top = min(max(cy - crop_h / 2, 0.0), height - crop_h)
    return (left, top, left + crop_w, top + crop_h)


def check_available() -> None:
    """Raise DatasetUnavailable unless the photos and Pillow are both here (no torch needed)."""
    source_paths()
    _pillow()


def source_paths() -> list[Path]:
    """The bundled photos, found without importing scikit-learn (that costs ~1 s)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise DatasetUnavailable(_MISSING_SKLEARN)
    for location in spec.submodule_search_locations or ():
        folder = Path(location, "datasets", "images")
        paths = [folder / name for name in SOURCE_NAMES]
        if all(path.is_file() for path in paths):
            return paths
    raise DatasetUnavailable(f"{_MISSING_SKLEARN} (its sample images were not found)")


def _open_photo(path: Path) -> Any:
    with _pillow().open(path) as image:
        return image.convert("RGB")


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:
        raise DatasetUnavailable(
            "the images workload needs Pillow; install it with `pip install pillow`"
        ) from exc
    return Image


# --- the Dataset -----------------------------------------------------------------------------


class _ImageCropCore:
    """Everything but the torch base class, so that this module imports without torch."""

    def __init__(self, encoded: Encoded, image_px: int, seed: int, cache_hit: bool) -> None:
        self.data = encoded.data
        self.offsets = encoded.offsets
        self.labels = encoded.labels
        self.image_px = image_px
        self.seed = seed
        self.epoch = 0
        self.cache_hit = cache_hit  # whether make_dataset found a good cache file

    def __len__(self) -> int:
        return len(self.labels)

    def set_epoch(self, epoch: int) -> None:
        """Choose the augmentation stream: call before iterating an epoch."""
        self.epoch = int(epoch)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} samples")
        image_module = _pillow()
        rng = random.Random(f"{self.seed}:{self.epoch}:{index}")
        start, stop = int(self.offsets[index]), int(self.offsets[index + 1])
        with image_module.open(io.BytesIO(self.data[start:stop].tobytes())) as stored:
            decoded = stored.convert("RGB")
        image = augment(decoded, rng, self.image_px)
        pixels = torch.from_numpy(np.array(image, dtype=np.uint8))  # (H, W, 3), writable copy
        label = torch.tensor(int(self.labels[index]), dtype=torch.int64)
        return pixels.permute(2, 0, 1).contiguous(), label

    def encoded_view(self) -> Any:
        """The samples still encoded, for a producer that decodes on its GPU
        (gpudesk/loader/device_decode.py; images_device.py does the decoding)."""
        from gpudesk.workloads.images_device import EncodedImages

        return EncodedImages(self)

    def decode_batch(self, samples: list[Any], device: Any) -> list[Any]:
        """`encoded_view()`'s samples decoded and augmented on `device`."""
        from gpudesk.workloads.images_device import Augmentation, decode_batch

        aug = Augmentation(_random_resized_box, AUG_JITTER, AUG_BLUR_RADIUS)
        return decode_batch(self, samples, device, aug)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={len(self)}, image_px={self.image_px}, "
            f"seed={self.seed}, epoch={self.epoch}, bytes={self.data.nbytes})"
        )


def augment(image: Any, rng: random.Random, image_px: int) -> Any:
    """The per-sample pipeline after decoding, on a PIL image; every draw comes from `rng`.

    Random resized crop (bicubic) to image_px², colour jitter (brightness, contrast and
    saturation in random order), a Gaussian blur of random radius, a horizontal flip half
    of the time: SimCLR-style, and together about 1.5 ms of CPU on top of the decode.
    """
    from PIL import Image, ImageEnhance, ImageFilter

    box = _random_resized_box(rng, image.width, image.height)
    image = image.resize((image_px, image_px), Image.Resampling.BICUBIC, box=box)
    enhancers = [ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color]
    rng.shuffle(enhancers)
    for enhancer in enhancers:
        image = enhancer(image).enhance(rng.uniform(1 - AUG_JITTER, 1 + AUG_JITTER))
    image = image.filter(ImageFilter.GaussianBlur(rng.uniform(*AUG_BLUR_RADIUS)))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image


def _random_resized_box(
    rng: random.Random, width: int, height: int
) -> tuple[float, float, float, float]:
    """torchvision's RandomResizedCrop box: random area fraction and aspect, else a centre crop."""
    area = width * height
    log_lo, log_hi = math.log(AUG_RATIO[0]), math.log(AUG_RATIO[1])
    for _ in range(10):
        target = area * rng.uniform(*AUG_SCALE)
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        crop_w = math.sqrt(target * aspect)
        crop_h = math.sqrt(target / aspect)
        if crop_w <= width and crop_h <= height:
            left = rng.uniform(0, width - crop_w)
            top = rng.uniform(0, height - crop_h)
            return (left, top, left + crop_w, top + crop_h)
    side = min(width, height)
    left, top = (width - side) / 2, (height - side) / 2
    return (left, top, left + side, top + side)


def _dataset_class() -> type:
    """`ImageCropDataset`, created on first use (it needs torch) and kept in this module."""
    cls = globals().get("ImageCropDataset")
    if cls is not None:
        return cls
    with _class_lock:
        cls = globals().get("ImageCropDataset")
        if cls is None:
            from torch.utils.data import Dataset

            cls = type(
                "ImageCropDataset",
                (_ImageCropCore, Dataset),
                {
                    "__module__": __name__,
                    "__qualname__": "ImageCropDataset",
                    "__doc__": "Map-style dataset of JPEG crops; see gpudesk.workloads.images.",
                },
            )
            globals()["ImageCropDataset"] = cls
    return cls


def __getattr__(name: str) -> Any:
    # PEP 562: unpickling (e.g. in a spawned DataLoader worker) looks the class up by name.
    if name == "ImageCropDataset":
        return _dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
