"""What the built-in training workloads share: exit statuses, their errors, thread and device
choice, and line output. Importing it stays cheap (torch is imported inside the functions)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    import torch

EXIT_OK = 0
EXIT_NO_DATA = 1
EXIT_DIVERGED = 3
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
EXIT_SIGTERM = 128 + signal.SIGTERM
SGD_MOMENTUM = 0.9
ENV_SEED = "GPUDESK_SEED"  # the run's seed, set by `gpudesk select compare` on every job


class Terminated(Exception):
    """Raised in the main thread by the SIGTERM handler."""


class TrainingDiverged(Exception):
    def __init__(self, epoch: int, loss: float) -> None:
        super().__init__(f"training diverged at epoch {epoch} (loss {loss})")
        self.epoch = epoch
        self.loss = loss


def threads_from_env() -> int | None:
    # OMP_NUM_THREADS may be a nesting list such as "4,2"; the first level is ours.
    raw = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    try:
        count = int(raw)
    except ValueError:
        return None
    return count if count > 0 else None


def resolve_device(name: str, parser: argparse.ArgumentParser) -> torch.device:
    import torch

    cuda_ok = torch.cuda.is_available()
    if name == "cuda" and not cuda_ok:
        parser.error("--device cuda: CUDA is not available to torch here")
    if name == "auto":
        name = "cuda" if cuda_ok else "cpu"
    return torch.device(name)


def say(line: str, stream: TextIO | None = None) -> None:
    print(line, file=stream or sys.stdout, flush=True)
