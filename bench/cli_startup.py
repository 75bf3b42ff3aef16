"""How fast the commands people type start: `gpudesk --help`, `gpudesk top --once` and the
quickstart, for this tree and (optionally) another checkout, measured side by side.

    python bench/cli_startup.py [--baseline DIR] [--runs 7] [--quickstart-runs 1] [--json]

Each command runs as `python -m gpudesk ...` with PYTHONPATH set to the tree under test (so a
baseline checkout of an older commit runs its own code with this venv's packages), in a fresh
GPUDESK_HOME. Runs of the two trees alternate, so a busy machine slows both alike. `top --once`
samples a SIMULATED DGX Station A100 directly (no engine). The quickstart is
`gpudesk run profiles/quickstart.toml` (real torch jobs; about half a minute on 2 cores), off
with `--quickstart-runs 0`. Reported: the median wall time of each, and baseline / this tree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = {
    "--help": (["--help"], {}),
    "top --once": (["top", "--once"], {"GPUDESK_BACKEND": "sim:dgx-station-a100"}),
}


def run_once(tree: Path, argv: list[str], extra_env: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory(prefix="gpudesk-bench-") as home:
        env = {
            **os.environ,
            **extra_env,
            "PYTHONPATH": str(tree),
            "GPUDESK_HOME": home,
        }
        if "GPUDESK_BACKEND" not in extra_env:
            env.pop("GPUDESK_BACKEND", None)  # the caller's choice must not leak in
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "gpudesk", *argv],
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{tree}: gpudesk {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
        if argv and argv[0] == "run":
            subprocess.run(
                [sys.executable, "-m", "gpudesk", "engine", "stop"],
                cwd=tree,
                env=env,
                capture_output=True,
                check=False,
            )
        return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quickstart-runs", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    commands = dict(COMMANDS)
    runs = dict.fromkeys(commands, args.runs)
    if args.quickstart_runs:
        commands["run profiles/quickstart.toml"] = (["run", "profiles/quickstart.toml"], {})
        runs["run profiles/quickstart.toml"] = args.quickstart_runs
    timings: dict[str, dict[str, list[float]]] = {c: {t: [] for t in trees} for c in commands}
    for name, (argv, env) in commands.items():
        for _ in range(runs[name]):
            for label, tree in trees.items():  # alternate: load hits both alike
                timings[name][label].append(run_once(tree, argv, env))
    result = {
        name: {label: round(statistics.median(ts), 3) for label, ts in per_tree.items()}
        for name, per_tree in timings.items()
    }
    machine = f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores)"
    if args.json:
        print(json.dumps({"machine": machine, "median_s": result}, indent=2))
        return 0
    print(
        f"median wall time (s) on {machine}, {args.runs} runs each (quickstart "
        f"{args.quickstart_runs})"
    )
    header = f"{'command':32}" + "".join(f"{label:>12}" for label in trees)
    print(header + ("   this/baseline" if "baseline" in trees else ""))
    for name, per_tree in result.items():
        line = f"{name:32}" + "".join(f"{per_tree[label]:>12.3f}" for label in trees)
        if "baseline" in trees:
            line += f"   {per_tree['this tree'] / per_tree['baseline']:>13.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
