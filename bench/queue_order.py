"""`[station] queue_order`: submission order against highest response ratio next (shortest),
on every bundled trace, SIMULATED, under auto and fifo: makespan, mean and p95 JCT (÷ the
bound: mean run time alone), mean wait, and the longest any job waited (starvation).

    python bench/queue_order.py [--policies auto,fifo]

Run times for the order are learned from the replay's own finished runs of the same model,
never the trace's truth (gpudesk/policy/sim_order.py). A Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import Simulation, load_trace

TRACES = Path(__file__).resolve().parent.parent / "gpudesk" / "examples" / "traces"


def longest_wait_h(sim: Simulation) -> float:
    waits = [r.first_start - r.job.arrival_s for r in sim.runs if r.first_start is not None]
    return max(waits) / 3600 if waits else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default="auto,fifo")
    args = parser.parse_args(argv)
    print("SIMULATED: each bundled trace on its own simulated station (gpudesk simulate)\n")
    print(
        "| trace | policy | order | makespan h | mean JCT min (÷ bound) | p95 JCT min | "
        "mean wait min | longest wait h |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted(TRACES.glob("*.json")):
        trace = load_trace(path)
        station = trace.sim_station
        for policy in args.policies.split(","):
            for order in ("submission", "shortest"):
                sim = Simulation(trace, policy=policy, station=station, queue_order=order)
                result = sim.run()
                bound = bound_of(sim)
                print(
                    f"| {trace.name} | {policy} | {order} | {result.makespan_s / 3600:.2f} | "
                    f"{result.mean_jct_s / 60:.0f} ({result.mean_jct_s / bound.mean_jct_s:.2f}) | "
                    f"{result.p95_jct_s / 60:.0f} | {result.mean_wait_s / 60:.0f} | "
                    f"{longest_wait_h(sim):.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
