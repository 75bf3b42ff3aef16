"""What the built-in training workloads share: exit statuses, their errors, thread and device
choice, and line output. Importing it stays cheap (torch is imported inside the functions)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
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
# the train/val split the run uses (a dataset factory's `split_seed`), set by `gpudesk select
# compare --splits K` on every job; the built-in workloads default --split-seed to it
ENV_SPLIT = "GPUDESK_SPLIT"
PROGRESS_EVERY = 10  # training steps between two `progress` lines


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


@dataclass
class StepCounter:
    """The run's training steps, with a `progress DONE[/TOTAL]` line every `every` of them on
    stderr (the job's log, so stdout keeps only the lines a report parses): how the gpudesk
    engine learns how fast the job runs beside others (docs/interference.md)."""

    total: int | None = None
    every: int = PROGRESS_EVERY
    done: int = 0

    def step(self) -> None:
        self.done += 1
        if self.done % self.every == 0:
            of = f"/{self.total}" if self.total else ""
            print(f"progress {self.done}{of}", file=sys.stderr, flush=True)


@dataclass
class Progress:
    """The epoch now running (0 before the first), read when the run is interrupted, and
    whether a SIGTERM came in.

    The SIGTERM handler raises `Terminated` at once, except inside `deferred()`: there it
    only sets `terminated`, and `Terminated` is raised when the block ends.
    """

    epoch: int = 0
    terminated: bool = False
    raise_on_signal: bool = True  # cleared for good once Terminated has been raised

    def check(self) -> None:
        if self.terminated:
            self.raise_on_signal = False  # a second SIGTERM must not break the report
            raise Terminated

    @contextmanager
    def deferred(self, active: bool = True) -> Iterator[None]:
        """Hold a SIGTERM back until the block is done (a no-op unless `active`).

        Around a local DataLoader's `iter()` and `next()`, for three reasons. An exception
        raised in there can land where Python drops it (an at-fork hook while workers start:
        the signal would be lost and the job train on), or halfway through receiving a
        batch's file descriptors from a worker (which then prints a ConnectionResetError
        traceback). And the workers forked in there must not die of the cancel that gpudesk
        sends the whole process group: SIGTERM is blocked in this thread, so they start with
        it blocked, until `_worker_ignores_sigterm` ignores it. A DataLoader's `next()` ends
        within a batch's work; a shared producer's may not, so that one stays interruptible.
        """
        if not active or not self.raise_on_signal:
            yield
            return
        try:
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        except (AttributeError, OSError, ValueError):  # no pthread_sigmask here
            mask = None
        self.raise_on_signal = False
        try:
            yield
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self.raise_on_signal = True
        self.check()


@contextmanager
def sigterm_raises(progress: Progress) -> Iterator[None]:
    """Turn the first SIGTERM into `Terminated` so the run can report where it stopped
    (at once, or when a `progress.deferred()` block ends)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        progress.terminated = True
        if progress.raise_on_signal:
            progress.check()  # raises, once: a second SIGTERM must not break the report

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def is_loader_error(exc: BaseException) -> bool:
    """Whether `exc` is the shared loader's LoaderError (without importing it if unused)."""
    protocol = sys.modules.get("gpudesk.loader.protocol")
    error_type = getattr(protocol, "LoaderError", None)
    return error_type is not None and isinstance(exc, error_type)


# a training workload's body: (its arguments, their parser, its progress, when main started)
WorkloadBody = Callable[[argparse.Namespace, argparse.ArgumentParser, "Progress", float], int]


def run_workload(
    argv: list[str] | None,
    build_parser: Callable[[], argparse.ArgumentParser],
    parse_args: Callable[[argparse.ArgumentParser, list[str] | None], argparse.Namespace],
    body: WorkloadBody,
) -> int:
    """A training workload's `main`: parse, then run `body` with SIGTERM raising and its known
    failures reported as one line and the documented exit status."""
    started = time.perf_counter()
    parser = build_parser()
    args = parse_args(parser, argv)
    progress = Progress()
    with sigterm_raises(progress):
        return run_reporting(lambda: body(args, parser, progress, started), progress)


def run_reporting(run: Callable[[], int], progress: Progress) -> int:
    """Run a workload's body; its known failures become one line on stderr and the documented
    exit status, never a traceback."""
    from gpudesk.workloads.data import DatasetUnavailable

    try:
        return run()
    except DatasetUnavailable as exc:
        say(f"error: {exc}", stream=sys.stderr)
        return EXIT_NO_DATA
    except TrainingDiverged as exc:
        say(f"error: {exc}; try a smaller --lr", stream=sys.stderr)
        return EXIT_DIVERGED
    except RuntimeError as exc:  # the shared loader failed (e.g. its producer is gone)
        if not is_loader_error(exc):
            raise
        say(f"error: shared loader: {exc}", stream=sys.stderr)
        return EXIT_NO_DATA
    except Terminated:
        say(f"interrupted at epoch {progress.epoch}", stream=sys.stderr)
        return EXIT_SIGTERM
    except KeyboardInterrupt:
        say(f"interrupted at epoch {progress.epoch}", stream=sys.stderr)
        return EXIT_SIGINT
    except BrokenPipeError:
        # Whoever read our stdout is gone (e.g. `| head`). Point stdout at /dev/null so the
        # interpreter's final flush does not raise a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
