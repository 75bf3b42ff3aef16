"""A time-indexed makespan bound for a one-GPU trace: is `gpudesk simulate --lower-bound`'s LB
loose because it ignores each job's own arrival and its speed limit? (Issue 39, session 22; an
experiment, SIMULATED; docs/benchmarks.md has what it showed.)

    python bench/experiments/time_indexed_bound.py TRACE [--truth FILE] [--slots S]

The day is cut into S slots. In each slot the GPU spends its time in mixes of tenants (every
count of each workload class the trace has, under MPS and under time-slicing, at the rates
`rates.shared_rates` gives under the truth), and each job gets work in a slot no sooner than it
arrives, at most its rate alone (1) over the part of the slot after its arrival, and at most one
tenant's rate of its class in the mixes the slot spends time in. Every real schedule (one GPU,
any placement, preemptive or not) gives a feasible point, so the least T for which the linear
program is feasible (found by bisection) bounds every makespan from below. It relaxes what a
real schedule cannot do: split a job over many mixes within a slot, and switch mixes freely.
One GPU only (the mixes of a station's GPUs would be a product); scipy's HiGHS solves it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix, lil_matrix

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpudesk.policy.interference import DEFAULT_PARAMS, ModelParams
from gpudesk.policy.model_params import Workload
from gpudesk.policy.rates import shared_rates, workload
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import Simulation, TraceJob, load_trace, load_truth

Mix = tuple[tuple[int, ...], list[float]]  # tenants per class, each class's per-tenant rate


def mixes_of(classes: list[Workload], counts: list[int], truth: ModelParams) -> list[Mix]:
    """Every mix of tenants the trace allows, under each mechanism (alone: exclusive)."""
    out: list[Mix] = []
    for vec in itertools.product(*[range(n + 1) for n in counts]):
        n = sum(vec)
        if n == 0:
            continue
        tenants = [classes[c] for c, k in enumerate(vec) for _ in range(k)]
        for mechanism in ("mps", "naive") if n > 1 else ("exclusive",):
            rates = shared_rates(truth, mechanism, tenants)
            per, at = [], 0
            for k in vec:
                per.append(rates[at] if k else 0.0)
                at += k
            out.append((vec, per))
    return out


def feasible(
    jobs: list[TraceJob], class_of: dict[int, int], mixes: list[Mix], slots: int, span_s: float
) -> bool:
    """Whether every job's work fits in `span_s` under the relaxation (module doc)."""
    d, m, k, j = span_s / slots, len(mixes), len(mixes[0][0]), len(jobs)
    nx = slots * m  # time in each mix in each slot, then each job's work in each slot
    rows = slots + slots * k + slots * j
    a = lil_matrix((rows, nx + j * slots))
    b = np.zeros(rows)
    for s in range(slots):
        a[s, s * m : (s + 1) * m] = 1.0
        b[s] = d
    for s in range(slots):
        for c in range(k):
            row = slots + s * k + c
            for i, (vec, per) in enumerate(mixes):
                if vec[c]:
                    a[row, s * m + i] = -vec[c] * per[c]
            for q, job in enumerate(jobs):
                if class_of[job.id] == c:
                    a[row, nx + q * slots + s] = 1.0
    for s in range(slots):
        for q, job in enumerate(jobs):
            row = slots + slots * k + s * j + q
            c = class_of[job.id]
            for i, (vec, per) in enumerate(mixes):
                if vec[c]:
                    a[row, s * m + i] = -per[c]
            a[row, nx + q * slots + s] = 1.0
    bounds = [(0.0, None)] * nx + [
        (0.0, max(0.0, (s + 1) * d - max(job.arrival_s, s * d)))
        for job in jobs
        for s in range(slots)
    ]
    eq = lil_matrix((j, nx + j * slots))
    for q in range(j):
        eq[q, nx + q * slots : nx + (q + 1) * slots] = 1.0
    work = np.array([job.exclusive_s * job.gpus for job in jobs])
    result = linprog(
        np.zeros(nx + j * slots),
        A_ub=csr_matrix(a),
        b_ub=b,
        A_eq=csr_matrix(eq),
        b_eq=work,
        bounds=bounds,
        method="highs",
    )
    return bool(result.status == 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--truth", help="as gpudesk simulate --truth (default: the defaults)")
    parser.add_argument("--slots", type=int, default=60)
    args = parser.parse_args()
    trace = load_trace(args.trace)
    truth = load_truth(args.truth) if args.truth else DEFAULT_PARAMS
    sim = Simulation(trace, policy="auto", station=trace.sim_station, truth=truth)
    if sim.gpu_count != 1 or any(job.gpus != 1 for job in trace.jobs):
        parser.error("one GPU and one-GPU jobs only")
    jobs = list(trace.jobs)
    loads = {job.id: workload(job.sm_pct, job.membw_pct, truth) for job in jobs}
    classes = sorted(set(loads.values()), key=lambda w: (w.sm, w.membw))
    class_of = {job.id: classes.index(loads[job.id]) for job in jobs}
    counts = [sum(1 for c in class_of.values() if c == i) for i in range(len(classes))]
    mixes = mixes_of(classes, counts, truth)
    lb = bound_of(sim).makespan_s
    low, high = lb, lb * 1.5
    if not feasible(jobs, class_of, mixes, args.slots, high):
        raise SystemExit("not feasible at 1.5 x LB: raise the bracket")
    while high - low > 30.0:
        mid = (low + high) / 2
        if feasible(jobs, class_of, mixes, args.slots, mid):
            high = mid
        else:
            low = mid
    print(
        f"SIMULATED {trace.name}: LB {lb / 3600:.3f} h; time-indexed bound ({args.slots} slots, "
        f"{len(mixes)} mixes) {low / 3600:.3f} h = {low / lb:.3f} x LB"
    )


if __name__ == "__main__":
    main()
