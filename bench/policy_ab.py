"""Two trees' placement pass side by side in one process: new ÷ old CPU time of
`SharingPolicy("auto").place()` on `bench/policy.py`'s inputs.

    python bench/policy_ab.py OLD_TREE NEW_TREE [--jobs 1000] [--gpus 8] [--inputs 40]
                              [--calls 6] [--json]

Why: two runs of `bench/policy.py` a minute apart differ by more than most changes to the pass
(the shared 2-core VM: docs/benchmarks.md, "Placement decision time"), so a change of a few per
cent cannot be resolved by timing one tree and then the other. Here each tree's `gpudesk` is
imported into the same process (each under its own modules: the first tree's are taken out of
`sys.modules` before the second is imported), each builds the same seeded inputs with this
script's copy of `bench/policy.py`'s generator, and each input's `place()` is timed in both
trees in turn (which goes first alternates), `--calls` times each, by the calling thread's CPU
time with the garbage collected before each call. What is kept is each input's fastest call in
each tree: the code's cost without the VM's hiccups. The answer is new ÷ old of the sums over
all inputs, and the median of the per-input ratios.

A tree against itself (`OLD_TREE` and `NEW_TREE` two copies of one commit) read 0.999–1.016 at
1,000 jobs on the 2-core VM (40 inputs, 6 calls) and 0.962 at 10,000 (12 inputs, 4 calls), so a
ratio within ±2 % at 1,000 jobs, ±4 % at 10,000, is no difference (docs/benchmarks.md). Scores
a pass keeps between passes (`filled_station._SCORES`) are kept in both trees alike: every call
after an input's first finds its GPUs' scores kept, as the engine's passes over an unchanged
station do.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


def percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def loaded(tree: Path, jobs: int, gpus: int, inputs: int) -> tuple[Callable[..., Any], list[Any]]:
    """The tree's `place` and its seeded inputs, built by its own classes."""
    for name in [m for m in sys.modules if m in ("gpudesk", "policy") or m.startswith("gpudesk.")]:
        del sys.modules[name]
    sys.path[:0] = [str(tree), str(BENCH)]
    try:
        generator = importlib.import_module("policy")  # this script's bench/policy.py
        collocation = importlib.import_module("gpudesk.policy.collocation")
    finally:
        del sys.path[:2]
    imported = Path(collocation.__file__).resolve()
    if not imported.is_relative_to(tree):
        raise SystemExit(f"policy_ab.py: imported gpudesk from {imported}, not from {tree}")
    rng = random.Random(42)
    made = []
    for _ in range(inputs):
        queue = generator.queue(rng, jobs)
        made.append((queue, generator.station(rng, gpus, queue)))
    return collocation.SharingPolicy("auto").place, made


def main() -> int | str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="the tree timed as the baseline")
    parser.add_argument("new", type=Path, help="the tree compared with it")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--inputs", type=int, default=40)
    parser.add_argument("--calls", type=int, default=6, help="timed calls per input and tree")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for name in ("jobs", "gpus", "inputs", "calls"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: at least 1, not {getattr(args, name)}")
    trees = [args.old.resolve(), args.new.resolve()]
    for tree in trees:
        if not (tree / "gpudesk" / "policy" / "collocation.py").is_file():
            return (
                f"policy_ab.py: {tree} is not a gpudesk tree (no gpudesk/policy/collocation.py "
                "there). Give two checkouts of the repository, the baseline first, e.g. a "
                "`git worktree add` of main and your branch's worktree."
            )
    passes = [loaded(tree, args.jobs, args.gpus, args.inputs) for tree in trees]
    fastest = [[float("inf")] * args.inputs for _ in trees]
    for call in range(args.calls):
        for index in range(args.inputs):
            order = (0, 1) if (call + index) % 2 == 0 else (1, 0)
            for which in order:
                place, inputs = passes[which]
                queue, station = inputs[index]
                gc.collect()
                start = time.thread_time()
                place(queue, station)
                took = (time.thread_time() - start) * 1000
                fastest[which][index] = min(fastest[which][index], took)
    old, new = fastest
    result = {
        "old": str(trees[0]),
        "new": str(trees[1]),
        "jobs": args.jobs,
        "gpus": args.gpus,
        "inputs": args.inputs,
        "calls": args.calls,
        "old_p50_ms": round(statistics.median(old), 3),
        "old_p99_ms": round(percentile(old, 99), 3),
        "new_p50_ms": round(statistics.median(new), 3),
        "new_p99_ms": round(percentile(new, 99), 3),
        "new_over_old": round(sum(new) / sum(old), 3),
        "median_ratio": round(statistics.median(n / o for o, n in zip(old, new, strict=True)), 3),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{args.jobs} queued jobs, {args.gpus} GPUs, {args.inputs} inputs, fastest of "
        f"{args.calls} CPU-timed calls each\n"
        f"old {trees[0]}: p50 {result['old_p50_ms']:.3f} ms  p99 {result['old_p99_ms']:.3f} ms\n"
        f"new {trees[1]}: p50 {result['new_p50_ms']:.3f} ms  p99 {result['new_p99_ms']:.3f} ms\n"
        f"new / old: {result['new_over_old']:.3f} (median per input {result['median_ratio']:.3f})"
    )
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
