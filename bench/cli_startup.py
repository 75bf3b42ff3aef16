"""How fast the commands people type start: `gpudesk --version`, `gpudesk --help`, `gpudesk top
--once`, `gpudesk queue` (against a running engine) and the quickstart, for this tree and
(optionally) another checkout, measured side by side.

    python bench/cli_startup.py [--baseline DIR] [--baseline-python PY] [--runs 7]
                                [--quickstart-runs 1] [--json]

Each command runs as `python -m gpudesk ...` (beside `python -c pass`, Python's own start, and
`gpudesk --version`; `--help` keeps its text in a cache folder of each tree's, as on a user's
machine: the unmeasured first run renders it) with PYTHONPATH set to the tree under test (so a
baseline checkout of an older commit runs its own code with this venv's packages; with
`--baseline-python`, another venv's, to compare versions of a dependency), in a fresh
GPUDESK_HOME; `queue` asks an engine started once per tree on an empty store. Python's bytecode
cache is on for the measured commands, as on a user's machine (pip compiles what it installs; a
checkout caches on first use): PYTHONDONTWRITEBYTECODE, set in some sandboxes, is dropped for
them, and each command runs once unmeasured first. Runs of the two trees alternate, so a busy
machine slows both alike. `top --once` samples a SIMULATED DGX Station A100 directly (no
engine). The quickstart is `gpudesk run profiles/quickstart.toml` (real torch jobs; about half a
minute on 2 cores), off with `--quickstart-runs 0`. Reported: the median wall time of each, and
baseline / this tree.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Python's own start, the floor every command stands on (issue 37 asks side by side with it).
FLOOR = "python -c pass"
COMMANDS = {
    FLOOR: ([], {}),
    "--version": (["--version"], {}),
    "--help": (["--help"], {}),
    "top --once": (["top", "--once"], {"GPUDESK_BACKEND": "sim:dgx-station-a100"}),
}


# Commands that ask the tree's long-lived engine (its home is given), not a fresh home.
ENGINE_COMMANDS = {"queue": ["queue"]}


# Each tree's own user cache folder (where `gpudesk --help` keeps its text once rendered), kept
# across its runs as on a user's machine, apart from the bench user's own.
CACHES: dict[Path, str] = {}


def environment(tree: Path, home: str, extra_env: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra_env, "PYTHONPATH": str(tree), "GPUDESK_HOME": home}
    env["XDG_CACHE_HOME"] = CACHES.setdefault(tree, tempfile.mkdtemp(prefix="gpudesk-bench-cache-"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's machine caches bytecode
    env["GPUDESK_CONFIG"] = ""  # the bench's user's own defaults must not leak in
    if "GPUDESK_BACKEND" not in extra_env:
        env.pop("GPUDESK_BACKEND", None)  # the caller's choice must not leak in
    return env


def run_once(
    python: str,
    tree: Path,
    argv: list[str],
    extra_env: dict[str, str],
    engine_home: str | None = None,
) -> float:
    with tempfile.TemporaryDirectory(prefix="gpudesk-bench-") as fresh:
        env = environment(tree, engine_home or fresh, extra_env)
        started = time.perf_counter()
        command = [python, "-c", "pass"] if not argv else [python, "-m", "gpudesk", *argv]
        done = subprocess.run(
            command,
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
                [python, "-m", "gpudesk", "engine", "stop"],
                cwd=tree,
                env=env,
                capture_output=True,
                check=False,
            )
        return elapsed


@contextlib.contextmanager
def engine(python: str, tree: Path) -> Iterator[str]:
    """A personal engine of `tree` on an empty store, for the commands that ask one: its home."""
    with tempfile.TemporaryDirectory(prefix="gpudesk-bench-engine-") as home:
        env = environment(tree, home, {"GPUDESK_BACKEND": "none"})
        command = [python, "-m", "gpudesk", "engine"]
        subprocess.run([*command, "start"], cwd=tree, env=env, capture_output=True, check=True)
        try:
            yield home
        finally:
            subprocess.run([*command, "stop"], cwd=tree, env=env, capture_output=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--baseline-python", help="the interpreter (venv) the baseline runs with")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quickstart-runs", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    trees = {"this tree": (sys.executable, ROOT)}
    if args.baseline is not None or args.baseline_python is not None:
        baseline = (args.baseline or ROOT).resolve()
        trees = {"baseline": (args.baseline_python or sys.executable, baseline), **trees}
    commands = dict(COMMANDS)
    commands.update({name: (argv, {}) for name, argv in ENGINE_COMMANDS.items()})
    runs = dict.fromkeys(commands, args.runs)
    if args.quickstart_runs:
        commands["run profiles/quickstart.toml"] = (["run", "profiles/quickstart.toml"], {})
        runs["run profiles/quickstart.toml"] = args.quickstart_runs
    timings: dict[str, dict[str, list[float]]] = {c: {t: [] for t in trees} for c in commands}
    with contextlib.ExitStack() as stack:
        homes = {label: stack.enter_context(engine(*how)) for label, how in trees.items()}
        for name, (argv, env) in commands.items():
            for label, (python, tree) in trees.items():  # once unmeasured: the bytecode cache
                home = homes[label] if name in ENGINE_COMMANDS else None
                run_once(python, tree, argv, env, home)
            for _ in range(runs[name]):
                for label, (python, tree) in trees.items():  # alternate: load hits both alike
                    home = homes[label] if name in ENGINE_COMMANDS else None
                    timings[name][label].append(run_once(python, tree, argv, env, home))
    for folder in CACHES.values():
        shutil.rmtree(folder, ignore_errors=True)
    result = {
        name: {label: round(statistics.median(ts), 3) for label, ts in per_tree.items()}
        for name, per_tree in timings.items()
    }
    machine = f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores)"
    pythons = {label: python for label, (python, _) in trees.items()}
    if args.json:
        print(json.dumps({"machine": machine, "python": pythons, "median_s": result}, indent=2))
        return 0
    print(
        f"median wall time (s) on {machine}, {args.runs} runs each (quickstart "
        f"{args.quickstart_runs}); interpreters: {pythons}"
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
    from quiet_pipe import run_main

    run_main(main)
