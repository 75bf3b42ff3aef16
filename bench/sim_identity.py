"""`gpudesk simulate` before and after a change: the same output, byte for byte?

    python bench/sim_identity.py --before DIR [--after DIR] [--heavy 2000] [--only WORD]

Runs every case below with the package under `--before` (e.g. `git archive COMMIT gpudesk | tar
-x -C DIR`) and under `--after` (default: this checkout), each in its own process as
bench/sim_scaling.py does, and compares their stdout. `--json` outputs are compared with
`decision_p99_ms` left out (the one wall-clock figure in them) and then as bytes; text outputs
(`--lower-bound`'s table) as bytes. Prints one line a case and exits 1 where any differs.

The cases: the four bundled traces under every policy `gpudesk simulate` accepts (fifo too), as
JSON and as the text table with `--lower-bound`; t1 with the options that change what the
placement pass sees (shortest-first order, progress lines, other estimators, a queueing truth, no
learning, the H100 calibration as the truth); mig-heavy-t1 with `--mig-repartition`; t1 with a
fixed MIG GPU; and bench/sim_scaling.py's SYNTHETIC traces, heavy (a queue of thousands) and
light, under every policy and with those options, one with priorities and preemptible jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim_scaling import make_trace

ROOT = Path(__file__).resolve().parents[1]
ALL_POLICIES = "fifo,exclusive,naive,mps,mig,carma,auto"
TRACES = ("carma-philly-t1", "h100-mixed-day", "mig-heavy-t1", "sweep-day-a100x4")
H100_TRUTH = ROOT / "bench" / "results" / "calibrate-h100-8s.json"
A100_MIG = "3=3g.20gb,2g.10gb,1g.5gb,1g.5gb"
WALL_CLOCK = "decision_p99_ms"


def _cases(synthetic: dict[str, Path]) -> list[tuple[str, list[str]]]:
    t1 = str(ROOT / "traces" / "carma-philly-t1.json")
    cases: list[tuple[str, list[str]]] = []
    for name in TRACES:
        path = str(ROOT / "traces" / f"{name}.json")
        cases.append((f"{name} all", [path, "--policy", ALL_POLICIES, "--json"]))
        cases.append((f"{name} text lb", [path, "--policy", ALL_POLICIES, "--lower-bound"]))
    cases += [
        ("t1 shortest", [t1, "--queue-order", "shortest", "--json"]),
        ("t1 progress horus", [t1, "--progress-lines", "--estimator", "horus", "--json"]),
        ("t1 faketensor q-all", [t1, "--estimator", "faketensor", "--truth-form", "queueing-all"]),
        ("t1 no-learn measured", [t1, "--no-learn", "--estimator", "measured", "--json"]),
        ("t1 h100 truth", [t1, "--truth", str(H100_TRUTH), "--json"]),
        ("t1 mig fixed", [t1, "--mig", A100_MIG, "--json"]),
        ("t1 mig repartition", [t1, "--mig", A100_MIG, "--mig-repartition", "--json"]),
        (
            "mig-heavy repartition",
            [str(ROOT / "traces" / "mig-heavy-t1.json"), "--mig-repartition", "--json"],
        ),
    ]
    for label, path in synthetic.items():
        p = str(path)
        cases.append((f"{label} all", [p, "--policy", ALL_POLICIES, "--json"]))
        if label.startswith("heavy"):
            cases += [
                (
                    f"{label} shortest",
                    [p, "-p", "auto,carma", "--queue-order", "shortest", "--json"],
                ),
                (f"{label} progress", [p, "-p", "auto,carma", "--progress-lines", "--json"]),
                (f"{label} measured", [p, "-p", "auto,mps", "--estimator", "measured", "--json"]),
                (
                    f"{label} mig",
                    [p, "-p", "auto,mig,carma", "--mig", A100_MIG, "--mig-repartition", "--json"],
                ),
            ]
    return cases


def _with_priorities(trace: dict[str, Any]) -> dict[str, Any]:
    """The trace with every 7th job at priority 1 and every 5th preemptible (a 60 s checkpoint):
    the queue's order by priority, and preempted jobs going back into it."""
    jobs = []
    for job in trace["jobs"]:
        job = dict(job)
        if job["id"] % 7 == 0:
            job["priority"] = 1
        if job["id"] % 5 == 0:
            job["preemptible"], job["checkpoint_s"] = True, 60.0
        jobs.append(job)
    return {**trace, "name": trace["name"] + "-priorities", "jobs": jobs}


def synthetic_traces(folder: Path, heavy: list[int], light: list[int]) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for load, lengths in (("heavy", heavy), ("light", light)):
        for n in lengths:
            paths[f"{load}-{n}"] = folder / f"{load}-{n}.json"
            paths[f"{load}-{n}"].write_text(json.dumps(make_trace(n, load)) + "\n")
    n = min(heavy, default=500)
    paths[f"heavy-{n}-priorities"] = folder / f"heavy-{n}-priorities.json"
    paths[f"heavy-{n}-priorities"].write_text(json.dumps(_with_priorities(make_trace(n, "heavy"))))
    return paths


def simulate(code: Path, args: list[str]) -> bytes:
    """`gpudesk simulate ARGS`'s stdout with the package under `code` (run from `code`, first on
    the path, as bench/sim_scaling.py runs it)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(code), os.environ.get("PYTHONPATH")))),
    }
    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", "simulate", *args],
        capture_output=True,
        cwd=code,
        env=env,
    )
    return done.stdout + f"\n(exit {done.returncode})\n".encode() + done.stderr


def _without_wall_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_wall_clock(v) for k, v in value.items() if k != WALL_CLOCK}
    if isinstance(value, list):
        return [_without_wall_clock(v) for v in value]
    return value


def comparable(output: bytes, is_json: bool) -> bytes:
    """The output as compared: a JSON one without its wall-clock figure, re-encoded with its
    keys in their order (so any other byte that differs still shows)."""
    if not is_json:
        return output
    text, _, tail = output.partition(b"\n(exit ")
    try:
        parsed = json.loads(text)
    except ValueError:
        return output
    return json.dumps(_without_wall_clock(parsed)).encode() + b"\n(exit " + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the earlier package's root")
    parser.add_argument("--after", type=Path, default=ROOT, help="the checkout to compare")
    parser.add_argument("--heavy", default="500,2000", help="heavy synthetic lengths")
    parser.add_argument("--light", default="500,2000", help="light synthetic lengths")
    parser.add_argument("--only", default="", help="only the cases whose label has this word")
    parser.add_argument("--keep", type=Path, help="write each differing pair's outputs here")
    args = parser.parse_args(argv)
    lengths = {k: [int(x) for x in getattr(args, k).split(",") if x] for k in ("heavy", "light")}
    differ = 0
    with tempfile.TemporaryDirectory() as folder:
        synthetic = synthetic_traces(Path(folder), lengths["heavy"], lengths["light"])
        cases = [(label, a) for label, a in _cases(synthetic) if args.only in label]
        for label, case in cases:
            is_json = "--json" in case
            before = comparable(simulate(args.before.resolve(), case), is_json)
            after = comparable(simulate(args.after.resolve(), case), is_json)
            same = before == after
            differ += not same
            print(f"{'identical' if same else 'DIFFERENT'}  {label}  ({len(after):,} bytes)")
            if not same and args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                stem = label.replace(" ", "_")
                (args.keep / f"{stem}.before").write_bytes(before)
                (args.keep / f"{stem}.after").write_bytes(after)
    print(f"\n{len(cases) - differ} of {len(cases)} identical")
    return 1 if differ else 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
