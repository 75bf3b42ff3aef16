"""A tighter lower bound on mean job completion time: a time-indexed linear program.

    python bench/experiments/jct_lp_bound.py [--slot SECONDS] [--truth FILE]

`gpudesk simulate --lower-bound` judges mean JCT against two figures (gpudesk/policy/sim_bounds.py):
the mean run time alone, and a number-in-system bound from one server of the station's whole
capacity under SRPT. That server runs one job at the capacity of every GPU together, far faster
than any job runs alone, so where a trace's jobs overlap the second figure says little. This script
adds a third, from a linear program that keeps each job's rate at most 1 (the model never makes a
job faster than alone) beside the same capacity rows:

- time in slots of `--slot` seconds up to a horizon, then one last slot without end; x[j, s] the
  share of job j's work (exclusive seconds, each of its GPUs) done in slot s;
- every job's shares sum to 1, none before it arrives, and in each slot it does at most the part
  of the slot after its arrival (rate <= 1); the last slot has no such limit;
- in each slot, for every weight of the fluid term (sim_bounds.WEIGHTS) and every weight per kind
  of job of the class term (sim_bound_classes), the weighted work done is at most the slot's
  length times the station's capacity at that weight: the rows the makespan bounds rest on;
- objective: the mean over jobs of (the slot times their work is done at) + half their run time
  alone - their arrival. A job run at rate <= 1 that ends at C has its mean busy time (the mean
  over its work of when it is done) at most C - p/2 (p its run time alone: at best it runs at
  rate 1 over [C - p, C]), so C - arrival >= mean busy time + p/2 - arrival; a slot's start (the
  arrival, in its first slot; the horizon, for the last) is never later than when its work is
  done. So every schedule the model allows gives a feasible point of the program whose value is
  at most its mean JCT: the program's optimum is a lower bound (the mean-busy-time relaxation of
  scheduling with release dates: Goemans, Queyranne, Schulz, Skutella and Wang, "Single machine
  scheduling with release dates", SIAM J. Discrete Math. 15(2), 2002).

What it leaves out, and so why a schedule may be far above it: that a job runs on one GPU (or its
own set of them) and not spread over the station, memory, and that a multi-GPU job takes its GPUs
whole. It needs SciPy (HiGHS), which the project's test install brings (scikit-learn's
dependency); the product itself does not. SIMULATED throughout. docs/benchmarks.md ("A tighter
mean-JCT bound") has the figures.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sparse
from scipy.optimize import linprog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its siblings

from simulator_judge import last_gpu_in_mig

from gpudesk.examples import folder, names
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.rates import workload
from gpudesk.policy.sim_bounds import (
    WEIGHTS,
    LowerBound,
    _best_throughput,
    _compute,
    _mig_throughput,
    bound_of,
)
from gpudesk.policy.sim_station import slice_shape
from gpudesk.policy.simulator import Simulation, load_trace, load_truth

SLOT_S = 120.0  # slot length: shorter only tightens the bound, and makes the program larger
HORIZON = 2.0  # slots up to this many times the makespan bound, then the last slot without end
POLICIES = ("exclusive", "mps", "carma", "auto")


@dataclass(frozen=True)
class JctProgram:
    """The program's optimum for one simulation's trace and station: mean JCT (seconds)."""

    mean_jct_s: float
    slots: int
    variables: int
    rows: int


def _capacity_rows(sim: Simulation, bound: LowerBound) -> list[tuple[list[float], float]]:
    """Per capacity row: each job's weight per second of its work, and the station's capacity
    at that weight (weighted work per second), the rows sim_bounds' makespan terms rest on."""
    truth, jobs = sim.truth, [r.job for r in sim.runs if r.impossible is None]
    repartition = sim.config.mig_repartition
    mig = {
        g: None if repartition else tuple(slice_shape(sim, s) for s in sim.slices[g])
        for g in sim.fixed
    }
    sm = {j.id: workload(j.sm_pct, j.membw_pct, truth).sm for j in jobs}
    sm_total = sum(sm[j.id] * j.gpus for j in jobs)
    rows: list[tuple[list[float], float]] = []
    for alpha, beta in WEIGHTS:
        whole = _best_throughput(truth, alpha, beta, len(jobs), sm_total)
        capacity = sum(
            _mig_throughput(alpha, beta, _compute(mig[g])) if g in mig else whole
            for g in range(sim.gpu_count)
        )
        if capacity > 0:
            rows.append(([j.gpus * (alpha * sm[j.id] + beta) for j in jobs], capacity))
    term = bound.class_term
    if term is not None:
        for weights, capacity in term.capacities:
            rows.append(([term.work(j, weights) / j.exclusive_s for j in jobs], capacity))
    return rows


def mean_jct_program(sim: Simulation, slot_s: float = SLOT_S) -> JctProgram:
    """The program's optimum for `sim`'s trace on its station under its truth (the module
    docstring has the program). ValueError where SciPy finds no optimum (it always should: any
    schedule is a feasible point)."""
    bound = bound_of(sim)
    jobs = [r.job for r in sim.runs if r.impossible is None]
    slots = max(1, math.ceil(HORIZON * bound.makespan_s / slot_s))
    horizon = slots * slot_s
    # variables: (job, slot start it is counted at, the most of its work the slot may hold, slot)
    job_of: list[int] = []
    at: list[float] = []
    most: list[float] = []
    slot_of: list[int] = []
    for i, job in enumerate(jobs):
        for s in range(int(job.arrival_s // slot_s), slots):
            start = max(s * slot_s, job.arrival_s)
            job_of.append(i)
            at.append(start)
            most.append(min(1.0, ((s + 1) * slot_s - start) / job.exclusive_s))
            slot_of.append(s)
        job_of.append(i)  # the last slot, without end: work there counts as done at the horizon
        at.append(max(horizon, job.arrival_s))
        most.append(1.0)
        slot_of.append(-1)
    count = len(job_of)
    each_job = sparse.csr_matrix((np.ones(count), (job_of, range(count))), shape=(len(jobs), count))
    capacity = _capacity_rows(sim, bound)
    # each capacity row's entries, slot by slot: the timed variables' (the last slot's have none)
    slot_at = np.array(slot_of)
    timed = np.flatnonzero(slot_at >= 0)
    timed_job = np.array(job_of)[timed]
    timed_slot = slot_at[timed]
    exclusive = np.array([job.exclusive_s for job in jobs])[timed_job]
    row_ids: list[np.ndarray] = []
    values: list[np.ndarray] = []
    limits: list[float] = []
    for r, (weight, per_second) in enumerate(capacity):
        row_ids.append(r * slots + timed_slot)
        values.append(np.array(weight)[timed_job] * exclusive)
        limits.extend([per_second * slot_s] * slots)
    entries = (np.concatenate(row_ids), np.tile(timed, len(capacity)))
    rows = sparse.csr_matrix(
        (np.concatenate(values), entries), shape=(len(capacity) * slots, count)
    )
    solved = linprog(
        np.array(at),
        A_ub=rows,
        b_ub=np.array(limits),
        A_eq=each_job,
        b_eq=np.ones(len(jobs)),
        bounds=np.column_stack([np.zeros(count), np.array(most)]),
        method="highs",
    )
    if solved.status != 0:
        raise ValueError(f"the mean-JCT program found no optimum: {solved.message}")
    extra = sum(j.exclusive_s / 2 - j.arrival_s for j in jobs)
    return JctProgram((solved.fun + extra) / len(jobs), slots, count, rows.shape[0] + len(jobs))


def judge(path: str, mig: bool, truth_path: str | None, slot_s: float) -> str:
    """One Markdown row: the three mean-JCT bounds and each policy's mean JCT over the
    largest of them."""
    trace = load_trace(path)
    truth = load_truth(truth_path) if truth_path else DEFAULT_PARAMS
    layout = last_gpu_in_mig(trace.sim_station) if mig else None
    sims = {
        p: Simulation(trace, policy=p, station=trace.sim_station, truth=truth, mig=layout)
        for p in POLICIES
    }
    results = {p: s.run() for p, s in sims.items()}
    bound = bound_of(sims["auto"])
    program = mean_jct_program(sims["auto"], slot_s)
    best = max(bound.mean_jct_s, bound.mean_jct_queue_s, program.mean_jct_s)
    where = trace.sim_station + (f" --mig {layout}" if layout else "")
    cells = " | ".join(
        "lost"
        if results[p].lost
        else f"{results[p].mean_jct_s / 60:.1f} ({results[p].mean_jct_s / best:.2f})"
        for p in POLICIES
    )
    return (
        f"| {trace.name} | {where} | {bound.mean_jct_s / 60:.1f} | "
        f"{bound.mean_jct_queue_s / 60:.1f} | {program.mean_jct_s / 60:.1f} | {cells} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slot", type=float, default=SLOT_S, help="slot length, seconds")
    parser.add_argument("--truth", help="as gpudesk simulate --truth")
    args = parser.parse_args()
    if not args.slot > 0:
        parser.error("--slot must be a positive number of seconds")
    truth = f"the truth from {args.truth}" if args.truth else "the model's defaults as the truth"
    print(f"SIMULATED: each bundled trace on its own simulated station, {truth}\n")
    print(
        "| trace | station | mean alone, min | SRPT server, min | program, min | "
        + " | ".join(f"{p}, min (÷ the largest bound)" for p in POLICIES)
        + " |"
    )
    print("|---|---|---:|---:|---:|" + "---:|" * len(POLICIES))
    for name in names("traces"):
        for mig in (False, True):
            print(judge(str(folder("traces") / name), mig, args.truth, args.slot), flush=True)
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
