"""A dataset whose every sample says which one it is: for testing and measuring the shared
loader. Sample `i` is `(features, label)`: a float32 tensor of `shape` filled with `i`, and the
int64 label `i`; so a consumer can check both which samples it got and that their bytes arrived
intact. `cost_ms` of busy work per sample stands in for decoding."""

from __future__ import annotations

import time
from typing import Any


class SyntheticDataset:
    def __init__(
        self, size: int = 256, shape: tuple[int, ...] = (4,), cost_ms: float = 0.0
    ) -> None:
        self.size, self.shape, self.cost_ms = int(size), tuple(shape), float(cost_ms)

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
        return (
            torch.full(self.shape, float(index), dtype=torch.float32),
            torch.tensor(index, dtype=torch.int64),
        )


def make_dataset(
    size: int = 256, shape: tuple[int, ...] | list[int] = (4,), cost_ms: float = 0.0
) -> SyntheticDataset:
    return SyntheticDataset(size, tuple(shape), cost_ms)
