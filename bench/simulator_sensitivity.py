"""How much the simulator's verdict on `auto` depends on the interference model's constants.

    python bench/simulator_sensitivity.py [TRACE] [--mig GPU=PROFILE,...] [--mig-repartition]
                                          [--json]

Sensitivity: each constant of the interference model's defaults (`DEFAULT_PARAMS`) is set, one at
a time, to 0.5x and 1.5x its value as the simulated TRUTH (plus one row with every default), for
each memory estimator (gpumemnet, horus, faketensor, measured). The policy's prior stays at the
defaults and auto learns as the product does. Each setting replays the trace (default
`traces/carma-philly-t1.json`) under exclusive, carma and auto; the script prints every row and
min / median / max of auto / exclusive and auto / carma. Beside them, auto whose prior IS the
truth (`auto*`): what a perfect interference model would give. Where auto* is no better than
auto, the gap to a target lies in the policy or the trace, not in the model or its learning.

Learning check: truth `mps_tenant_cost` 0.15 against the prior's 0.04: the makespan of auto with
its prior only (no learning), with learning, and knowing the truth, and the share of the gap
between the first and the last that learning closes.

`--mig` and `--mig-repartition` run every setting on a station with MIG-mode GPUs, as
`gpudesk simulate` does (CARMA never places on them): the constants that only act on slices and
time-slicing (`kernel_active_extra`, `membw_per_sm`) move something there.

The simulator is deterministic, so one run is the result. Nothing here is tuned to a target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from gpudesk.policy.interference import DEFAULT_PARAMS, PARAM_NAMES, ModelParams
from gpudesk.policy.simulator import ESTIMATORS, Simulation, Trace, load_trace

FACTORS = (0.5, 1.5)
POLICIES = ("exclusive", "carma", "auto")
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "traces" / "carma-philly-t1.json"
LEARNING_TRUTH = {"mps_tenant_cost": 0.15}


def truths() -> list[tuple[str, ModelParams]]:
    out = [("defaults", DEFAULT_PARAMS)]
    for name in PARAM_NAMES:
        for factor in FACTORS:
            value = getattr(DEFAULT_PARAMS, name) * factor
            out.append((f"{name} x{factor:g}", DEFAULT_PARAMS.with_values({name: value})))
    return out


def sensitivity(trace: Trace, station: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for label, truth in truths():
        for estimator in ESTIMATORS:
            results = {
                p: Simulation(trace, policy=p, estimator=estimator, truth=truth, **station).run()
                for p in POLICIES
            }
            knowing = Simulation(
                trace,
                policy="auto",
                estimator=estimator,
                truth=truth,
                policy_params=truth,
                **station,
            ).run()
            exclusive = results["exclusive"].makespan_s
            carma, auto = results["carma"], results["auto"]
            rows.append(
                {
                    "truth": label,
                    "estimator": estimator,
                    "carma_x": carma.makespan_s / exclusive,
                    "auto_x": auto.makespan_s / exclusive,
                    "auto_vs_carma": auto.makespan_s / carma.makespan_s,
                    "knowing_vs_carma": knowing.makespan_s / carma.makespan_s,
                    "auto_vs_carma_energy": auto.energy_kwh / carma.energy_kwh,
                    "carma_oom": carma.oom_crashes,
                    "auto_oom": auto.oom_crashes,
                    "auto_lost": auto.lost,
                    "carma_lost": carma.lost,
                }
            )
    return rows


def learning_check(trace: Trace, station: dict[str, Any]) -> dict[str, Any]:
    truth = DEFAULT_PARAMS.with_values(LEARNING_TRUTH)
    runs = {
        "prior_only": Simulation(trace, policy="auto", truth=truth, learn=False, **station).run(),
        "learning": Simulation(trace, policy="auto", truth=truth, **station).run(),
        "knows_truth": Simulation(
            trace, policy="auto", truth=truth, policy_params=truth, **station
        ).run(),
    }
    prior, learning, knowing = (
        runs[k].makespan_s for k in ("prior_only", "learning", "knows_truth")
    )
    gap = prior - knowing
    return {
        "truth": LEARNING_TRUTH,
        "prior": {k: getattr(DEFAULT_PARAMS, k) for k in LEARNING_TRUTH},
        "makespan_s": {k: round(r.makespan_s, 1) for k, r in runs.items()},
        "learned": {k: round(v, 4) for k, v in runs["learning"].learned_params.items()},
        "observations": runs["learning"].observations,
        # None where knowing the truth does not help (no gap to close)
        "gap_closed": (prior - learning) / gap if abs(gap) > 1e-6 else None,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    parser.add_argument("--mig", action="append", default=[], help="as gpudesk simulate --mig")
    parser.add_argument("--mig-repartition", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trace = load_trace(args.trace)
    station: dict[str, Any] = {"mig_repartition": args.mig_repartition}
    if args.mig:
        station["mig"] = ",".join(args.mig)
    rows = sensitivity(trace, station)
    summary = {
        "auto_vs_exclusive": spread([r["auto_x"] for r in rows]),
        "auto_vs_carma": spread([r["auto_vs_carma"] for r in rows]),
        "knowing_vs_carma": spread([r["knowing_vs_carma"] for r in rows]),
        "settings": len(rows),
        "auto_worse_than_carma": sum(1 for r in rows if r["auto_vs_carma"] > 1.0),
    }
    learning = learning_check(trace, station)
    if args.json:
        json.dump({"rows": rows, "summary": summary, "learning": learning}, sys.stdout, indent=2)
        print()
        return 0
    where = f", MIG {' '.join(args.mig)}" if args.mig else ""
    where += ", --mig-repartition" if args.mig_repartition else ""
    print(f"SIMULATED trace {trace.name}{where}: makespan as a multiple of exclusive, OOM crashes")
    print(
        f"{'TRUTH':<26} {'ESTIMATOR':<11} {'CARMA x':>8} {'AUTO x':>7} {'AUTO/CARMA':>11} "
        f"{'AUTO*/CARMA':>12} {'OOM carma':>10} {'OOM auto':>9} {'LOST auto':>10}"
    )
    for r in rows:
        print(
            f"{r['truth']:<26} {r['estimator']:<11} {r['carma_x']:>8.3f} {r['auto_x']:>7.3f} "
            f"{r['auto_vs_carma']:>11.3f} {r['knowing_vs_carma']:>12.3f} "
            f"{r['carma_oom']:>10} {r['auto_oom']:>9} "
            f"{r['auto_lost']:>10}"
        )
    for key, label in (
        ("auto_vs_exclusive", "auto / exclusive"),
        ("auto_vs_carma", "auto / carma"),
        ("knowing_vs_carma", "auto* (prior = truth) / carma"),
    ):
        s = summary[key]
        print(
            f"{label} over {len(rows)} settings: min {s['min']:.3f}, median {s['median']:.3f}, "
            f"max {s['max']:.3f}"
        )
    print(f"settings where auto is slower than carma: {summary['auto_worse_than_carma']}")
    m = learning["makespan_s"]
    closed = learning["gap_closed"]
    print(
        f"learning check (truth mps_tenant_cost 0.15, prior 0.04): auto prior-only "
        f"{m['prior_only'] / 3600:.2f} h, learning {m['learning'] / 3600:.2f} h, knowing the "
        f"truth {m['knows_truth'] / 3600:.2f} h; gap closed: "
        + (f"{closed:.0%}" if closed is not None else "no gap (knowing the truth does not help)")
        + f"; learned {learning['learned']} from {learning['observations']} observations"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
