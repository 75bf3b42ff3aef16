"""`auto` in a world whose pairs slow each other unequally (issue 39 item 4), SIMULATED.

    python bench/unequal_truth.py [--json]

Placement predicts with the product's form (every tenant of a GPU gets one rate), learns its
parameters from what jobs show, and judges sharing by the robust rule. Here the simulated
truth on shared GPUs is the *queueing* form instead (`gpudesk/policy/queueing_form.py`), fitted
to measured pairs: `queueing-h100` on the H100 probes and the seed pair, `queueing-all` also on
the H200 real jobs (where a job beside a never-idle tenant starves); or the product's form with
the cost of sharing paid once per shared GPU, not per co-tenant (`once-paid`,
`gpudesk/policy/once_paid_form.py`), as the H200's groups of 2-8 tenants measured. Kernel
widths come from the model's defaults in all. For each bundled trace on its own station, side by
side in one run: CARMA, `auto` (learning, as shipped), `auto` with learning off, and the forced
modes `mps`, `naive` and `exclusive`. Prints makespan (÷ carma), mean JCT, energy ÷ carma, lost
jobs, and what `auto`'s learner ended with.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from robust_rule import hms  # noqa: E402  (bench/, this script's folder)

from gpudesk.policy.queueing_form import truth_form  # noqa: E402
from gpudesk.policy.simulator import Simulation, load_trace  # noqa: E402

TRACES = sorted((ROOT / "traces").glob("*.json"))
TRUTHS = ("current", "queueing-h100", "queueing-all", "once-paid")
POLICIES = ("carma", "auto", "auto, no learning", "mps", "naive", "exclusive")


def run(trace_path: Path, truth: str, policy: str) -> dict[str, Any]:
    trace = load_trace(trace_path)
    station = f"sim:{trace.station}" if trace.station else "sim:dgx-station-a100"
    sim = Simulation(
        trace,
        policy=policy.split(",")[0],
        station=station,
        learn=policy != "auto, no learning",
        truth_form=truth_form(truth),
    )
    result = sim.run()
    learned = result.learned_params if policy == "auto" else {}
    return {
        "trace": trace_path.stem,
        "truth": truth,
        "policy": policy,
        "makespan_s": round(result.makespan_s),
        "mean_jct_s": round(result.mean_jct_s),
        "energy_kwh": round(result.energy_kwh, 3),
        "lost": result.lost,
        "learned": {k: round(v, 3) for k, v in learned.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--truths", default=",".join(TRUTHS), help=f"comma-separated, of {', '.join(TRUTHS)}"
    )
    args = parser.parse_args()
    truths = [t for t in args.truths.split(",") if t]
    if not truths or not set(truths) <= set(TRUTHS):
        parser.error(f"--truths: comma-separated, of {', '.join(TRUTHS)}")
    rows = [run(t, truth, p) for t in TRACES for truth in truths for p in POLICIES]
    if args.json:
        meta = {"date": date.today().isoformat(), "machine": platform.machine(), "rows": rows}
        print(json.dumps(meta, indent=2))
        return
    carma = {(r["trace"], r["truth"]): r for r in rows if r["policy"] == "carma"}
    print("SIMULATED, " + date.today().isoformat())
    print("| trace | truth | policy | makespan | ÷ carma | mean JCT | energy ÷ carma |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        base = carma[(r["trace"], r["truth"])]
        lost = f" (lost {r['lost']})" if r["lost"] else ""
        print(
            f"| {r['trace']} | {r['truth']} | {r['policy']} | {hms(r['makespan_s'])}{lost} | "
            f"{r['makespan_s'] / base['makespan_s']:.3f} | {hms(r['mean_jct_s'])} | "
            f"{r['energy_kwh'] / base['energy_kwh']:.3f} |"
        )
    print(
        "\nauto's learner at the end (mps_tenant_cost, contention, naive_switch_cost, "
        "kernel_active_extra):"
    )
    names = ("mps_tenant_cost", "contention", "naive_switch_cost", "kernel_active_extra")
    for r in rows:
        if r["policy"] == "auto":
            values = ", ".join(f"{r['learned'].get(n, float('nan')):.3f}" for n in names)
            print(f"  {r['trace']} / {r['truth']}: {values}")


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
