"""The training loop the built-in classifiers share (`digits`, an MLP on the 8x8 digits, and
`mnist`, the selection proxy's CNN on MNIST-5k): their common flags, one epoch of fitting, the
epoch lines, the val and target-class accuracies and the `result {json}` fields.

torch is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudesk.optimizers import Optimizer
from gpudesk.workloads.common import (
    ENV_SPLIT,
    Progress,
    StepCounter,
    TrainingDiverged,
    say,
    threads_from_env,
)
from gpudesk.workloads.data import parse_classes

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EpochStats:
    loss: float
    train_acc: float
    val_acc: float
    samples_per_s: float
    train_seconds: float
    seconds: float
    samples: int  # trained on this epoch


def add_run_arguments(
    parser: argparse.ArgumentParser,
    *,
    dataset: str,
    factory: str,
    classes: int,
    local_split: str | None = None,
) -> None:
    """The flags every built-in training workload shares: where it runs (--device, --threads),
    where its data comes from (--loader, --dataset-name, --split-seed) and --target-classes.
    `local_split`: how --loader local splits the data, where it does not follow --split-seed."""
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: $OMP_NUM_THREADS, else torch's default)",
    )
    parser.add_argument(
        "--loader",
        choices=("local", "shared"),
        default="local",
        help=f"local: the whole train split in memory; shared: batches from the shared loader "
        f"--dataset-name ({factory} with split=train), which may serve a data selection of it",
    )
    parser.add_argument("--dataset-name", default=dataset, help="the shared loader's name")
    parser.add_argument(
        "--split-seed",
        type=int,
        default=os.environ.get(ENV_SPLIT) or "0",  # argparse applies `type` to it
        help=("with --loader shared: " if local_split else "")
        + f"the split_seed of {factory}: the job evaluates on that split's val part "
        f"(default: ${ENV_SPLIT}, which `gpudesk select compare --splits` sets, else 0); with "
        "--loader shared, the loader's dataset must be that split's train part"
        + (f"; {local_split}" if local_split else ""),
    )
    parser.add_argument(
        "--target-classes",
        type=lambda text: class_list(text, classes),
        default=None,
        metavar="C,C,...",
        help="also report target_acc: the accuracy on the val samples of these classes (the "
        "target a targeted selection such as less-P was asked to serve), e.g. 3,8",
    )


def check_run_arguments(
    parser: argparse.ArgumentParser, args: argparse.Namespace, positive: tuple[str, ...]
) -> argparse.Namespace:
    """One usage error for a flag out of range: `positive` integers, --threads, --lr, --seed
    and --split-seed."""
    for flag in positive:
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be a positive integer")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be a positive integer")
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.error("--lr must be a positive number")
    if args.seed < 0:
        parser.error("--seed must be >= 0")
    if args.split_seed < 0:
        parser.error("--split-seed must be >= 0")
    return args


def class_list(text: str, classes: int) -> list[int]:
    """`--target-classes 3,8` as [3, 8]; a bad list is an ArgumentTypeError (a usage error)."""
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected class numbers separated by commas, e.g. 3,8"
        ) from None
    try:
        return list(parse_classes(numbers, classes) or ())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("classes: ", "")) from None


def configure_threads(requested: int | None) -> int:
    """Apply --threads, else $OMP_NUM_THREADS, else keep torch's default; return the count."""
    import torch

    count = requested if requested is not None else threads_from_env()
    if count is not None:
        torch.set_num_threads(count)
    return torch.get_num_threads()


def train_epochs(
    epochs: int, progress: Progress, one_epoch: Callable[[], EpochStats]
) -> list[EpochStats]:
    """Run `one_epoch` `epochs` times, printing each epoch's line; stop on a diverged loss."""
    history: list[EpochStats] = []
    for epoch in range(1, epochs + 1):
        progress.epoch = epoch
        stats = one_epoch()
        if not math.isfinite(stats.loss):
            raise TrainingDiverged(epoch, stats.loss)
        history.append(stats)
        say(
            f"epoch {epoch}/{epochs} loss {stats.loss:.4f} "
            f"train_acc {stats.train_acc:.4f} val_acc {stats.val_acc:.4f} "
            f"samples/s {stats.samples_per_s:.0f} time {stats.seconds:.2f}s"
        )
    return history


def fit_epoch(
    model: torch.nn.Module,
    optimizer: Optimizer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    x_val: torch.Tensor,
    y_val: torch.Tensor,
    counter: StepCounter | None = None,
) -> EpochStats:
    """One pass over `batches` of (inputs, targets) on the model's device, then the val
    accuracy."""
    import torch

    model.train()
    epoch_start = time.perf_counter()
    device = y_val.device
    # Accumulate on the device and read once per epoch: one sync, not one per batch.
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    samples = 0
    for inputs, targets in batches:
        batch_loss, batch_correct = train_step(model, optimizer, inputs, targets)
        loss_sum += batch_loss
        correct += batch_correct
        samples += len(targets)
        if counter is not None:
            counter.step()
    train_seconds = time.perf_counter() - epoch_start
    count = max(samples, 1)
    return EpochStats(
        loss=loss_sum.item() / count,
        train_acc=correct.item() / count,
        val_acc=evaluate(model, x_val, y_val),
        samples_per_s=samples / max(train_seconds, 1e-9),
        train_seconds=train_seconds,
        seconds=time.perf_counter() - epoch_start,
        samples=samples,
    )


def train_step(
    model: torch.nn.Module,
    optimizer: Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on a batch; its summed loss and its count of correct predictions, on
    the device (not read: a read is a sync). The one step every loop here takes, so a run
    resumed from a checkpoint (workloads.checkpoint) does exactly what an uninterrupted one does."""
    from torch.nn import functional

    logits = model(inputs)
    loss = functional.cross_entropy(logits, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach() * len(targets), (logits.detach().argmax(dim=1) == targets).sum()


def evaluate(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    import torch

    model.eval()
    with torch.inference_mode():
        predictions = model(inputs).argmax(dim=1)
    return (predictions == targets).double().mean().item()


def target_accuracy(
    model: torch.nn.Module, x_val: torch.Tensor, y_val: torch.Tensor, classes: list[int]
) -> float | None:
    """The final model's accuracy on the val samples of `classes` (None: the val part has
    none of them)."""
    import torch

    wanted = torch.isin(y_val, torch.tensor(classes, device=y_val.device))
    if not bool(wanted.any()):
        return None
    return round(evaluate(model, x_val[wanted], y_val[wanted]), 4)


def summarize(
    history: list[EpochStats],
    params: int,
    device: torch.device,
    wall_s: float,
    n_train: int,
) -> dict[str, object]:
    last = history[-1]
    train_seconds = sum(stats.train_seconds for stats in history)
    return {
        "val_acc": round(last.val_acc, 4),
        "best_val_acc": round(max(stats.val_acc for stats in history), 4),
        "final_loss": round(last.loss, 6),
        "epochs": len(history),
        "samples_per_s": round(n_train * len(history) / train_seconds, 1),
        "params": params,
        "device": str(device),
        "wall_s": round(wall_s, 3),
    }
