"""A time-indexed makespan bound: is `gpudesk simulate --lower-bound`'s LB loose because it
ignores each job's own arrival and its speed limit? (Issue 39, sessions 22 and 26; an
experiment, SIMULATED; docs/benchmarks.md has what it showed.)

    python bench/experiments/time_indexed_bound.py TRACE [--truth FILE] [--slots S] [--mig L]

The day is cut into S slots. In each slot the whole GPUs spend their time in mixes of tenants
(every count of each workload class the trace has, under MPS and under time-slicing, at the
rates `rates.shared_rates` gives under the truth; a multi-GPU job alone on each of its GPUs),
each slice of a MIG GPU (`--mig`, a fixed layout as `gpudesk simulate --mig` takes it) runs one
job at a time at `rates.mig_rate`, and each job gets work in a slot no sooner than it arrives, at
most its rate alone over the part of the slot after its arrival (a multi-GPU job: one per GPU),
and on whole GPUs at most one tenant's rate of its class in the mixes the slot spends time in.
Every real schedule (any placement, preemptive or not) gives a feasible point, so the least T
for which the linear program is feasible (found by bisection) bounds every makespan from below.
It relaxes what a real schedule cannot do: split a job over many mixes, GPUs and slices within a
slot, switch mixes freely, and put a job on a slice its memory does not fit. The GPUs' time is
pooled (their mixes are not a product); scipy's HiGHS solves it.
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
from gpudesk.policy.rates import mig_rate, shared_rates, workload
from gpudesk.policy.sim_bound_classes import whole_states
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.sim_station import slice_shape
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


def station_bound(sim: Simulation, jobs: list[TraceJob], truth: ModelParams) -> float:
    """The least makespan under the relaxation for a station of several GPUs, or with a MIG GPU,
    or multi-GPU jobs (module doc): slots from one arrival to the next, the last one as long as
    the program makes it. On whole GPUs only the classes' summed rates in each mix are kept
    (the mixes `sim_bound_classes` weighs, those no other beats in every class), and a job's
    work in a slot is bounded by its speed alone (one per GPU), not by a tenant's rate: looser
    than the one-GPU program above, and still a bound."""
    single = sorted(
        {workload(j.sm_pct, j.membw_pct, truth) for j in jobs if j.gpus == 1},
        key=lambda w: (w.sm, w.membw),
    )
    multi = any(j.gpus > 1 for j in jobs)
    k = len(single) + int(multi)

    def class_of(job: TraceJob) -> int:
        return k - 1 if job.gpus > 1 else single.index(workload(job.sm_pct, job.membw_pct, truth))

    counts = [sum(1 for j in jobs if j.gpus == 1 and class_of(j) == c) for c in range(len(single))]
    whole = sim.gpu_count - len(sim.fixed)
    rows = np.zeros((0, k))
    if whole:
        found = whole_states(single, counts, multi, truth)
        if found is None:
            raise SystemExit("too many mixes to weigh")
        rows = np.vstack([found[0], found[1][None, :]])
        kept: list[int] = []  # the mixes no other beats in every class
        for i in np.argsort(-rows.sum(axis=1)):
            if not any(np.all(rows[o] >= rows[i] - 1e-12) for o in kept):
                kept.append(int(i))
        rows = rows[kept]
    slices = [slice_shape(sim, piece) for gpu in sim.fixed for piece in sim.slices[gpu]]
    slice_rates = [
        [0.0 if multi and c == k - 1 else mig_rate(truth, single[c], *shape) for c in range(k)]
        for shape in slices
    ]
    starts = sorted({j.arrival_s for j in jobs})
    n, m, q, jn = len(starts), len(rows), len(slices), len(jobs)
    # variables: time in each mix, each slice's time on each class, each job's work; per slot;
    # then the last slot's length
    at_mix, at_slice, at_job = 0, n * m, n * m + n * q * k
    last = at_job + n * jn
    a = lil_matrix((n * (1 + q + k + jn), last + 1))
    b: list[float] = []
    row = 0

    def within(row: int, length: float | None, limit: float) -> None:
        """The row's sum at most `limit` × the slot's length (the last slot's: a variable)."""
        if length is None:
            a[row, last] = -limit
            b.append(0.0)
        else:
            b.append(limit * length)

    for s in range(n):
        length = starts[s + 1] - starts[s] if s + 1 < n else None
        for i in range(m):
            a[row, at_mix + s * m + i] = 1.0
        within(row, length, whole)
        row += 1
        for piece in range(q):
            for c in range(k):
                a[row, at_slice + (s * q + piece) * k + c] = 1.0
            within(row, length, 1.0)
            row += 1
        for c in range(k):
            for o, job in enumerate(jobs):
                if class_of(job) == c:
                    a[row, at_job + s * jn + o] = 1.0
            for i in range(m):
                a[row, at_mix + s * m + i] = -rows[i, c]
            for piece in range(q):
                a[row, at_slice + (s * q + piece) * k + c] = -slice_rates[piece][c]
            b.append(0.0)
            row += 1
        for o, job in enumerate(jobs):
            a[row, at_job + s * jn + o] = 1.0
            within(row, length, float(job.gpus))
            row += 1
    bounds: list[tuple[float, float | None]] = [(0.0, None)] * (last + 1)
    eq = lil_matrix((jn, last + 1))
    for o, job in enumerate(jobs):
        for s in range(n):
            eq[o, at_job + s * jn + o] = 1.0
            if starts[s] < job.arrival_s:
                bounds[at_job + s * jn + o] = (0.0, 0.0)
    cost = np.zeros(last + 1)
    cost[last] = 1.0
    work = [job.exclusive_s * job.gpus for job in jobs]
    result = linprog(
        cost,
        A_ub=csr_matrix(a[:row]),
        b_ub=b,
        A_eq=csr_matrix(eq),
        b_eq=work,
        bounds=bounds,
        method="highs",
    )
    if result.status != 0:
        raise SystemExit(f"the program was not solved: {result.message}")
    return float(starts[-1] + result.x[last])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--truth", help="as gpudesk simulate --truth (default: the defaults)")
    parser.add_argument("--slots", type=int, default=60, help="one GPU: slots (default 60)")
    parser.add_argument("--mig", help="as gpudesk simulate --mig: a GPU in MIG mode, its layout")
    args = parser.parse_args()
    trace = load_trace(args.trace)
    truth = load_truth(args.truth) if args.truth else DEFAULT_PARAMS
    sim = Simulation(trace, policy="auto", station=trace.sim_station, truth=truth, mig=args.mig)
    jobs = [run.job for run in sim.runs if run.impossible is None]
    if sim.gpu_count != 1 or sim.fixed or any(job.gpus != 1 for job in jobs):
        lb = bound_of(sim).makespan_s
        bound = station_bound(sim, jobs, truth)
        print(
            f"SIMULATED {trace.name} on {trace.sim_station}"
            f"{' --mig ' + args.mig if args.mig else ''}: LB {lb / 3600:.3f} h; time-indexed "
            f"bound (a slot per arrival) {bound / 3600:.3f} h = {bound / lb:.3f} x LB"
        )
        return
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
