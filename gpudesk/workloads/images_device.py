"""The image dataset's samples decoded and augmented on a device, a batch at a time: what a
shared loader's producer runs on its GPU when the dataset is served with `device = "cuda"`
(gpudesk/loader/device_decode.py).

The JPEG decode is nvJPEG through `torchvision.io.decode_jpeg(device=...)` where torchvision is
installed, else Pillow on the CPU (then the augmentations still run on the device). The
augmentations are the CPU pipeline's (`images.augment`), with every random draw taken from the
same per-sample generator in the same order, so a sample gets the same crop box, the same
jitter factors in the same order, the same blur radius and the same flip on either path. The
pixel arithmetic is torch's, not Pillow's: bicubic resampling over an integer-rounded box, the
enhancers as Pillow defines them (blend with black, with the mean grey, with the greyscale),
a Gaussian of sigma = the radius. So the pixels are close to the CPU path's, not equal.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# ITU-R 601-2 luma, as Pillow's convert("L") (what ImageEnhance.Contrast and Color blend with)
LUMA = (0.299, 0.587, 0.114)


class EncodedImages:
    """The dataset's samples still encoded: (JPEG bytes, label, index, epoch). The
    epoch travels with the sample: the producer's workers are told the epoch, the process
    that decodes is not."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def set_epoch(self, epoch: int) -> None:
        self.base.set_epoch(epoch)

    def __getitem__(self, index: int) -> tuple[bytes, int, int, int]:
        # Plain bytes and ints: they travel from a worker pickled in its result, where a tensor
        # would cost a shared-memory file and a descriptor each.
        base = self.base
        start, stop = int(base.offsets[index]), int(base.offsets[index + 1])
        return base.data[start:stop].tobytes(), int(base.labels[index]), int(index), base.epoch


@dataclass(frozen=True)
class Augmentation:
    """The CPU pipeline's draws and bounds (images.py passes its own: one home for them)."""

    crop_box: Callable[[random.Random, int, int], tuple[float, float, float, float]]
    jitter: float
    blur_radius: tuple[float, float]


def decode_batch(
    base: Any, samples: list[Any], device: torch.device, aug: Augmentation
) -> list[Any]:
    """`samples` of `EncodedImages` as (uint8 [3, px, px] on `device`, label)."""
    import torch

    jpegs = [torch.frombuffer(bytearray(s[0]), dtype=torch.uint8) for s in samples]
    out = []
    for image, (_, label, index, epoch) in zip(_decode(jpegs, device), samples, strict=True):
        rng = random.Random(f"{base.seed}:{epoch}:{index}")  # the CPU path's generator
        pixels = augment(image, rng, base.image_px, aug)
        out.append((pixels, torch.tensor(label, dtype=torch.int64)))
    return out


def _decode(jpegs: list[Any], device: torch.device) -> list[Any]:
    try:
        from torchvision.io import (  # type: ignore[import-not-found,unused-ignore]
            ImageReadMode,
            decode_jpeg,
        )
    except ImportError:
        return [_decode_pillow(j).to(device) for j in jpegs]
    if device.type == "cuda":
        return list(decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device))
    return [decode_jpeg(j, mode=ImageReadMode.RGB).to(device) for j in jpegs]


def _decode_pillow(jpeg: Any) -> Any:
    import numpy as np
    import torch
    from PIL import Image

    with Image.open(io.BytesIO(jpeg.numpy().tobytes())) as stored:
        array = np.array(stored.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


def augment(image: Any, rng: random.Random, image_px: int, aug: Augmentation) -> Any:
    """`images.augment` on a uint8 [3, H, W] tensor, drawing from `rng` as it does."""
    import torch

    height, width = int(image.shape[1]), int(image.shape[2])
    left, top, right, bottom = aug.crop_box(rng, width, height)
    x0, y0 = max(0, math.floor(left)), max(0, math.floor(top))
    x1, y1 = min(width, max(x0 + 1, math.ceil(right))), min(height, max(y0 + 1, math.ceil(bottom)))
    crop = image[:, y0:y1, x0:x1].float().unsqueeze(0)
    out = torch.nn.functional.interpolate(
        crop, size=(image_px, image_px), mode="bicubic", align_corners=False
    )[0]
    enhancers = ["brightness", "contrast", "color"]
    rng.shuffle(enhancers)
    for name in enhancers:
        out = _enhance(out, name, rng.uniform(1 - aug.jitter, 1 + aug.jitter))
    out = _blur(out, rng.uniform(*aug.blur_radius))
    if rng.random() < 0.5:
        out = out.flip(-1)
    return out.round().clamp(0, 255).to(torch.uint8)


def _grey(image: Any) -> Any:
    return LUMA[0] * image[0] + LUMA[1] * image[1] + LUMA[2] * image[2]


def _enhance(image: Any, name: str, factor: float) -> Any:
    """Pillow's ImageEnhance: a blend of the image with a degenerate one, by `factor`."""
    if name == "brightness":
        degenerate = image.new_zeros(())
    elif name == "contrast":
        degenerate = _grey(image).mean()
    else:
        degenerate = _grey(image).unsqueeze(0)
    return (degenerate + factor * (image - degenerate)).clamp(0, 255)


def _blur(image: Any, sigma: float) -> Any:
    """A separable Gaussian of `sigma` (Pillow's GaussianBlur radius), edges replicated."""
    import torch

    if sigma <= 0:
        return image
    half = max(1, math.ceil(3 * sigma))
    steps = torch.arange(-half, half + 1, device=image.device, dtype=image.dtype)
    kernel = torch.exp(-(steps**2) / (2 * sigma * sigma))
    kernel = kernel / kernel.sum()
    x = image.unsqueeze(1)  # [3, 1, H, W]: each channel on its own
    x = torch.nn.functional.pad(x, (half, half, 0, 0), mode="replicate")
    x = torch.nn.functional.conv2d(x, kernel.view(1, 1, 1, -1))
    x = torch.nn.functional.pad(x, (0, 0, half, half), mode="replicate")
    x = torch.nn.functional.conv2d(x, kernel.view(1, 1, -1, 1))
    return x[:, 0]
