"""Data selection: quality vs cost of each preset on a real dataset, and the issue's checks.

    python bench/selection.py [--profile profiles/selection.toml] [--splits 3] [--seeds 3]
                              [--presets full,random-25,...] [--metric val_acc] [--job NAME]
                              [--out FILE.json]

Starts a fresh engine in a temporary GPUDESK_HOME (empty selection cache), runs
`gpudesk select compare PROFILE --presets ... --splits K --seeds N` (every pre-pass fresh, every
training job on the shared loader under its preset, one job at a time), prints its tables and
checks, then checks what issue 21 asks and exits 1 if one is missed:

- at least 3 splits × 3 seeds per preset;
- a cached reuse (what the training job's loader spent taking the cached selection) costs
  <= 1 % of the pre-pass's own compute time, for every preset whose pre-pass trains a proxy
  (random, stratified and dedup cost milliseconds, about what the lookup's checksum does);
- for a targeted preset (less-P) whose target holds only some of the classes (e.g.
  profiles/selection-target.toml with --metric target_acc): its kept set holds the target's
  classes at >= 2x their share of the data, and it beats random at the same percent by more
  than the spread, with a paired verdict of "better".

Every preset's verdict against random (better, WORSE, no different) is printed, not checked: a
preset that does worse than random is a finding, not a failure of the bench.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from gpudesk.cli.compare_report import MIN_SEEDS, MIN_SPLITS, REUSE_TARGET

ROOT = Path(__file__).resolve().parents[1]
GPUDESK = [sys.executable, "-m", "gpudesk"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(ROOT / "profiles" / "selection.toml"))
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--presets",
        default="full,random-25,stratified-25,loss-25,el2n-25,coverage-25,dedup-25,less-25",
    )
    parser.add_argument("--metric", default="val_acc")
    parser.add_argument("--job", default=None, help="the training job, where several read the data")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpudesk-bench-selection-") as home:
        env = {**os.environ, "GPUDESK_HOME": home}
        env.pop("GPUDESK_BACKEND", None)
        out = Path(home) / "compare.json"
        try:
            run = subprocess.run(
                [
                    *GPUDESK,
                    "select",
                    "compare",
                    args.profile,
                    "--presets",
                    args.presets,
                    "--splits",
                    str(args.splits),
                    "--seeds",
                    str(args.seeds),
                    "--metric",
                    args.metric,
                    "--out",
                    str(out),
                    *(["--job", args.job] if args.job else []),
                ],
                env=env,
                cwd=ROOT,
                text=True,
                capture_output=True,
            )
        finally:
            subprocess.run([*GPUDESK, "engine", "stop"], env=env, capture_output=True)
        print(run.stdout)
        if run.returncode != 0 or not out.exists():
            print(run.stderr, file=sys.stderr)
            return 1
        report = json.loads(out.read_text())
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    found = report["checks"]
    checks = {
        f"{found['splits']} splits x {found['seeds']} seeds >= {MIN_SPLITS} x {MIN_SEEDS}": found[
            "enough_runs"
        ],
    }
    for preset, share in found["reuse_share_of_prepass"].items():
        checks[f"{preset}: cached reuse <= {100 * REUSE_TARGET:g} % of the pre-pass"] = (
            share <= REUSE_TARGET
        )
    for target in found["targeting"]:
        checks[f"{target['preset']}: target classes >= 2x their share"] = bool(target["enriched"])
        checks[f"{target['preset']}: beats {target['baseline']} by more than the spread"] = bool(
            target["beats_by_more_than_spread"]
        )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; backend {report['backend']}"
    )
    for preset, verdict in found["verdicts"].items():
        print(f"      {preset}: {verdict}")
    for preset in found["untargeted"]:
        print(f"      {preset}: the target holds every class, no targeting check")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'MISS'}  {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
