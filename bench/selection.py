"""Data selection: quality vs cost of each preset on a real dataset, and the issue's targets.

    python bench/selection.py [--profile profiles/selection.toml] [--seeds 3]
                              [--presets full,random-25,stratified-25,el2n-25,dedup-25,less-25]
                              [--out FILE.json]

Starts a fresh engine in a temporary GPUDESK_HOME (empty selection cache), runs
`gpudesk select compare PROFILE --presets ... --seeds N` (every pre-pass fresh, every training
job on the shared loader under its preset, one job at a time), prints its table, then checks the
targets (issue 7) and exits 1 if one is missed:

- the best non-random preset at 25 % beats random-25 on the quality metric by more than the
  seed-to-seed spread (the larger standard deviation over seeds of the two);
- its fresh pre-pass (the engine job's wall time, Python start-up included) costs <= 15 % of the
  full-data training run's wall time;
- a cached reuse (what the training job's loader spent taking the cached selection) costs
  <= 1 % of the pre-pass's own compute time.
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

ROOT = Path(__file__).resolve().parents[1]
GPUDESK = [sys.executable, "-m", "gpudesk"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(ROOT / "profiles" / "selection.toml"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--presets", default="full,random-25,stratified-25,el2n-25,dedup-25,less-25"
    )
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
                    "--seeds",
                    str(args.seeds),
                    "--out",
                    str(out),
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
    found = report["targets"]
    checks = {
        "beats random-25 by more than the spread": bool(found.get("beats_random")),
        "fresh pre-pass <= 15 % of full training": found.get("prepass_share_of_full", 1) <= 0.15,
        "cached reuse <= 1 % of the pre-pass": found.get("reuse_share_of_prepass", 1) <= 0.01,
    }
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; backend {report['backend']}"
    )
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'MISS'}  {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
