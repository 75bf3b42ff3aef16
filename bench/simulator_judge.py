"""Every bundled trace, judged against its lower bound: a Markdown table for docs/benchmarks.md.

    python bench/simulator_judge.py [--truth FILE] [--progress-lines]

For each bundled trace on its own station, whole and with one GPU in MIG mode (`MIG_LAYOUTS`),
runs fifo (`exclusive`: one job a GPU, in arrival order), carma, auto and every forced mode, and
prints per row: makespan and its ratio to the lower bound (gpudesk/policy/sim_bounds.py), mean
JCT and its ratio to its bound, energy, lost jobs; then the best forced mode the station as given
can run (SimResult.not_runnable) and auto's ratio to it and to carma. SIMULATED throughout.
"""

from __future__ import annotations

import argparse

from gpudesk.examples import folder, names
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.sim_bounds import LowerBound, bound_of
from gpudesk.policy.sim_station import station_gpus
from gpudesk.policy.simulator import (
    SimResult,
    Simulation,
    load_trace,
    load_truth,
    with_progress_lines,
)

POLICIES = ("exclusive", "naive", "mps", "mig", "carma", "auto")
FORCED = ("exclusive", "naive", "mps", "mig")
# One GPU in MIG mode: the last GPU, with a layout of that model's own profiles (assumed mixes:
# one big slice for the heavy jobs and small ones for the light).
MIG_LAYOUTS = {
    "NVIDIA A100-SXM4-40GB": "3g.20gb,2g.10gb,1g.5gb,1g.5gb",
    "NVIDIA H100 80GB HBM3": "4g.40gb,3g.40gb",
}


def last_gpu_in_mig(station: str) -> str:
    """`--mig` for the station with its last GPU in MIG mode (`MIG_LAYOUTS`)."""
    model, count = station_gpus(station)
    return f"{count - 1}={MIG_LAYOUTS[model.name]}"


def _cell(result: SimResult, bound: LowerBound) -> str:
    hours = result.makespan_s / 3600
    if result.lost:
        return f"lost {result.lost}"
    return f"{hours:.2f} h ({result.makespan_s / bound.makespan_of(result):.3f})"


def _jct(result: SimResult, bound: LowerBound) -> str:
    if result.lost:
        return "-"
    return (
        f"{result.mean_jct_s / 60:.0f} min ({result.mean_jct_s / bound.mean_jct_s:.2f}; "
        f"{result.mean_jct_s / bound.mean_jct_queue_of(result):.2f})"
    )


def _vs(a: SimResult, b: SimResult, figure: str) -> str:
    """a's figure over b's; "-" where either lost jobs (it did less work)."""
    if a.lost or b.lost or not getattr(b, figure):
        return "-"
    return f"{getattr(a, figure) / getattr(b, figure):.3f}"


def judge(path: str, mig: bool, truth_path: str | None, progress_lines: bool = False) -> list[str]:
    trace = load_trace(path)
    if progress_lines:
        trace = with_progress_lines(trace)
    truth = load_truth(truth_path) if truth_path else DEFAULT_PARAMS
    station = trace.sim_station
    layout = last_gpu_in_mig(station) if mig else None
    sims = [Simulation(trace, policy=p, station=station, truth=truth, mig=layout) for p in POLICIES]
    results = {s.policy_name: s.run() for s in sims}
    bound = bound_of(sims[0])
    runnable = [
        results[m] for m in FORCED if results[m].not_runnable is None and not results[m].lost
    ]
    best = min(runnable, key=lambda r: r.makespan_s) if runnable else None
    auto, carma = results["auto"], results["carma"]
    where = f"{station}" + (f" --mig {layout}" if layout else "")
    rows = [("fifo (exclusive)", results["exclusive"]), ("carma", carma), ("auto", auto)]
    if best is not None:
        rows.append((f"best runnable forced: {best.policy}", best))
    lines = [
        f"| {trace.name} | {where} | {label} | {_cell(r, bound)} | {_jct(r, bound)} | "
        f"{r.energy_kwh:.2f} | {r.lost} |"
        for label, r in rows
    ]
    not_runnable = ", ".join(
        f"{m} ({results[m].not_runnable})" for m in FORCED if results[m].not_runnable
    )
    vs_best = _vs(auto, best, "makespan_s") if best is not None else "-"
    lines.append(
        f"| {trace.name} | {where} | LB {bound.makespan_s / 3600:.2f} h (arrival "
        f"{bound.arrival_term_s / 3600:.2f} h, fluid {bound.fluid_term_s / 3600:.2f} h, by "
        f"class {bound.class_term_s / 3600:.2f} h, packed {bound.burst_term_s / 3600:.2f} h); JCT "
        f"bound {bound.mean_jct_s / 60:.0f} min alone, {bound.mean_jct_queue_s / 60:.0f} min "
        f"queueing | auto ÷ carma {_vs(auto, carma, 'makespan_s')}"
        f", ÷ best runnable {vs_best} | JCT ÷ carma {_vs(auto, carma, 'mean_jct_s')} | energy "
        f"÷ carma {_vs(auto, carma, 'energy_kwh')} | not runnable: {not_runnable or 'none'} |"
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truth", help="as gpudesk simulate --truth")
    parser.add_argument(
        "--progress-lines", action="store_true", help="as gpudesk simulate --progress-lines"
    )
    args = parser.parse_args()
    truth = f"the truth from {args.truth}" if args.truth else "the model's defaults as the truth"
    progress = ", every job printing progress lines" if args.progress_lines else ""
    print(f"SIMULATED: each bundled trace on its own simulated station, {truth}{progress}\n")
    print(
        "| trace | station | policy | makespan (÷ LB) | mean JCT (÷ bound alone; ÷ queueing "
        "bound) | kWh | lost |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names("traces"):
        for mig in (False, True):
            for line in judge(str(folder("traces") / name), mig, args.truth, args.progress_lines):
                print(line)
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
