"""How much the simulator's verdict on `auto` vs CARMA depends on its assumed SM shares.

    python bench/simulator_sensitivity.py [TRACE] [--json]

Replays the trace (default `traces/carma-philly-t1.json`) under exclusive, carma and auto for each
of the three memory estimators and four choices of the per-class SM shares (light / medium /
heavy; DLRM stays at its published 5 %), and prints makespan ratios and OOM crashes. The simulator
is deterministic, so one run is the result; the spread across rows is the model's sensitivity,
which is what a single headline ratio should be read against (docs/simulator.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

from gpudesk.engine.placement.simulator import (
    ESTIMATORS,
    SM_BY_MODEL,
    Simulation,
    Trace,
    load_trace,
)

SHARES = ((10, 30, 70), (15, 35, 75), (20, 40, 80), (25, 50, 85))
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "traces" / "carma-philly-t1.json"


def with_shares(trace: Trace, shares: tuple[int, int, int]) -> Trace:
    by_class = dict(zip(("light", "medium", "heavy"), shares, strict=True))
    fixed = set(SM_BY_MODEL.values())
    return dataclasses.replace(
        trace,
        jobs=tuple(
            job
            if job.sm_pct in fixed
            else dataclasses.replace(job, sm_pct=float(by_class.get(job.job_class, job.sm_pct)))
            for job in trace.jobs
        ),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = load_trace(args.trace)
    rows = []
    for shares in SHARES:
        trace = with_shares(base, shares)
        for estimator in ESTIMATORS:
            results = {
                p: Simulation(trace, policy=p, estimator=estimator).run()
                for p in ("exclusive", "carma", "auto")
            }
            exclusive = results["exclusive"].makespan_s
            rows.append(
                {
                    "shares": "/".join(map(str, shares)),
                    "estimator": estimator,
                    "carma_x": results["carma"].makespan_s / exclusive,
                    "auto_x": results["auto"].makespan_s / exclusive,
                    "auto_vs_carma": results["auto"].makespan_s / results["carma"].makespan_s,
                    "carma_oom": results["carma"].oom_crashes,
                    "auto_oom": results["auto"].oom_crashes,
                    "auto_lost": results["auto"].lost,
                }
            )
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(f"SIMULATED trace {base.name}: makespan as a multiple of exclusive, OOM crashes")
    print(
        f"{'SHARES':<10} {'ESTIMATOR':<11} {'CARMA x':>8} {'AUTO x':>7} {'AUTO/CARMA':>11} "
        f"{'OOM carma':>10} {'OOM auto':>9}"
    )
    for r in rows:
        print(
            f"{r['shares']:<10} {r['estimator']:<11} {r['carma_x']:>8.3f} {r['auto_x']:>7.3f} "
            f"{r['auto_vs_carma']:>11.3f} {r['carma_oom']:>10} {r['auto_oom']:>9}"
        )
    ratios = [r["auto_vs_carma"] for r in rows]
    print(
        f"auto/carma over all {len(rows)} rows: mean {statistics.fmean(ratios):.3f}, "
        f"worst {max(ratios):.3f}; OOM crashes carma {sum(r['carma_oom'] for r in rows)}, "
        f"auto {sum(r['auto_oom'] for r in rows)}; lost {sum(r['auto_lost'] for r in rows)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
