"""How much the simulator's verdict on `auto` depends on the interference model's constants.

    python bench/simulator_sensitivity.py [TRACE ...] [--estimators E,...] [--mig GPU=PROFILE,...]
                                          [--mig-repartition] [--progress-lines]
                                          [--no-learning-check] [--json]

Sensitivity: each constant of the interference model's defaults (`DEFAULT_PARAMS`) is set, one at
a time, to 0.5x and 1.5x its value as the simulated TRUTH (plus one row with every default), for
each memory estimator the trace gives guesses for (of gpumemnet, horus, faketensor) and measured.
The policy's prior stays at the defaults and auto learns as the product does. Each setting
replays the trace under exclusive, carma and auto, and auto whose prior IS the truth (`auto*`:
what a perfect interference model would give; where auto* is no better than auto, the gap lies in
the policy or the trace, not in the model or its learning). Each row gives auto ÷ LB (the lower
bound under that truth, gpudesk/policy/sim_bounds.py) and auto ÷ carma, for makespan and mean JCT.

Only DISTINCT settings are rows. A constant acts only through the mechanisms a run uses: on
whole GPUs shared under MPS, `naive_switch_cost`, `kernel_active_extra` (time-slicing, MIG
slices, MPS thread caps) and `membw_per_sm` (pressure only where bandwidth passes SM share) change
no rate, so their six settings replay the defaults exactly. Before issue 39 the sweep printed those
as rows of their own (24 of 44 on the Philly trace were copies), and an estimator the trace has
no guesses for fell back to the true peak as its "hint", a copy of another. Now an estimator
without guesses is not run, and a setting whose every figure (each policy's makespan, mean JCT,
energy, OOM and lost counts, and auto*'s) equals an earlier row's, of any estimator, is folded
into that row, which names it under "same as".

With no TRACE, every bundled trace (gpudesk/examples/traces) on its own station.

Learning check (on the first trace): truth `mps_tenant_cost` 0.15 against the prior's 0.04: the
makespan of auto with its prior only (no learning), with learning, and knowing the truth, and the
share of the gap between the first and the last that learning closes.

`--mig` and `--mig-repartition` run every setting on a station with MIG-mode GPUs, as
`gpudesk simulate` does (CARMA never places on them). `--progress-lines` takes every job as
printing `progress DONE/TOTAL` lines, as `gpudesk simulate --progress-lines` does.

The simulator is deterministic, so one run is the result. Nothing here is tuned to a target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from gpudesk.examples import folder, names
from gpudesk.policy.interference import DEFAULT_PARAMS, PARAM_NAMES, ModelParams
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import (
    ESTIMATORS,
    GUESSING_ESTIMATORS,
    SimResult,
    Simulation,
    Trace,
    load_trace,
    with_progress_lines,
)

FACTORS = (0.5, 1.5)
POLICIES = ("exclusive", "carma", "auto")
LEARNING_TRUTH = {"mps_tenant_cost": 0.15}


def truths() -> list[tuple[str, ModelParams]]:
    out = [("defaults", DEFAULT_PARAMS)]
    for name in PARAM_NAMES:
        for factor in FACTORS:
            value = getattr(DEFAULT_PARAMS, name) * factor
            out.append((f"{name} x{factor:g}", DEFAULT_PARAMS.with_values({name: value})))
    return out


def estimators_of(trace: Trace) -> list[str]:
    """The estimators the trace has guesses for, then measured: one whose guesses are missing
    would replay the true peak as a hint, a copy of another such row."""
    given = [e for e in GUESSING_ESTIMATORS if any(e in j.estimates for j in trace.jobs)]
    return [*given, "measured"]


def _fingerprint(results: list[SimResult]) -> tuple[Any, ...]:
    return tuple(
        (
            round(r.makespan_s, 3),
            round(r.mean_jct_s, 3),
            round(r.energy_kwh, 6),
            r.oom_crashes,
            r.lost,
        )
        for r in results
    )


def _vs(a: SimResult, b: SimResult, figure: str) -> float | None:
    """a's figure over b's; None where either lost jobs (it did less work: no comparison)."""
    if a.lost or b.lost or getattr(b, figure) <= 0:
        return None
    return float(getattr(a, figure) / getattr(b, figure))


def sensitivity(
    trace: Trace, station: dict[str, Any], estimators: list[str] | None = None
) -> list[dict[str, Any]]:
    """One row per distinct setting: a (estimator, truth) whose figures repeat an earlier row's
    (with the same estimator or another) is folded into that row (its "same_as")."""
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for estimator in estimators or estimators_of(trace):
        for label, truth in truths():
            sims = [
                Simulation(trace, policy=p, estimator=estimator, truth=truth, **station)
                for p in POLICIES
            ]
            sims.append(
                Simulation(
                    trace,
                    policy="auto",
                    estimator=estimator,
                    truth=truth,
                    policy_params=truth,
                    **station,
                )
            )
            runs = [s.run() for s in sims]
            key = _fingerprint(runs)
            if key in seen:
                first = seen[key]
                same = estimator == first["estimator"]
                first["same_as"].append(label if same else f"{label} ({estimator})")
                continue
            bound = bound_of(sims[0])
            exclusive, carma, auto, knowing = runs
            row = {
                "truth": label,
                "estimator": estimator,
                "same_as": [],
                "lb_s": bound.makespan_s,
                "carma_x": _vs(carma, exclusive, "makespan_s"),
                "auto_x": _vs(auto, exclusive, "makespan_s"),
                "auto_vs_lb": None if auto.lost else auto.makespan_s / bound.makespan_s,
                "auto_vs_carma": _vs(auto, carma, "makespan_s"),
                "knowing_vs_carma": _vs(knowing, carma, "makespan_s"),
                "auto_jct_vs_lb": None if auto.lost else auto.mean_jct_s / bound.mean_jct_s,
                "auto_vs_carma_jct": _vs(auto, carma, "mean_jct_s"),
                "auto_vs_carma_energy": _vs(auto, carma, "energy_kwh"),
                "carma_oom": carma.oom_crashes,
                "auto_oom": auto.oom_crashes,
                "auto_lost": auto.lost,
                "carma_lost": carma.lost,
            }
            seen[key] = row
            rows.append(row)
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


def spread(values: list[float | None]) -> dict[str, float] | None:
    known = [v for v in values if v is not None]
    if not known:
        return None
    return {"min": min(known), "median": statistics.median(known), "max": max(known)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "settings": len(rows),
        "folded_copies": sum(len(r["same_as"]) for r in rows),
        "auto_vs_lb": spread([r["auto_vs_lb"] for r in rows]),
        "auto_vs_carma": spread([r["auto_vs_carma"] for r in rows]),
        "knowing_vs_carma": spread([r["knowing_vs_carma"] for r in rows]),
        "auto_jct_vs_lb": spread([r["auto_jct_vs_lb"] for r in rows]),
        "auto_vs_carma_jct": spread([r["auto_vs_carma_jct"] for r in rows]),
        "auto_worse_than_carma": sum(
            1 for r in rows if r["auto_vs_carma"] is not None and r["auto_vs_carma"] > 1.0
        ),
        "auto_lost": sum(r["auto_lost"] for r in rows),
        "rows_carma_lost_jobs": sum(1 for r in rows if r["carma_lost"]),
    }


def _station(trace: Trace, args: argparse.Namespace) -> dict[str, Any]:
    station: dict[str, Any] = {
        "station": trace.sim_station,
        "mig_repartition": args.mig_repartition,
    }
    if args.mig:
        station["mig"] = ",".join(args.mig)
    return station


def _fmt(value: float | None, width: int) -> str:
    return f"{value:>{width}.3f}" if value is not None else f"{'lost':>{width}}"


def print_trace(trace: Trace, station: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    where = f", MIG {station['mig']}" if "mig" in station else ""
    where += ", --mig-repartition" if station["mig_repartition"] else ""
    print(
        f"SIMULATED trace {trace.name} on {station['station']}{where}: makespan and mean JCT "
        "against the lower bound (LB) and carma"
    )
    print(
        f"{'TRUTH':<26} {'ESTIMATOR':<10} {'AUTO/LB':>8} {'AUTO/CARMA':>11} {'AUTO*/CARMA':>12} "
        f"{'JCT/LB':>7} {'JCT/CARMA':>10} {'kWh/CARMA':>10} {'OOM c/a':>8} {'LOST':>5}  SAME AS"
    )
    for r in rows:
        print(
            f"{r['truth']:<26} {r['estimator']:<10} {_fmt(r['auto_vs_lb'], 8)} "
            f"{_fmt(r['auto_vs_carma'], 11)} {_fmt(r['knowing_vs_carma'], 12)} "
            f"{_fmt(r['auto_jct_vs_lb'], 7)} {_fmt(r['auto_vs_carma_jct'], 10)} "
            f"{_fmt(r['auto_vs_carma_energy'], 10)} {r['carma_oom']:>3}/{r['auto_oom']:<4} "
            f"{r['auto_lost']:>5}  {', '.join(r['same_as']) or '-'}"
        )
    s = summary(rows)
    for key, label in (
        ("auto_vs_lb", "auto / LB (makespan)"),
        ("auto_vs_carma", "auto / carma (makespan)"),
        ("knowing_vs_carma", "auto* / carma (makespan)"),
        ("auto_jct_vs_lb", "auto / LB (mean JCT)"),
        ("auto_vs_carma_jct", "auto / carma (mean JCT)"),
    ):
        v = s[key]
        if v is not None:
            print(
                f"  {label} over {s['settings']} distinct settings: min {v['min']:.3f}, "
                f"median {v['median']:.3f}, max {v['max']:.3f}"
            )
    print(
        f"  settings where auto is slower than carma: {s['auto_worse_than_carma']}; copies "
        f"folded: {s['folded_copies']}; jobs auto lost: {s['auto_lost']}; rows where carma lost "
        f"jobs (no ratio to it): {s['rows_carma_lost_jobs']}"
    )
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="*", help="traces (default: every bundled one)")
    parser.add_argument(
        "--estimators", help=f"comma-separated, of {', '.join(ESTIMATORS)} (default: all given)"
    )
    parser.add_argument("--mig", action="append", default=[], help="as gpudesk simulate --mig")
    parser.add_argument("--mig-repartition", action="store_true")
    parser.add_argument("--progress-lines", action="store_true")
    parser.add_argument("--no-learning-check", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    paths = args.trace or [str(folder("traces") / n) for n in names("traces")]
    estimators = args.estimators.split(",") if args.estimators else None
    out: dict[str, Any] = {"simulated": True, "label": "SIMULATED", "traces": []}
    for path in paths:
        trace = load_trace(path)
        if args.progress_lines:
            trace = with_progress_lines(trace)
        station = _station(trace, args)
        rows = sensitivity(trace, station, estimators)
        out["traces"].append(
            {"trace": trace.name, **station, "rows": rows, "summary": summary(rows)}
        )
        if not args.json:
            print_trace(trace, station, rows)
    if not args.no_learning_check:
        first = load_trace(paths[0])
        if args.progress_lines:
            first = with_progress_lines(first)
        learning = learning_check(first, _station(first, args))
        out["learning"] = learning
        if not args.json:
            _print_learning(first, learning)
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    return 0


def _print_learning(trace: Trace, learning: dict[str, Any]) -> None:
    m = learning["makespan_s"]
    closed = learning["gap_closed"]
    print(
        f"learning check on {trace.name} (truth mps_tenant_cost 0.15, prior 0.04): auto "
        f"prior-only {m['prior_only'] / 3600:.2f} h, learning {m['learning'] / 3600:.2f} h, "
        f"knowing the truth {m['knows_truth'] / 3600:.2f} h; gap closed: "
        + (f"{closed:.0%}" if closed is not None else "no gap (knowing the truth does not help)")
        + f"; learned {learning['learned']} from {learning['observations']} observations"
    )


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
