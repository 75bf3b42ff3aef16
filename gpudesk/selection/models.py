"""The small models data selection trains: which one a dataset gets, built the same way by every
scored preset and by the training workloads that want to train exactly what selection scored.

The model follows the samples' shape:

- flat samples (a vector, e.g. the digits' 64 pixels): an MLP, input -> `MLP_HIDDEN` ReLU units
  -> classes;
- image-shaped samples ([H, W] or [C, H, W], both sides at least `CNN_MIN_SIDE`): `SmallCNN`,
  two 3x3 convolutions with 2x2 max-pooling (8 then 16 channels), a `CNN_HIDDEN`-unit ReLU layer,
  then the classes. On MNIST's 28x28 it has 26,698 parameters.

`model_name` is part of every scored cache key, so a change of architecture is a new entry.
Every function imports torch inside, so importing this module stays cheap.
"""

from __future__ import annotations

import math
from typing import Any

MLP_HIDDEN = 128
CNN_CHANNELS = (8, 16)
CNN_HIDDEN = 32
CNN_MIN_SIDE = 8  # two 2x2 poolings leave at least 2x2


def model_kind(shape: tuple[int, ...]) -> str:
    """`cnn` for image-shaped samples, `mlp` for anything else (a vector, or an image too small
    for two poolings)."""
    if len(shape) == 3 and shape[0] <= 4 and min(shape[1:]) >= CNN_MIN_SIDE:
        return "cnn"
    if len(shape) == 2 and min(shape) >= CNN_MIN_SIDE:
        return "cnn"
    return "mlp"


def image_shape(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """[C, H, W] of an image-shaped sample (a 2-D sample has one channel)."""
    if len(shape) == 2:
        return (1, shape[0], shape[1])
    if len(shape) == 3:
        return (shape[0], shape[1], shape[2])
    raise ValueError(f"a sample of shape {shape} is not an image")


def model_name(shape: tuple[int, ...], classes: int) -> str:
    """What the cache key records of the model: its kind and sizes."""
    if model_kind(shape) == "cnn":
        c, h, w = image_shape(shape)
        channels = "x".join(str(n) for n in CNN_CHANNELS)
        return f"cnn{channels}-h{CNN_HIDDEN}-in{c}x{h}x{w}-c{classes}"
    return f"mlp{MLP_HIDDEN}-in{math.prod(shape)}-c{classes}"


def build_model(shape: tuple[int, ...], classes: int, seed: int) -> Any:
    """A freshly initialised model (seeded) for samples of `shape`. It takes a batch of samples
    flattened to [n, prod(shape)] (what `apply.scan` gives) and returns logits [n, classes];
    `embed(model, x)` gives its penultimate activations and `head(model)` its last layer."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if model_kind(shape) == "cnn":
        return small_cnn_class()(image_shape(shape), classes)
    return nn.Sequential(
        nn.Linear(math.prod(shape), MLP_HIDDEN), nn.ReLU(), nn.Linear(MLP_HIDDEN, classes)
    )


def embed(model: Any, inputs: Any) -> Any:
    """The penultimate activations of `model` (built by `build_model`) for a batch."""
    if isinstance(model, small_cnn_class()):
        cnn: Any = model
        return cnn.features(inputs)
    first, relu, _ = model
    return relu(first(inputs))


def head(model: Any) -> Any:
    """The last linear layer of `model` (built by `build_model`)."""
    if isinstance(model, small_cnn_class()):
        cnn: Any = model
        return cnn.out
    return model[2]


_SMALL_CNN: type | None = None


def small_cnn_class() -> type:
    """`SmallCNN`, a torch.nn.Module, defined on first use so that importing this module does
    not import torch."""
    global _SMALL_CNN
    if _SMALL_CNN is None:
        _SMALL_CNN = _define_small_cnn()
    return _SMALL_CNN


def _define_small_cnn() -> type:
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        """Two 3x3 conv + 2x2 max-pool blocks, a hidden ReLU layer, the classes. Reads
        flattened samples and reshapes them to [C, H, W]."""

        def __init__(self, shape: tuple[int, int, int], classes: int) -> None:
            super().__init__()
            c, h, w = shape
            self.shape = shape
            first, second = CNN_CHANNELS
            self.conv = nn.Sequential(
                nn.Conv2d(c, first, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(first, second, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
            )
            self.hidden = nn.Linear(second * (h // 4) * (w // 4), CNN_HIDDEN)
            self.out = nn.Linear(CNN_HIDDEN, classes)

        def features(self, x: torch.Tensor) -> torch.Tensor:
            x = x.reshape(x.shape[0], *self.shape)
            return torch.relu(self.hidden(self.conv(x).flatten(1)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.features(x))

    return SmallCNN
