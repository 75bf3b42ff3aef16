"""Issue 39, item 7: what a MIG layout costs the queue on a one-GPU station (SIMULATED).

For each one-GPU case of the bundled traces (traces/h100-mixed-day.json on its H100 and on an
H200), prints:

1. the simulator's replay of the trace as it arrives (`gpudesk simulate`): auto on the whole GPU,
   forced mps and exclusive; auto with the GPU in MIG mode at a fixed layout; and auto with
   `--mig-repartition` with the queue-time check (`mig_queue_time.layout_drain`, what the engine
   now does) and without it (the payoff's rates alone, as before);
2. what `gpudesk mig plan` would predict for the whole day queued at once (every job's run time
   known, as a station with the families' history would have it): the planned layout, its drain
   time, the whole GPU under MPS and exclusive, and the verdict line.

    python bench/mig_queue_time.py [--truth FILE]

Every figure is the interference model's (published defaults unless --truth); docs/benchmarks.md
records them under "Issue 39".
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpudesk.core.gpu_models import STATIONS
from gpudesk.policy import mig_payoff, sim_repartition
from gpudesk.policy.interference import DEFAULT_PARAMS, ModelParams
from gpudesk.policy.mig_planner import (
    GpuMigState,
    PlansOnly,
    QueuedDemand,
    plan_gpu,
    simulated_profiles,
)
from gpudesk.policy.mig_queue_time import queue_times
from gpudesk.policy.simulator import SimResult, Simulation, load_trace, load_truth

ROOT = Path(__file__).resolve().parents[1]
# The fixed layouts: the simulator judge's H100 mix (bench/simulator_judge.py), and the same
# shape on the H200 (its 4g and 3g profiles).
CASES = (
    ("h100-mixed-day.json", "h100", "4g.40gb,3g.40gb"),
    ("h100-mixed-day.json", "h200", "4g.71gb,3g.71gb"),
)


def cell(result: SimResult) -> str:
    if result.lost:  # no makespan to compare: it did less work
        return f"lost {result.lost} (the rest end at {result.makespan_s / 3600:.2f} h)"
    return f"{result.makespan_s / 3600:.2f} h, mean JCT {result.mean_jct_s / 60:.0f} min" + (
        f", {result.repartitions} repartitions" if result.repartitions else ""
    )


@contextmanager
def rates_only() -> Iterator[None]:
    """The payoff as it was before the queue-time check: `drain` ignored."""
    original = sim_repartition.choose_layouts  # where the simulator's repartition calls it

    def without_drain(*args: object, **kwargs: object) -> list[mig_payoff.LayoutChoice]:
        kwargs.pop("drain", None)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    sim_repartition.choose_layouts = without_drain  # type: ignore[assignment]
    try:
        yield
    finally:
        sim_repartition.choose_layouts = original


def replayed(path: Path, station: str, layout: str, truth: ModelParams) -> list[str]:
    trace = load_trace(path)
    sim = f"sim:{station}"
    mig = f"0={layout}"
    rows = []
    for label, kwargs in (
        ("auto, whole GPU", {"policy": "auto"}),
        ("mps, whole GPU", {"policy": "mps"}),
        ("exclusive, whole GPU", {"policy": "exclusive"}),
        (f"auto, --mig {mig}", {"policy": "auto", "mig": mig}),
        (
            f"auto, --mig {mig} --mig-repartition (with the queue-time check)",
            {"policy": "auto", "mig": mig, "mig_repartition": True},
        ),
    ):
        started = time.perf_counter()
        result = Simulation(trace, station=sim, truth=truth, **kwargs).run()  # type: ignore[arg-type]
        rows.append(f"| {label} | {cell(result)} | {time.perf_counter() - started:.1f} s |")
    with rates_only():
        started = time.perf_counter()
        result = Simulation(
            trace, station=sim, truth=truth, policy="auto", mig=mig, mig_repartition=True
        ).run()
        rows.append(
            f"| auto, --mig {mig} --mig-repartition (rates only, as before) | {cell(result)} | "
            f"{time.perf_counter() - started:.1f} s |"
        )
    return rows


def predicted(path: Path, station: str, layout: str, truth: ModelParams) -> list[str]:
    """`gpudesk mig plan`'s figures for the whole day queued at once, run times known: for the
    layout the planner wants, and for the fixed layout of the replay above."""
    trace = load_trace(path)
    model = STATIONS[station][0]
    profiles, placements = simulated_profiles(model, 0)
    gpu = GpuMigState(0, model.name, "enabled", profiles, placements)
    queue = [
        QueuedDemand(
            j.id, j.name, j.peak_memory_mib, j.sm_pct, membw_pct=j.membw_pct, run_s=j.exclusive_s
        )
        for j in trace.jobs
        if j.gpus == 1
    ]
    plan = plan_gpu(gpu, queue, repartition_allowed=True, simulated=True, commands_from=PlansOnly())
    lines = []
    for what, profiles in (
        (f"planned layout ({plan.left_out_total} jobs given no slice)", plan.wanted_profiles),
        ("fixed layout", layout.split(",")),
    ):
        started = time.perf_counter()
        times = queue_times(Simulation, gpu, profiles, queue, truth)
        took = time.perf_counter() - started
        if times is None:
            lines.append(f"{what}: nothing to weigh")
            continue
        lines += [
            f"{what} {'+'.join(times.layout)}, {len(queue)} jobs queued at once, replayed in "
            f"{took:.1f} s: MIG {times.mig.seconds / 3600:.2f} h ({times.mig.cannot_run} never "
            f"start), whole GPU MPS {times.mps.seconds / 3600:.2f} h, exclusive "
            f"{times.exclusive.seconds / 3600:.2f} h",
            f"  {times.summary()}",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--truth", help="a model-parameters file as the simulated truth")
    args = parser.parse_args()
    truth = load_truth(args.truth) if args.truth else DEFAULT_PARAMS
    for name, station, layout in CASES:
        path = ROOT / "traces" / name
        print(f"\n## {name} on sim:{station} (SIMULATED)")
        print("| run | makespan | wall |\n|---|---|---|")
        print("\n".join(replayed(path, station, layout, truth)))
        print()
        print("\n".join(predicted(path, station, layout, truth)))


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
