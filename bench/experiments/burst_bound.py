"""A packing bound for a trace's last burst of one-class jobs: does the sweep day with a MIG GPU
leave room for `auto` at 0.93 × CARMA's makespan (issue 39's target), or does no schedule?
(Issue 39, session 24; an experiment, SIMULATED; docs/benchmarks.md has what it showed.)

    python bench/experiments/burst_bound.py [TRACE] [--mig LAYOUT|none] [--truth FILE] [--gap S]

`gpudesk simulate --lower-bound`'s LB is fluid: it lets a burst's work spread over the station's
capacity as if jobs were divisible. A burst of a few long jobs is not: each job runs where it
started (no migration in the model; a preempted job starts over), so a GPU that must take one
job more than the others takes that whole job's work. For the last burst of a trace whose jobs
are all of one workload class (one program, as on a sweep day), under the simulated truth
(`rates.shared_rates`, `rates.mig_rate`, as `sim_rates.true_rates` applies them):

- **A whole GPU** does at most T* = max over n of n·r(n) seconds of exclusive work per second,
  r(n) the rate of each of n tenants of the class under MPS or time-slicing (1 alone). More
  tenants, or tenants of earlier bursts, or an MPS thread cap only lower each one's rate, so a
  GPU finishes k of the burst's jobs within H only if the k smallest need at most T*·H.
- **A MIG slice** runs one job at a time, at `mig_rate` for its shape, and only a job whose peak
  memory it holds finishes there (a larger one dies of OOM): it finishes k jobs within H only
  if the k smallest fitting ones, each at that rate, take at most H one after another.

No job of the burst starts before the burst's first arrival a. Counting each resource's k on the
smallest jobs counts some jobs twice, which only loosens the bound. So every schedule ends the
burst no sooner than a + H*, H* the least H at which the resources' k add up to the burst's
jobs (found by bisection). A bound for this trace and station, beside LB, not a replacement.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator_judge import last_gpu_in_mig

from gpudesk.examples import folder
from gpudesk.policy.interference import DEFAULT_PARAMS, ModelParams
from gpudesk.policy.model_params import Workload
from gpudesk.policy.rates import mig_rate, shared_rates, workload
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.sim_station import slice_shape
from gpudesk.policy.simulator import Simulation, TraceJob, load_trace, load_truth

TARGET = 0.93  # issue 39: auto's makespan ≤ 0.93 × CARMA's
POLICIES = ("fifo", "carma", "mps", "naive", "exclusive", "auto")


def last_burst(jobs: list[TraceJob], gap_s: float) -> list[TraceJob]:
    """The jobs of the last burst: each arriving within `gap_s` of the one before it."""
    ordered = sorted(jobs, key=lambda j: j.arrival_s)
    start = len(ordered) - 1
    while start > 0 and ordered[start].arrival_s - ordered[start - 1].arrival_s <= gap_s:
        start -= 1
    return ordered[start:]


def whole_gpu_throughput(load: Workload, truth: ModelParams, most: int) -> float:
    """T*: the most exclusive work per second one whole GPU does for tenants of this class."""
    best = 1.0  # alone or exclusive
    for n in range(2, most + 1):
        for mechanism in ("mps", "naive"):
            best = max(best, sum(shared_rates(truth, mechanism, [load] * n)))
    return best


def finishes(works: list[float], budget: float) -> int:
    """How many of `works` (smallest first) add up to at most `budget`."""
    done, used = 0, 0.0
    for work in sorted(works):
        if used + work > budget:
            break
        used += work
        done += 1
    return done


@dataclass(frozen=True)
class BurstBound:
    """What no schedule beats for the trace's last burst, and where the figure comes from."""

    end_s: float  # a + H*: no schedule ends the burst (so the trace) sooner
    arrival_s: float  # a: the burst's first arrival
    jobs: int
    whole_gpus: int
    top: float  # T*: a whole GPU's most exclusive work per second for the class
    slices: tuple[tuple[str, float, int], ...]  # (profile, rate, how many of the burst fit it)


def burst_bound(sim: Simulation, gap_s: float = 60.0) -> BurstBound:
    """The bound for the last burst of `sim`'s trace on its station under its truth (module
    doc); ValueError where the trace is not one class of one-GPU jobs."""
    jobs = list(sim.trace.jobs)
    classes = {(j.sm_pct, j.membw_pct) for j in jobs}
    if len(classes) != 1 or any(j.gpus != 1 for j in jobs):
        raise ValueError(f"{sim.trace.name}: the bound needs one-GPU jobs of one workload class")
    ((sm_pct, membw_pct),) = classes
    truth = sim.truth
    load = workload(sm_pct, membw_pct, truth)
    burst = last_burst(jobs, gap_s)
    works = [j.exclusive_s for j in burst]
    whole = sim.gpu_count - len(sim.fixed)
    top = whole_gpu_throughput(load, truth, len(burst))
    slices = []  # (profile, rate, the burst's exclusive works that fit it)
    for gpu in sorted(sim.fixed):
        for mig in sim.slices[gpu]:
            compute, memory = slice_shape(sim, mig)
            rate = mig_rate(truth, load, compute, memory)
            fits = [j.exclusive_s for j in burst if j.peak_memory_mib <= mig.memory_mib]
            slices.append((mig.profile, rate, fits))

    def capacity(horizon: float) -> int:
        count = whole * finishes([w for w in works if w <= horizon], top * horizon)
        for _, rate, fits in slices:
            count += finishes([w / rate for w in fits], horizon)
        return count

    # bisection to a second: at `high` (every job one after another) one GPU does them all
    low, high = 0.0, sum(works)
    while high - low > 1.0:
        mid = (low + high) / 2
        low, high = (low, mid) if capacity(mid) >= len(burst) else (mid, high)
    return BurstBound(
        end_s=burst[0].arrival_s + low,  # the largest horizon found too short: a true bound
        arrival_s=burst[0].arrival_s,
        jobs=len(burst),
        whole_gpus=whole,
        top=top,
        slices=tuple((p, r, len(f)) for p, r, f in slices),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(folder("traces") / "sweep-day-a100x4.json"))
    parser.add_argument(
        "--mig", help="a MIG layout, or none (default: the judge's, the last GPU in MIG mode)"
    )
    parser.add_argument("--truth", help="a calibration file as the simulated truth")
    parser.add_argument("--gap", type=float, default=60.0, help="seconds between a burst's jobs")
    args = parser.parse_args()
    trace = load_trace(args.trace)
    truth = load_truth(args.truth) if args.truth else DEFAULT_PARAMS
    station = trace.sim_station
    layout = args.mig or last_gpu_in_mig(station)
    layout = None if layout == "none" else layout
    made = {
        policy: Simulation(trace, policy=policy, station=station, truth=truth, mig=layout)
        for policy in POLICIES
    }
    try:
        bound = burst_bound(made["auto"], args.gap)
    except ValueError as error:
        print(f"{error}; not this trace", file=sys.stderr)
        return 2
    ends = {policy: sim.run().makespan_s for policy, sim in made.items()}
    end, carma = bound.end_s, ends["carma"]
    print(
        f"SIMULATED: {trace.name} on {station}{f' --mig {layout}' if layout else ''}, the truth "
        f"{'from ' + args.truth if args.truth else 'the model defaults'}"
    )
    print(f"last burst: {bound.jobs} jobs from {bound.arrival_s / 3600:.2f} h")
    print(f"a whole GPU (x{bound.whole_gpus}): at most T* = {bound.top:.3f} s of work per second")
    for profile, rate, fits in bound.slices:
        print(f"slice {profile}: rate {rate:.3f}, {fits} of the burst fit its memory")
    print(f"burst bound: {end / 3600:.3f} h (H* = {(end - bound.arrival_s) / 60:.1f} min)")
    print(f"LB (fluid, arrival, class terms): {bound_of(made['auto']).makespan_s / 3600:.3f} h")
    for policy, seconds in ends.items():
        print(f"{policy:6} {seconds / 3600:.3f} h = {seconds / end:.3f} × the burst bound")
    verdict = "below every schedule" if end > TARGET * carma else "not excluded by it"
    print(f"burst bound ÷ carma = {end / carma:.3f}: the target {TARGET} × carma is {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
