"""What a trace's multi-GPU jobs cost its one-GPU jobs under `auto`, and what holding GPUs for
them buys: the lever behind t1's mean-JCT miss (issue 39).

    python bench/experiments/multi_gpu_cost.py [TRACE]   # default: the CARMA Philly trace (t1)

A multi-GPU job runs on whole GPUs, which it can only get once they drain; `auto` holds the
GPUs it will get from the first time it waits (SharingPolicy.overtake_budget: 0 overtakes, as
Slurm's backfill does for its top job). Per row, on the trace's station whole and with its last
GPU in MIG mode (bench/simulator_judge.py's layout), auto's makespan ÷ the lower bound and
mean JCT ÷ the mean run time alone, of all jobs and of the one-GPU jobs:

- the trace as it is;
- without its multi-GPU jobs (what they cost the others);
- with each multi-GPU job taken as a one-GPU job of the same run time (what their taking whole
  GPUs together costs, their work kept);
- letting later jobs overtake a multi-GPU job 8 times (as a one-GPU job may) before its GPUs
  are held, and never holding them.

SIMULATED, the model's defaults as the truth. docs/benchmarks.md ("What multi-GPU jobs cost")
has the figures.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its siblings

from simulator_judge import last_gpu_in_mig

from gpudesk.core.records import JobRecord
from gpudesk.examples import folder
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import Simulation, load_trace
from gpudesk.policy.trace import Trace


class OvertakenAuto(SharingPolicy):
    """`auto`, except that a multi-GPU job may be overtaken `multi` times before its GPUs are
    held (None: never held)."""

    def __init__(self, multi: int | None) -> None:
        super().__init__("auto")
        self.multi = multi

    def overtake_budget(self, job: JobRecord) -> int:
        if job.spec.gpus <= 1:
            return super().overtake_budget(job)
        return 10**9 if self.multi is None else self.multi


def _row(label: str, trace: Trace, mig: str | None, policy: Callable[[], SharingPolicy]) -> str:
    sim = Simulation(trace, policy="auto", station=trace.sim_station, truth=DEFAULT_PARAMS, mig=mig)
    sim.policy = policy()
    result = sim.run()
    bound = bound_of(sim)
    single = [r for r in sim.runs if r.job.gpus == 1 and r.finished_at is not None]
    jct = sum(r.finished_at - r.job.arrival_s for r in single if r.finished_at) / len(single)
    alone = sum(r.job.exclusive_s for r in single) / len(single)
    return (
        f"| {label} | {'MIG GPU' if mig else 'whole'} | {result.makespan_s / 3600:.2f} h "
        f"({result.makespan_s / bound.makespan_s:.3f}) | {result.mean_jct_s / 60:.1f} min "
        f"({result.mean_jct_s / bound.mean_jct_s:.2f}) | {jct / 60:.1f} min ({jct / alone:.2f}) "
        f"| {result.lost} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(folder("traces") / "carma-philly-t1.json"))
    args = parser.parse_args()
    trace = load_trace(args.trace)
    multi = sum(j.gpus > 1 for j in trace.jobs)
    print(
        f"SIMULATED: {trace.name} ({len(trace.jobs)} jobs, {multi} of them multi-GPU) on "
        f"{trace.sim_station} under auto, the model's defaults as the truth\n"
    )
    print(
        "| variant | station | makespan (÷ LB) | mean JCT (÷ mean alone) | one-GPU jobs' mean "
        "JCT (÷ their mean alone) | lost |"
    )
    print("|---|---|---:|---:|---:|---:|")
    variants: list[tuple[str, Trace, Callable[[], SharingPolicy]]] = [
        ("as it is (held at once)", trace, lambda: SharingPolicy("auto")),
        (
            "without its multi-GPU jobs",
            replace(trace, jobs=tuple(j for j in trace.jobs if j.gpus == 1)),
            lambda: SharingPolicy("auto"),
        ),
        (
            "multi-GPU jobs as one-GPU jobs",
            replace(trace, jobs=tuple(replace(j, gpus=1) for j in trace.jobs)),
            lambda: SharingPolicy("auto"),
        ),
        ("held after 8 overtakes", trace, lambda: OvertakenAuto(8)),
        ("never held", trace, lambda: OvertakenAuto(None)),
    ]
    for mig in (None, last_gpu_in_mig(trace.sim_station)):
        for label, variant, policy in variants:
            print(_row(label, variant, mig, policy), flush=True)
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
