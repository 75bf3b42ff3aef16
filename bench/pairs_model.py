"""The placement model against measured pairs: for every group of jobs `bench/gpu_pairs.py`
ran together on a real GPU, the rates the model predicts from what each job showed alone,
beside the rates measured.

    python bench/pairs_model.py PAIRS_JSON [--calibration CALIBRATE_JSON] [--json]

The model's inputs are what the engine would know of each job: its SM activity and DRAM
bandwidth alone (GPM, the naive phase's alone window, i.e. the job with the GPU to itself). It is
run with the published defaults and, where given, a `gpudesk calibrate --json` fit. A second
variant feeds it SM *occupancy* in place of SM activity, to see whether how full the SMs are
predicts sharing better than whether they are busy. The measured rate is the job's steps/s in
the group over its steps/s alone with the GPU to itself (`rate_vs_exclusive`). Errors: RMS of
(predicted - measured) over every job of every group, per mechanism and variant; and how
unequal the members of each pair were (the model's form gives every tenant one rate).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpudesk.policy.interference import (  # noqa: E402
    DEFAULT_PARAMS,
    ModelParams,
    Workload,
    params_from_json,
    shared_rates,
)


def pct(gpm: dict[str, Any], key: str) -> float | None:
    """A GPM percentage as a fraction; None where the GPU answered an error code instead."""
    value = gpm.get(key)
    return float(value) / 100.0 if isinstance(value, int | float) else None


def alone_inputs(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Each job's GPM figures over its alone window with the GPU to itself (naive phase)."""
    phase = results["phases"].get("naive") or next(iter(results["phases"].values()))
    inputs: dict[str, dict[str, float | None]] = {}
    for window in phase.get("windows", []):
        group = window.get("group", [])
        if len(group) != 1 or group[0] in inputs:
            continue
        gpm = window.get("gpm") or {}
        inputs[group[0]] = {
            "sm": pct(gpm, "sm_util"),
            "occupancy": pct(gpm, "sm_occupancy"),
            "membw": pct(gpm, "dram_bw_util"),
            "tensor": pct(gpm, "any_tensor_util"),
            "kernel_active": pct(gpm, "utilization_gpu_pct"),
        }
    return inputs


def predict(
    params: ModelParams, mechanism: str, jobs: list[str], inputs: dict[str, Any], width_key: str
) -> list[float] | None:
    tenants = []
    for name in jobs:
        figures = inputs.get(name.split("#")[0]) or {}
        width, membw = figures.get(width_key), figures.get("membw")
        if width is None or membw is None:
            return None
        tenants.append(Workload(min(1.0, width), min(1.0, membw)))
    return shared_rates(params, mechanism, tenants)


def compare(results: dict[str, Any], sets: dict[str, ModelParams]) -> dict[str, Any]:
    inputs = alone_inputs(results)
    rows: list[dict[str, Any]] = []
    errors: dict[str, list[float]] = {}
    unequal: list[float] = []
    for mechanism, phase in results["phases"].items():
        for window in phase.get("windows", []):
            group = window.get("group", [])
            jobs = window.get("jobs", {})
            if len(group) < 2 or not all("rate_vs_exclusive" in jobs.get(n, {}) for n in group):
                continue
            measured = [jobs[n]["rate_vs_exclusive"] for n in group]
            row: dict[str, Any] = {"mechanism": mechanism, "group": group, "measured": measured}
            if len(group) == 2:
                unequal.append(abs(measured[0] - measured[1]))
            for label, params in sets.items():
                for width_key in ("sm", "occupancy"):
                    rates = predict(params, mechanism, group, inputs, width_key)
                    if rates is None:
                        continue
                    key = f"{label}/{width_key}"
                    row[key] = [round(r, 3) for r in rates]
                    errors.setdefault(f"{mechanism} {key}", []).extend(
                        r - m for r, m in zip(rates, measured, strict=True)
                    )
            rows.append(row)
    return {
        "inputs": inputs,
        "rows": rows,
        "rms": {
            key: round(math.sqrt(sum(e * e for e in errs) / len(errs)), 4)
            for key, errs in errors.items()
            if errs
        },
        "mean_signed": {
            key: round(sum(errs) / len(errs), 4) for key, errs in errors.items() if errs
        },
        "pair_inequality": {
            "pairs": len(unequal),
            "median": round(sorted(unequal)[len(unequal) // 2], 4) if unequal else None,
            "max": round(max(unequal), 4) if unequal else None,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", type=Path)
    parser.add_argument("--calibration", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = json.loads(args.pairs.read_text())
    sets = {"defaults": DEFAULT_PARAMS}
    if args.calibration:
        sets["fit"] = params_from_json(
            json.loads(args.calibration.read_text()), str(args.calibration)
        )
    report = compare(results, sets)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print("job alone: SM activity / occupancy / DRAM / tensor / kernel-active")
    for name, f in report["inputs"].items():
        print(f"  {name:12s} " + " / ".join("-" if v is None else f"{v:.2f}" for v in f.values()))
    keys = sorted({k for r in report["rows"] for k in r if "/" in k})
    print("group (mechanism): measured | " + " | ".join(keys))
    for row in report["rows"]:
        cells = " | ".join(",".join(f"{v:.2f}" for v in row.get(k, [])) for k in keys)
        measured = ",".join(f"{v:.2f}" for v in row["measured"])
        print(f"  {'+'.join(row['group'])} ({row['mechanism']}): {measured} | {cells}")
    print("RMS error (mean signed):")
    for key, rms in sorted(report["rms"].items()):
        print(f"  {key:28s} {rms:.3f} ({report['mean_signed'][key]:+.3f})")
    print(f"pair inequality |a - b|: {report['pair_inequality']}")
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
