"""A dataset whose every sample says which one it is: for testing and measuring the shared
loader. Sample `i` is `(features, label)`: a float32 tensor of `shape` filled with `i`, and the
int64 label `i`; so a consumer can check both which samples it got and that their bytes arrived
intact. `cost_ms` of busy work per sample stands in for decoding; `wait_ms` of sleep per sample
for reading from slow storage (a slow dataset that leaves the CPU to others)."""

from __future__ import annotations

import time
from typing import Any


class SyntheticDataset:
    def __init__(
        self,
        size: int = 256,
        shape: tuple[int, ...] = (4,),
        cost_ms: float = 0.0,
        wait_ms: float = 0.0,
    ) -> None:
        self.size, self.shape, self.cost_ms = int(size), tuple(shape), float(cost_ms)
        self.wait_ms = float(wait_ms)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        import torch

        if not 0 <= index < self.size:
            raise IndexError(index)
        if self.cost_ms:
            until = time.process_time() + self.cost_ms / 1000.0
            while time.process_time() < until:
                pass
        if self.wait_ms:
            time.sleep(self.wait_ms / 1000.0)
        return (
            torch.full(self.shape, float(index), dtype=torch.float32),
            torch.tensor(index, dtype=torch.int64),
        )


def make_dataset(
    size: int = 256,
    shape: tuple[int, ...] | list[int] = (4,),
    cost_ms: float = 0.0,
    wait_ms: float = 0.0,
) -> SyntheticDataset:
    return SyntheticDataset(size, tuple(shape), cost_ms, wait_ms)


class AugmentedDataset(SyntheticDataset):
    """Samples with random "augmentations" from every source a real pipeline draws from:
    sample `i` is `(i, epoch, torch draw, Python random draw, NumPy draw)` where `epoch` is what
    `set_epoch` last said (as `gpudesk.workloads.images` uses it). A loader that gives each
    epoch fresh randomness changes every draw between epochs; one that does not repeats them."""

    def __init__(self, size: int = 256) -> None:
        super().__init__(size, ())
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        import random

        import numpy as np
        import torch

        if not 0 <= index < self.size:
            raise IndexError(index)
        return (
            int(index),
            self.epoch,
            float(torch.rand(()).item()),
            random.random(),
            float(np.random.rand()),
        )


class RaggedDataset(SyntheticDataset):
    """Samples of varying length, as text is: sample `i` is `(tokens, i)` where `tokens` is the
    int64 tensor `i * 1000 + arange(length)` with `length = 1 + (i * 7) % max_length`."""

    def __init__(self, size: int = 256, max_length: int = 64) -> None:
        super().__init__(size, ())
        self.max_length = int(max_length)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        import torch

        if not 0 <= index < self.size:
            raise IndexError(index)
        length = 1 + (index * 7) % self.max_length
        return torch.arange(length, dtype=torch.int64) + index * 1000, int(index)


def make_augmented(size: int = 256) -> AugmentedDataset:
    return AugmentedDataset(size)


def make_ragged(size: int = 256, max_length: int = 64) -> RaggedDataset:
    return RaggedDataset(size, max_length)
