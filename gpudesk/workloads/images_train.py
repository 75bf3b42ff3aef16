"""Train a small CNN on JPEG crops whose every sample costs CPU to prepare: a data-loader benchmark.

    python -m gpudesk.workloads.images_train [--epochs 2] [--batch-size 64] [--workers 2]
        [--seed 0] [--lr 0.05] [--size 2048] [--image-px 96] [--max-steps N]
        [--threads N] [--loader auto|shared|local] [--dataset-name images]
        [--device auto|cpu|cuda]

The data is `gpudesk.workloads.images.make_dataset`: each sample is a JPEG decode, a random
resized crop, colour jitter, blur and flip, about 2 ms of one CPU core. The model costs
about as much per sample on a CPU core and next to nothing on a GPU, where the input
pipeline sets the pace unless enough workers feed it.

`--loader local` iterates a plain `torch.utils.data.DataLoader`; `--loader shared` the
`gpudesk.loader.SharedLoader`, which serves batches of the same dataset to every job that
names it; `--loader auto` (the default) uses the shared loader when it can be imported and
falls back to a local DataLoader otherwise (SharedLoader itself falls back to one when no
producer is running; the result's `loader` says which was used). Switching a script between
the two is a change of two lines, the import and the constructor; the training loop is
untouched::

    from torch.utils.data import DataLoader                               # before
    loader = DataLoader(make_dataset(size=2048), batch_size=64, shuffle=True, num_workers=2)

    from gpudesk.loader import SharedLoader                               # after
    loader = SharedLoader("images", batch_size=64, workers=2,
                          factory="gpudesk.workloads.images:make_dataset",
                          factory_kwargs={"size": 2048})

    for epoch in range(epochs):
        for images, labels in loader:  # uint8 [B, 3, 96, 96], int64 [B]
            ...

Output (stdout, one flushed line each): a `config ...` line, one
`epoch E/N loss=... acc=... samples_per_s=... data_wait_s=... time=...s` line per epoch,
then `result {json}` with train_acc, final_loss, epochs, steps, samples, samples_per_s,
wall_s, loader ("local" or "shared"), data_wait_s (total seconds spent waiting for batches),
params, device and workers.

Exit status: 0 done; 1 data unavailable (scikit-learn or Pillow missing, or the shared
loader failed: `--loader shared` with no `gpudesk.loader` or no producer running for
`--dataset-name`, or a producer lost for good); 2 bad arguments; 3 training diverged;
141 stdout closed; 143 on SIGTERM (130 on SIGINT), after printing `interrupted at epoch E`
to stderr (E is 0 if no epoch had started).

torch is imported inside `main()` so that importing this module stays cheap.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpudesk import optimizers
from gpudesk.optimizers import Optimizer
from gpudesk.quick_exit import run_and_leave
from gpudesk.workloads.common import (
    EXIT_OK,
    SGD_MOMENTUM,
    Progress,
    StepCounter,
    TrainingDiverged,
    is_loader_error,
    resolve_device,
    run_workload,
    say,
    threads_from_env,
)
from gpudesk.workloads.images import NUM_CLASSES, DatasetUnavailable, check_available

if TYPE_CHECKING:
    import torch

WEIGHT_DECAY = 5e-4
FACTORY = "gpudesk.workloads.images:make_dataset"
# Per-channel mean and std of the photos' pixels, for normalising uint8 input on the device.
PIXEL_MEAN = (0.45, 0.43, 0.40)
PIXEL_STD = (0.25, 0.24, 0.26)


@dataclass(frozen=True)
class EpochStats:
    loss: float
    train_acc: float
    steps: int
    samples: int
    data_wait_s: float
    seconds: float

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpudesk.workloads.images_train",
        description="Train a small CNN on JPEG crops that cost CPU to decode and augment.",
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="data-loading processes")
    parser.add_argument("--seed", type=int, default=0, help="seeds data, init and shuffling")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate (SGD)")
    parser.add_argument("--size", type=int, default=2048, help="samples in the dataset")
    parser.add_argument("--image-px", type=int, default=96, help="side of the input images")
    parser.add_argument(
        "--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: $OMP_NUM_THREADS, else the CPUs left after "
        "--workers, at least 1)",
    )
    parser.add_argument(
        "--loader",
        choices=("auto", "shared", "local"),
        default="auto",
        help="shared: gpudesk.loader.SharedLoader; local: torch DataLoader; "
        "auto: shared when available, else local",
    )
    parser.add_argument(
        "--dataset-name", default="images", help="the shared loader's name for the dataset"
    )
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    for flag in ("epochs", "batch_size", "size"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be a positive integer")
    for flag in ("workers", "max_steps", "seed"):
        if getattr(args, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be >= 0")
    if args.image_px < 8:
        parser.error("--image-px must be at least 8")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be a positive integer")
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.error("--lr must be a positive number")
    if not args.dataset_name.strip():
        parser.error("--dataset-name must not be empty")
    return args


def main(argv: list[str] | None = None) -> int:
    return run_workload(argv, build_parser, parse_args, _run)


def _run(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    progress: Progress,
    started: float,
) -> int:
    check_available()  # before importing torch: fail fast if there is no data
    import torch

    threads = configure_threads(args.threads, args.workers)
    device = resolve_device(args.device, parser)
    torch.manual_seed(args.seed)
    model = build_cnn().to(device)
    optimizer = optimizers.SGD(
        model.parameters(), lr=args.lr, momentum=SGD_MOMENTUM, weight_decay=WEIGHT_DECAY
    )
    loader, loader_kind = build_loader(args, pin_memory=device.type == "cuda")
    params = sum(p.numel() for p in model.parameters())
    say(
        f"config params {params} device {device} threads {threads} loader {loader_kind} "
        f"workers {args.workers} dataset {args.dataset_name} samples {args.size} "
        f"image_px {args.image_px} lr {args.lr:g} batch {args.batch_size} "
        f"epochs {args.epochs} max_steps {args.max_steps} seed {args.seed}"
    )

    history: list[EpochStats] = []
    steps_left = args.max_steps or None
    counter = StepCounter(total=steps_left)
    for epoch in range(1, args.epochs + 1):
        progress.epoch = epoch
        set_epoch(loader, epoch - 1)
        stats = train_one_epoch(
            model,
            optimizer,
            loader,
            device,
            steps_left,
            progress,
            defer_sigterm=loader_kind == "local",
            counter=counter,
        )
        progress.check()
        if not math.isfinite(stats.loss):
            raise TrainingDiverged(epoch, stats.loss)
        history.append(stats)
        say(
            f"epoch {epoch}/{args.epochs} loss={stats.loss:.4f} acc={stats.train_acc:.4f} "
            f"samples_per_s={stats.samples_per_s:.1f} data_wait_s={stats.data_wait_s:.3f} "
            f"time={stats.seconds:.2f}s"
        )
        if steps_left is not None:
            steps_left -= stats.steps
            if steps_left <= 0:
                break

    result = summarize(
        history, params, device, loader_kind, args.workers, time.perf_counter() - started
    )
    say("result " + json.dumps(result, separators=(",", ":")))
    return EXIT_OK


# --- data ----------------------------------------------------------------------------------


def build_loader(args: argparse.Namespace, pin_memory: bool = False) -> tuple[Iterable[Any], str]:
    """The batches to train on, and which loader serves them ("shared" or "local")."""
    if args.loader in ("shared", "auto"):
        try:
            from gpudesk.loader import SharedLoader
        except ImportError as exc:
            if args.loader == "shared":
                raise DatasetUnavailable(
                    f"--loader shared: cannot import gpudesk.loader ({exc})"
                ) from exc
            say(
                f"note: shared loader unavailable ({exc}); using a local DataLoader",
                stream=sys.stderr,
            )
        else:
            try:
                loader = SharedLoader(
                    args.dataset_name,
                    batch_size=args.batch_size,
                    factory=FACTORY,
                    factory_kwargs={"size": args.size, "image_px": args.image_px},
                    workers=args.workers,
                    seed=args.seed,
                    fallback=(args.loader == "auto"),
                )
            except RuntimeError as exc:
                if not is_loader_error(exc):
                    raise
                raise DatasetUnavailable(str(exc)) from exc
            # With fallback, a SharedLoader that finds no producer runs the factory locally.
            kind = "local" if getattr(loader, "mode", "shared") == "local" else "shared"
            if kind == "local":
                say(
                    f"note: no shared loader {args.dataset_name!r} is running; "
                    "SharedLoader uses a local DataLoader",
                    stream=sys.stderr,
                )
            return loader, kind
    return build_local_loader(args, pin_memory), "local"


def build_local_loader(args: argparse.Namespace, pin_memory: bool = False) -> Any:
    import torch
    from torch.utils.data import DataLoader

    from gpudesk.workloads.images import make_dataset

    dataset = make_dataset(size=args.size, image_px=args.image_px, seed=args.seed)
    return DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        generator=torch.Generator().manual_seed(args.seed),
        pin_memory=pin_memory,
        worker_init_fn=_worker_ignores_sigterm,
    )


def _worker_ignores_sigterm(worker_id: int) -> None:
    """A DataLoader worker leaves SIGTERM to the main process.

    gpudesk cancels a job by signalling its whole process group. A worker killed by that
    signal makes torch raise "DataLoader worker ... is killed by signal" in the main process,
    racing the clean `interrupted at epoch E` exit. Ignoring it, the worker stops when the
    main process shuts the loader down (or, if that died, when torch's watchdog sees the
    parent gone). Workers are forked inside `Progress.deferred()`, with SIGTERM blocked,
    so none can arrive before this runs.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def set_epoch(loader: Any, epoch: int) -> None:
    """Give the dataset's augmentations a fresh stream per epoch, where the loader allows it.

    A DataLoader without persistent workers copies the dataset into its workers when an
    epoch's iteration starts, so setting the epoch here reaches them.
    """
    target = loader if hasattr(loader, "set_epoch") else getattr(loader, "dataset", None)
    setter = getattr(target, "set_epoch", None)
    if callable(setter):
        setter(epoch)


# --- model and training --------------------------------------------------------------------


def build_cnn() -> torch.nn.Sequential:
    """Three conv blocks and a linear head: ~25k parameters, ~7 MFLOP per 96×96 image."""
    from torch import nn

    def block(c_in: int, c_out: int, stride: int) -> list[nn.Module]:
        return [
            nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
        ]

    return nn.Sequential(
        *block(3, 16, stride=2),
        nn.MaxPool2d(2),
        *block(16, 32, stride=1),
        nn.MaxPool2d(2),
        *block(32, 64, stride=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, NUM_CLASSES),
    )


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 [B, 3, H, W] → float32, scaled to [0, 1] then standardised per channel."""
    import torch

    mean = torch.tensor(PIXEL_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(PIXEL_STD, device=images.device).view(1, 3, 1, 1)
    return (images.float().div_(255.0) - mean) / std


def train_one_epoch(
    model: torch.nn.Module,
    optimizer: Optimizer,
    loader: Iterable[Any],
    device: torch.device,
    max_steps: int | None,
    progress: Progress,
    defer_sigterm: bool = False,
    counter: StepCounter | None = None,
) -> EpochStats:
    """One pass over `loader` (or `max_steps` batches of it)."""
    import torch
    from torch.nn import functional

    model.train()
    epoch_start = time.perf_counter()
    data_wait = 0.0
    # Accumulate on the device and read once per epoch: one sync, not one per batch.
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    steps = samples = 0
    with progress.deferred(defer_sigterm):  # a DataLoader forks its workers here
        batches = iter(loader)
    while max_steps is None or steps < max_steps:
        wait_start = time.perf_counter()
        with progress.deferred(defer_sigterm):
            batch = next(batches, None)
        if batch is None:
            break
        images, labels = batch
        data_wait += time.perf_counter() - wait_start
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        logits = model(normalize(images))
        loss = functional.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach() * len(labels)
        correct += (logits.detach().argmax(dim=1) == labels).sum()
        steps += 1
        samples += len(labels)
        if counter is not None:
            counter.step()
    del batches  # shuts a DataLoader's workers down now, not at the next epoch
    seconds = time.perf_counter() - epoch_start
    count = max(samples, 1)
    return EpochStats(
        loss=loss_sum.item() / count,
        train_acc=correct.item() / count,
        steps=steps,
        samples=samples,
        data_wait_s=data_wait,
        seconds=seconds,
    )


def configure_threads(requested: int | None, workers: int) -> int:
    """Apply --threads, else $OMP_NUM_THREADS, else the CPUs the data workers leave free;
    return the count.

    Not torch's default (every CPU): its threads spin while the workers decode, and on a
    2-CPU machine with 2 workers that halves the throughput (~260 vs ~530 samples/s).
    """
    import torch

    count = requested if requested is not None else threads_from_env()
    if count is None:
        count = max(1, _cpus_available() - workers)
    torch.set_num_threads(count)
    return torch.get_num_threads()


def _cpus_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def summarize(
    history: list[EpochStats],
    params: int,
    device: torch.device,
    loader_kind: str,
    workers: int,
    wall_s: float,
) -> dict[str, object]:
    last = history[-1] if history else EpochStats(math.nan, 0.0, 0, 0, 0.0, 0.0)
    samples = sum(stats.samples for stats in history)
    train_seconds = sum(stats.seconds for stats in history)
    return {
        "train_acc": round(last.train_acc, 4),
        "final_loss": round(last.loss, 6) if math.isfinite(last.loss) else None,
        "epochs": len(history),
        "steps": sum(stats.steps for stats in history),
        "samples": samples,
        "samples_per_s": round(samples / train_seconds, 1) if train_seconds > 0 else 0.0,
        "wall_s": round(wall_s, 3),
        "loader": loader_kind,
        "data_wait_s": round(sum(stats.data_wait_s for stats in history), 3),
        "params": params,
        "device": str(device),
        "workers": workers,
    }


if __name__ == "__main__":
    run_and_leave(main)
