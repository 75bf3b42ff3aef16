"""The shared data loader: one producer per dataset, batches handed to every consumer through
shared memory. `SharedLoader` is the consumer API for training scripts (it imports torch, so it
is loaded on first use: `gpudesk loader status` stays cheap)."""

from __future__ import annotations

from typing import Any

from gpudesk.loader.protocol import LoaderError

__all__ = ["LoaderError", "SharedLoader"]


def __getattr__(name: str) -> Any:
    if name == "SharedLoader":
        from gpudesk.loader.consumer import SharedLoader

        return SharedLoader
    raise AttributeError(name)
