"""The calibration probe: a torch loop whose share of the GPU is set by an intensity.

`gpudesk calibrate` runs it alone and in pairs to measure how much jobs slow each other under
each sharing mechanism (docs/calibration.md)::

    python -m gpudesk.workloads.probe --intensity light|medium|heavy|membw --seconds S
    python -m gpudesk.workloads.probe --intensity heavy --steps N --burst B --gap-ms G

With `--steps` the probe is a job of fixed work rather than fixed time (as a queue's jobs are:
`bench/gpu_day.py --day probes` runs a day of them through the engine): it stops after N steps
and its progress lines say `progress DONE/N`, so the engine can tell how much is left.

Each *step* is a burst of kernels followed by a host-side gap (the time a training job spends
loading data or in Python between kernels). The kernels are square matmuls (`light`, `medium`,
`heavy`), which keep every SM busy while they run, or large device-to-device copies (`membw`),
which keep the DRAM busy; the gap is chosen so that the kernels run about 10 %, 35 %, 80 % (and
40 % for `membw`) of the time when the probe is alone. The burst ends with a device sync, so a
step is timed honestly: it is done when its kernels are, and under sharing the kernels stretch
while the gap does not, as in the interference model.

Alone, the probe calibrates its burst (how many kernels make about `BURST_MS`) and its gap; the
runner passes the same `--burst` and `--gap-ms` to the probes of a pair, so that a step is the
same work alone and shared and the ratio of steps per second is the rate the model predicts.

Output, one line each: `ready` when warmed up (with `--wait-go` it then waits for a line on
stdin, so that the probes of a pair measure the same seconds), `progress N` (steps done; the
progress convention of docs/calibration.md) about twice a second, and a final JSON summary with
`steps_per_s`. Runs on the CPU too (for tests), where the shares mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BURST_MS = 10.0  # the kernels of one step, alone
WARMUP_S = 1.0
PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True)
class Intensity:
    name: str
    kernel: str  # "matmul" or "copy"
    duty: float  # the share of the time its kernels run, alone
    size: int  # matmul side, or copy MiB (on a GPU)
    cpu_size: int  # the same on the CPU (tests)


INTENSITIES: dict[str, Intensity] = {
    i.name: i
    for i in (
        Intensity("light", "matmul", 0.10, 2048, 96),
        Intensity("medium", "matmul", 0.35, 4096, 128),
        Intensity("heavy", "matmul", 0.80, 4096, 128),
        Intensity("membw", "copy", 0.40, 1024, 4),
    )
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpudesk.workloads.probe",
        description="A GPU load of a set intensity, for `gpudesk calibrate`.",
    )
    parser.add_argument("--intensity", choices=sorted(INTENSITIES), default="medium")
    parser.add_argument("--seconds", type=float, default=5.0, help="Seconds to measure.")
    parser.add_argument(
        "--steps",
        type=int,
        default=0,
        help="Stop after this many steps instead (a job of fixed work; --seconds is ignored).",
    )
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument(
        "--burst", type=int, default=0, help="Kernels per step (0: calibrate, alone)."
    )
    parser.add_argument(
        "--gap-ms", type=float, default=-1.0, help="Host gap after each burst (<0: calibrate)."
    )
    parser.add_argument("--warmup", type=float, default=WARMUP_S, help="Seconds of warm-up.")
    parser.add_argument(
        "--wait-go", action="store_true", help="After `ready`, wait for a line on stdin."
    )
    parser.add_argument(
        "--check", action="store_true", help="Print what torch sees (JSON) and exit."
    )
    return parser


def check() -> dict[str, Any]:
    """What torch sees: for the runner's pre-flight, in a process of its own."""
    import torch

    cuda = bool(torch.cuda.is_available())
    return {
        "torch": torch.__version__,
        "cuda": cuda,
        "cuda_version": torch.version.cuda,
        "devices": torch.cuda.device_count() if cuda else 0,
        "name": torch.cuda.get_device_name(0) if cuda else None,
    }


def _kernel(intensity: Intensity, device: Any) -> Callable[[], None]:
    import torch

    on_gpu = device.type == "cuda"
    if intensity.kernel == "matmul":
        side = intensity.size if on_gpu else intensity.cpu_size
        dtype = torch.bfloat16 if on_gpu else torch.float32
        a = torch.randn(side, side, device=device, dtype=dtype)
        b = torch.randn(side, side, device=device, dtype=dtype)
        out = torch.empty(side, side, device=device, dtype=dtype)

        def matmul() -> None:
            torch.matmul(a, b, out=out)

        return matmul
    mib = intensity.size if on_gpu else intensity.cpu_size
    count = mib * 1024 * 1024 // 4
    src = torch.ones(count, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    return copy


def _sync(device: Any) -> Callable[[], None]:
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _warm_up_and_time(kernel: Callable[[], None], sync: Callable[[], None], warmup: float) -> float:
    """Warm up (allocator, cuBLAS heuristics, clocks), then time one kernel: its ms."""
    until = time.perf_counter() + max(0.0, warmup)
    warm = 0
    while warm < 3 or time.perf_counter() < until:
        kernel()
        sync()
        warm += 1
    timed = 20
    start = time.perf_counter()
    for _ in range(timed):
        kernel()
    sync()
    return (time.perf_counter() - start) * 1000.0 / timed


def run(args: argparse.Namespace, out: Any = sys.stdout) -> dict[str, Any]:
    import torch

    intensity = INTENSITIES[args.intensity]
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("probe: --device cuda, but CUDA is not available to torch here")
    name = args.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    kernel, sync = _kernel(intensity, device), _sync(device)

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    kernel_ms = _warm_up_and_time(kernel, sync, args.warmup)
    burst = args.burst if args.burst > 0 else max(1, round(BURST_MS / max(kernel_ms, 1e-3)))
    burst_ms = burst * kernel_ms
    gap_ms = args.gap_ms if args.gap_ms >= 0 else burst_ms * (1.0 - intensity.duty) / intensity.duty
    gap_s = gap_ms / 1000.0

    say("ready")
    if args.wait_go:
        sys.stdin.readline()

    steps = 0
    total_steps = max(0, args.steps)
    of_total = f"/{total_steps}" if total_steps else ""
    start = time.perf_counter()
    end = float("inf") if total_steps else start + args.seconds
    next_progress = start + PROGRESS_EVERY_S
    last_done = start
    busy_s = 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(burst):
            kernel()
        sync()
        done = time.perf_counter()
        busy_s += done - t0
        if done > end:
            break
        steps += 1
        last_done = done
        if total_steps and steps >= total_steps:
            break
        if done >= next_progress:
            say(f"progress {steps}{of_total}")
            next_progress += PROGRESS_EVERY_S
        if gap_s > 0:
            time.sleep(min(gap_s, max(0.0, end - time.perf_counter())))
    elapsed = max(last_done - start, 1e-9)
    total = max(time.perf_counter() - start, 1e-9)
    summary = {
        "probe": "summary",
        "intensity": intensity.name,
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "steps": steps,
        "seconds": round(elapsed, 4),
        "steps_per_s": steps / elapsed,
        "burst": burst,
        "kernel_ms": round(kernel_ms, 5),
        "gap_ms": round(gap_ms, 4),
        "busy_share": round(busy_s / total, 4),
        "idle_s": round(total - busy_s, 4),  # its gaps: at least (steps - 1) x gap_ms
    }
    say(f"progress {steps}{of_total}")
    say(json.dumps(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.check:
        print(json.dumps(check()), flush=True)
        return 0
    if args.seconds <= 0:
        _parser().error("--seconds must be positive")
    if args.steps < 0:
        _parser().error("--steps must be 0 (run --seconds) or positive")
    try:
        run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 141
    return 0


if __name__ == "__main__":
    sys.exit(main())
