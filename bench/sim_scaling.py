"""`gpudesk simulate` against trace length: wall time at several trace lengths, and its growth.

    python bench/sim_scaling.py [--heavy 1000,2000,5000] [--light 10000,100000]
                                [--policy auto] [--cap 180] [--code DIR] [--before DIR]
                                [--repeat K]
    python bench/sim_scaling.py --write N --load heavy|light FILE   # one trace, to a file

The traces are SYNTHETIC and seeded (the same file for the same N and load): N jobs drawn with
replacement from the CARMA Philly trace's 60 measured rows (`traces/carma-philly-t1.json`: its
mix of classes, sizes, peaks, estimators' guesses and run times), numbered 1..N, arriving at
exponential gaps on the trace's own station (4 x A100 40GB):

- heavy: a mean gap of 30 s, while t1's mean run time alone is ~27 min: ~54 GPU-minutes of work
  arrive a minute on 4 GPUs, so the queue grows to hundreds and thousands of jobs;
- light: a mean gap of 900 s (~45 % of the station's GPU-time, before any sharing), so the
  queue stays short and the run time of a replay is its number of events.

Each length runs `gpudesk simulate FILE --policy POLICY --json` in its own process, cut off at
`--cap` seconds (reported as "> cap"), with the package of `--code` (default: this checkout; an
earlier commit's, e.g. from `git archive COMMIT gpudesk | tar -x -C DIR`, to time before and after
in one sitting; `--before DIR` times that one too, just before `--code` on each trace, in
columns side by side). Per row: the wall time, its ratio to the previous row's, the ratio of the
lengths (linear growth keeps the first near the second, quadratic near its square) and the
machine's 1-minute load average after the row (the VM is shared: a row timed beside other work
reads slow; `--repeat K` times each trace K times, before and after in turn, and gives the
fastest, which such work stretches least). docs/benchmarks.md has the figures ("`gpudesk
simulate` against trace length", "`gpudesk simulate` under heavy overload").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT / "traces" / "carma-philly-t1.json"
SEED = 41
MEAN_GAP_S = {"heavy": 30.0, "light": 900.0}


def make_trace(n: int, load: str, seed: int = SEED) -> dict[str, Any]:
    """N jobs of t1's mix at the load's mean arrival gap (seeded)."""
    base = json.loads(PHILLY.read_text())
    rng = random.Random(f"{seed}-{load}-{n}")
    jobs, at = [], 0.0
    for i in range(n):
        job = dict(rng.choice(base["jobs"]))
        job["id"], job["arrival_s"] = i + 1, round(at, 3)
        jobs.append(job)
        at += rng.expovariate(1.0 / MEAN_GAP_S[load])
    return {
        "name": f"t1-mix-{load}-{n}",
        "source": (
            f"SYNTHETIC (bench/sim_scaling.py, seed {seed}): {n} jobs drawn from "
            f"carma-philly-t1's rows, exponential arrival gaps of {MEAN_GAP_S[load]:g} s mean"
        ),
        "station": base["station"],
        "jobs": jobs,
    }


def write_trace(n: int, load: str, path: Path) -> None:
    path.write_text(json.dumps(make_trace(n, load)) + "\n")


def time_simulate(path: Path, policy: str, cap: float, code: Path = ROOT) -> float | None:
    """Seconds `gpudesk simulate` took on the trace with the package under `code`, or None
    past `cap`. Run from `code` and with it first on the path: `python -m` puts its working
    folder before PYTHONPATH."""
    command = [sys.executable, "-m", "gpudesk", "simulate", str(path), "--policy", policy]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(code), os.environ.get("PYTHONPATH")))),
    }
    started = time.perf_counter()
    try:
        subprocess.run(
            [*command, "--json"], check=True, capture_output=True, timeout=cap, cwd=code, env=env
        )
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - started


def _lengths(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heavy", default="1000,2000,5000", help="heavy-load lengths")
    parser.add_argument("--light", default="10000,100000", help="light-load lengths")
    parser.add_argument("--policy", default="auto")
    parser.add_argument("--cap", type=float, default=180.0, help="seconds per replay at most")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout to time")
    parser.add_argument(
        "--before", type=Path, help="an earlier checkout, timed before --code on each trace"
    )
    parser.add_argument("--repeat", type=int, default=1, help="time each K times: the fastest")
    parser.add_argument("--write", type=int, metavar="N", help="write one trace of N jobs")
    parser.add_argument("--load", choices=sorted(MEAN_GAP_S), default="heavy")
    parser.add_argument("file", nargs="?", help="the trace file --write writes")
    args = parser.parse_args(argv)
    if args.write is not None:
        if not args.file:
            parser.error("--write needs a FILE")
        write_trace(args.write, args.load, Path(args.file))
        return 0
    codes = [c.resolve() for c in (args.before, args.code) if c is not None]
    named = " against ".join(str(c) for c in codes)
    print(f"gpudesk simulate --policy {args.policy} ({named}), cut off at {args.cap:g} s\n")
    columns = ["before", "× previous", "after", "× previous"] if args.before else []
    columns = columns or ["wall", "× previous"]
    print(f"| load | jobs | {' | '.join(columns)} | length × | load avg |")
    print("|---|---:|" + "---:|" * (len(columns) + 1) + "---:|")
    with tempfile.TemporaryDirectory() as folder:
        for load in ("heavy", "light"):
            previous: list[float | None] = [None] * len(codes)
            previous_n = 0
            for n in _lengths(getattr(args, load)):
                path = Path(folder) / f"{load}-{n}.json"
                write_trace(n, load, path)
                times: list[list[float | None]] = [[] for _ in codes]
                for _ in range(args.repeat):
                    for i, code in enumerate(codes):  # before, then after: the same minute
                        times[i].append(time_simulate(path, args.policy, args.cap, code))
                cells = []
                for i, runs in enumerate(times):
                    took = None if None in runs else min(t for t in runs if t is not None)
                    before = previous[i]
                    cells.append(f"{took:.1f} s" if took is not None else f"> {args.cap:g} s")
                    cells.append(f"{took / before:.1f}" if took and before else "-")
                    previous[i] = took
                length = f"{n / previous_n:g}" if previous_n else "-"
                previous_n = n
                row = [load, f"{n:,}", *cells, length, f"{os.getloadavg()[0]:.1f}"]
                print(f"| {' | '.join(row)} |", flush=True)
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
