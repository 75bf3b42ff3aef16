"""Preemption for the built-in training loop (docs/preemption.md): `--checkpoint PATH` makes a
run resumable. On its preempt signal (`$GPUDESK_PREEMPT_SIGNAL`, which the engine gives a
preemptible job; SIGUSR1 without it) the run saves, at the next step boundary, everything its
future depends on — the model's and the optimizer's state, the epoch and the step within it,
the shuffling generator's state as the epoch began, torch's RNG state, the epochs done and the
running epoch's sums — and exits 75 (EX_TEMPFAIL: "try again"). Started again with the file
there, it goes on from that step, so on the CPU the final weights are those of an
uninterrupted run, bit for bit.

torch is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpudesk.optimizers import Optimizer
from gpudesk.workloads.common import Progress, StepCounter, TrainingDiverged, say
from gpudesk.workloads.training import EpochStats, evaluate, train_step

if TYPE_CHECKING:
    import torch

EXIT_PREEMPTED = 75  # sysexits' EX_TEMPFAIL: a temporary failure, to be retried
ENV_PREEMPT_SIGNAL = "GPUDESK_PREEMPT_SIGNAL"


@dataclass
class PreemptSignal:
    """Whether the preempt signal came in, while `caught()` holds."""

    asked: bool = False

    @contextmanager
    def caught(self) -> Iterator[None]:
        """Catch the job's preempt signal (its previous handler back afterwards)."""
        name = os.environ.get(ENV_PREEMPT_SIGNAL, "SIGUSR1")
        sig = signal.Signals[name] if name in signal.Signals.__members__ else signal.SIGUSR1
        previous = signal.signal(sig, lambda _signum, _frame: setattr(self, "asked", True))
        try:
            yield
        finally:
            signal.signal(sig, previous)


@dataclass
class Running:
    """The epoch under way: where it is and its sums so far (tensors on the device)."""

    epoch: int = 1
    batch: int = 0  # the next batch of the epoch to train on
    rng_state: Mapping[str, Any] | None = None  # the shuffler's state as the epoch began
    sums: dict[str, Any] = field(default_factory=dict)  # loss_sum, correct, samples, train_s


def save(path: Path, state: dict[str, Any]) -> None:
    """Atomically: a preemption during the write leaves the previous checkpoint whole."""
    import torch

    partial = path.with_name(path.name + ".partial")
    torch.save(state, partial)
    os.replace(partial, path)


def weights_digest(model: torch.nn.Module) -> str:
    """A checksum of the model's weights: equal runs give equal digests."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def train_resumable(
    path: Path,
    epochs: int,
    model: torch.nn.Module,
    optimizer: Optimizer,
    order: Callable[[np.random.Generator], list[torch.Tensor]],
    batch: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    val: tuple[torch.Tensor, torch.Tensor],
    rng: np.random.Generator,
    progress: Progress,
    counter: StepCounter,
) -> list[EpochStats] | None:
    """`epochs` epochs as training.fit_epoch runs them (the same operations in the same
    order), resumed from `path` where it holds a checkpoint; None when it was preempted
    (the checkpoint saved). `order(rng)` draws an epoch's batches of indices; `batch(indices)`
    gives one's inputs and targets."""
    flag = PreemptSignal()
    with flag.caught():
        return _train(
            path, epochs, model, optimizer, order, batch, val, rng, progress, counter, flag
        )


def _train(
    path: Path,
    epochs: int,
    model: torch.nn.Module,
    optimizer: Optimizer,
    order: Callable[[np.random.Generator], list[torch.Tensor]],
    batch: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    val: tuple[torch.Tensor, torch.Tensor],
    rng: np.random.Generator,
    progress: Progress,
    counter: StepCounter,
    flag: PreemptSignal,
) -> list[EpochStats] | None:
    import torch

    history: list[EpochStats] = []
    at = Running()
    if path.exists():
        state = torch.load(path, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        history = [EpochStats(**h) for h in state["history"]]
        at = Running(state["epoch"], state["batch"], state["rng"], state["sums"])
        rng.bit_generator.state = state["rng"]
        counter.done = state["steps"]
        say(f"resumed from {path} at epoch {at.epoch} step {at.batch}")
    for epoch in range(at.epoch, epochs + 1):
        progress.epoch = epoch
        resumed = at.epoch == epoch and at.batch > 0
        began = rng.bit_generator.state
        stats = _epoch(
            model,
            optimizer,
            order(rng),
            batch,
            val,
            counter,
            flag,
            at if resumed else Running(epoch, 0, began),
        )
        if isinstance(stats, Running):
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "history": [asdict(h) for h in history],
                "epoch": stats.epoch,
                "batch": stats.batch,
                "rng": began,
                "sums": stats.sums,
                "steps": counter.done,
            }
            save(path, state)
            say(f"preempted at epoch {epoch} step {stats.batch}: checkpoint saved to {path}")
            return None
        if not np.isfinite(stats.loss):
            raise TrainingDiverged(epoch, stats.loss)
        history.append(stats)
        say(
            f"epoch {epoch}/{epochs} loss {stats.loss:.4f} train_acc {stats.train_acc:.4f} "
            f"val_acc {stats.val_acc:.4f} samples/s {stats.samples_per_s:.0f} "
            f"time {stats.seconds:.2f}s"
        )
    return history


def _epoch(
    model: torch.nn.Module,
    optimizer: Optimizer,
    order: list[torch.Tensor],
    batch: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    val: tuple[torch.Tensor, torch.Tensor],
    counter: StepCounter,
    flag: PreemptSignal,
    at: Running,
) -> EpochStats | Running:
    """One epoch from batch `at.batch` on (fit_epoch's sums carried in `at.sums`); the
    `Running` it stopped at when the preempt signal came."""
    import torch

    model.train()
    device = val[1].device
    started = time.perf_counter()
    sums = at.sums or {
        "loss_sum": torch.zeros((), device=device),
        "correct": torch.zeros((), dtype=torch.int64, device=device),
        "samples": 0,
        "train_s": 0.0,
    }
    loss_sum, correct = sums["loss_sum"].to(device), sums["correct"].to(device)
    samples = int(sums["samples"])
    for index, indices in enumerate(order[at.batch :], start=at.batch):
        if flag.asked:
            train_s = sums["train_s"] + time.perf_counter() - started
            kept = {"loss_sum": loss_sum, "correct": correct, "samples": samples}
            return Running(at.epoch, index, at.rng_state, {**kept, "train_s": train_s})
        inputs, targets = batch(indices)
        batch_loss, batch_correct = train_step(model, optimizer, inputs, targets)
        loss_sum += batch_loss
        correct += batch_correct
        samples += len(targets)
        counter.step()
    train_s = sums["train_s"] + time.perf_counter() - started
    count = max(samples, 1)
    return EpochStats(
        loss=loss_sum.item() / count,
        train_acc=correct.item() / count,
        val_acc=evaluate(model, *val),
        samples_per_s=samples / max(train_s, 1e-9),
        train_seconds=train_s,
        seconds=train_s,
        samples=samples,
    )
