"""How often later jobs may start ahead of a waiting one-GPU job (`collocation.MAX_OVERTAKES`,
8: a design choice, not a measured one), swept over every bundled trace and station: does
holding GPUs for the waiting job sooner (the H100 day's heavy jobs wait while light ones join
their GPU) or later move `auto` toward its bound? (Issue 39, session 23; an experiment,
SIMULATED; docs/benchmarks.md has what it showed. It informs; the constant is not set from it.)

    python bench/experiments/overtake_budget.py [--budgets 0,2,4,8,16] [--truth FILE]

Each cell is auto's makespan ÷ LB / mean JCT ÷ its bound (the mean run time alone).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator_judge import last_gpu_in_mig

from gpudesk.examples import folder, names
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import Simulation, load_trace, load_truth


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="0,2,4,8,16")
    parser.add_argument("--truth", help="a calibration file as the simulated truth")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    truth = load_truth(args.truth) if args.truth else DEFAULT_PARAMS
    print("SIMULATED: auto's makespan ÷ LB / mean JCT ÷ bound, by overtake budget\n")
    header = "| trace | station | " + " | ".join(f"budget {b}" for b in budgets) + " |"
    print(header)
    print("|---|---|" + "---|" * len(budgets))
    for name in names("traces"):
        trace = load_trace(str(folder("traces") / name))
        for mig in (False, True):
            station = trace.sim_station
            layout = last_gpu_in_mig(station) if mig else None
            cells = []
            for budget in budgets:
                sim = Simulation(trace, policy="auto", station=station, truth=truth, mig=layout)
                sim.policy.max_overtakes = budget  # type: ignore[attr-defined]
                result = sim.run()
                bound = bound_of(sim)
                lost = f" (lost {result.lost})" if result.lost else ""
                cells.append(
                    f"{result.makespan_s / bound.makespan_s:.3f} / "
                    f"{result.mean_jct_s / bound.mean_jct_s:.2f}{lost}"
                )
            where = station + (f" --mig {layout}" if layout else "")
            print(f"| {trace.name} | {where} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
