"""The fluid makespan bound by workload class (`gpudesk/policy/sim_bounds.py` uses it): the
fluid term with a weight per *kind of job* rather than per unit of SM work, and with what one
GPU can deliver taken from the model's own rates for every mix of those kinds.

The jobs of a trace fall into a few classes: single-GPU jobs by their workload (SM and
bandwidth share alone), and multi-GPU jobs as one more. Give each class c a weight λ_c per
second of its steady exclusive work (a multi-GPU job's counted once per GPU; a job's start-up,
`startup_s`, takes no share of a GPU and is left out). What one GPU delivers
per second, Σ λ_c × (its class-c tenants' rates), is at most θ_t(λ) for a GPU of type t:

- a whole GPU: the most over every mix x of single-GPU tenants (x_c of class c, no more than the
  trace has) under MPS or time-slicing, at the rates `rates.shared_rates` gives them (a thread
  cap only lowers a rate; one tenant alone runs at 1), or a multi-GPU job alone (λ_multi).
  Mixes of `cap` tenants or more are bounded together: every rate there is at most
  max(MIN_RATE, 1 − min(tenant cost, switch cost) × (cap − 1)), so their value is at most
  that × Σ λ_c × (the trace's class-c jobs);
- a GPU in MIG mode with its layout fixed: each slice holds at most one job, at `mig_rate`;
- a GPU in MIG mode that may be re-carved (`--mig-repartition`): the best layout of the GPU
  model's profiles with at most 7 compute and 8 memory slices in all (the driver's placement
  rules allow fewer layouts, so this is a bound), one job a slice.

This holds for every run of **the station as given** (`SimResult.not_runnable` None): a whole
GPU stays whole. Forced `mig`, which carves whole GPUs into slices for free, is not bound by
it (small jobs run on 1g slices at nearly full rate, seven at once), as it is no mode the
station can run; the fluid term of sim_bounds.py, which counts carving, still bounds it.

Then for every λ ≥ 0 and every arrival time a, no schedule ends before
a + Σ_c λ_c × (class-c work arriving at or after a) ÷ Σ_GPUs θ_t(λ), as in the fluid term. The
λ for each arrival time is found by a small linear program (the dual of "the least time in
which mixes of GPU states deliver every class's work", solved by adding one mix at a time);
whatever λ it finds, the bound is computed from that λ and the exact θ, so it is a bound even
where the program stops early. Where the mixes to weigh would be too many (more than
MAX_MIXES even of two tenants), or a GPU may be re-carved and no profiles are given, there is
no class term (None).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpudesk.core.mig_profiles import COMPUTE_SLICES, MEMORY_SLICES
from gpudesk.policy.model_params import ModelParams, Workload
from gpudesk.policy.rates import MIN_RATE, mig_rate, shared_rates, workload
from gpudesk.policy.trace import TraceJob

MAX_MIXES = 40_000  # whole-GPU mixes weighed at most (beyond: tenants bounded together)
MAX_CUTS = 200  # mixes added to one linear program at most
MAX_ARRIVALS = 16  # arrival times given their own program (the others reuse their weights)
TOLERANCE = 1e-9


@dataclass(frozen=True)
class ClassTerm:
    """The class term: its value, the arrival time it counts from, and the weight per class."""

    makespan_s: float
    from_s: float
    weights: tuple[float, ...]
    classes: tuple[str, ...]  # each class, named by its workload ("sm 0.70 bw 0.35", "multi-GPU")
    mixes: int  # whole-GPU mixes weighed
    cap: int  # tenants from which mixes are bounded together
    # every weight the program found, with the station's capacity at it (Σ_GPUs θ_t(λ)), and
    # each job's class (by trace job id): sim_bounds' mean-JCT bound counts with them too
    capacities: tuple[tuple[tuple[float, ...], float], ...] = ()
    class_of: Mapping[int, int] = field(default_factory=dict)

    def work(self, job: TraceJob, weights: Sequence[float]) -> float:
        """The job's weighted work at these weights (a multi-GPU job's once per GPU): its
        steady work, as its start-up takes no share of a GPU."""
        return weights[self.class_of[job.id]] * job.steady_s * job.gpus


@dataclass(frozen=True)
class _GpuType:
    """GPUs that deliver alike: how many, and the value of each state per class."""

    count: int
    states: np.ndarray  # one row per state: its class rates (summed over its tenants)
    tail: np.ndarray | None = None  # bounds every mix of `cap` tenants or more (whole GPUs)
    fixed: np.ndarray | None = None  # per slice of a fixed layout: its class rates (MIG GPUs)
    # a MIG GPU that may be re-carved: per profile its (compute, memory) slices and class rates
    carvable: tuple[tuple[int, int], ...] = ()
    carvable_rates: np.ndarray | None = None

    def best(self, weights: np.ndarray) -> tuple[float, np.ndarray]:
        """θ(λ) and a state that gives it (a row of class rates)."""
        if self.fixed is not None:  # one job a slice, the best class for each slice
            return _one_job_a_slice(self.fixed, weights)
        if self.carvable_rates is not None:
            return _best_carving(self.carvable, self.carvable_rates, weights)
        values = self.states @ weights
        at = int(np.argmax(values))
        value, row = float(values[at]), self.states[at]
        if self.tail is not None and float(self.tail @ weights) > value:
            value, row = float(self.tail @ weights), self.tail
        return value, row


def class_term(
    jobs: Sequence[TraceJob],
    gpu_count: int,
    params: ModelParams,
    mig: Mapping[int, tuple[tuple[int, int], ...] | None],
    profiles: Sequence[tuple[int, int]] = (),
) -> ClassTerm | None:
    """The class term for these jobs (all of which the station can run) on `gpu_count` GPUs
    under `params`; `mig` maps each GPU in MIG mode to its fixed layout's slices as (compute
    slices, memory slices), None where it may be re-carved into any layout of `profiles`
    (the GPU model's, as (compute slices, memory slices)). None where there is no class term
    (above)."""
    if not jobs or (not profiles and any(layout is None for layout in mig.values())):
        return None
    single = sorted({_load(j, params) for j in jobs if j.gpus == 1}, key=lambda w: (w.sm, w.membw))
    names = [f"sm {w.sm:.2f} bw {w.membw:.2f}" for w in single]
    if len(set(names)) < len(names):  # workloads that differ past the second decimal
        names = [f"{name} #{i + 1}" for i, name in enumerate(names)]
    multi = any(j.gpus > 1 for j in jobs)
    k = len(single) + int(multi)
    counts = [sum(1 for j in jobs if j.gpus == 1 and _load(j, params) == w) for w in single]
    whole = gpu_count - len(mig)
    types: list[_GpuType] = []
    cap, mixes = 0, 0
    if whole:
        found = whole_states(single, counts, multi, params)
        if found is None:
            return None
        states, tail, cap = found
        mixes = len(states)
        types.append(_GpuType(whole, states, tail))
    shapes = tuple(profiles)
    carved = np.array([_slice_row(single, multi, params, c, m) for c, m in shapes])
    for layout in mig.values():
        if layout is None:  # any layout of the model's profiles, one job a slice
            rates = carved.reshape(len(shapes), k)
            types.append(_GpuType(1, np.zeros((0, k)), carvable=shapes, carvable_rates=rates))
            continue
        rows = [_slice_row(single, multi, params, c, m) for c, m in layout]
        types.append(_GpuType(1, np.zeros((0, k)), fixed=np.array(rows).reshape(len(rows), k)))
    ordered = sorted(jobs, key=lambda j: j.arrival_s)
    index = {w: i for i, w in enumerate(single)}
    work = np.zeros((len(ordered), k))
    for row, j in enumerate(ordered):
        column = k - 1 if j.gpus > 1 else index[_load(j, params)]
        work[row, column] = j.steady_s * j.gpus  # its start-up takes no share of a GPU
    # the class work arriving at or after each job's arrival (counted from the first of a time)
    suffix = np.cumsum(work[::-1], axis=0)[::-1]
    starts = [
        i for i in range(len(ordered)) if i == 0 or ordered[i - 1].arrival_s < ordered[i].arrival_s
    ]
    chosen = (
        starts
        if len(starts) <= MAX_ARRIVALS
        else [
            starts[round(i * (len(starts) - 1) / (MAX_ARRIVALS - 1))] for i in range(MAX_ARRIVALS)
        ]
    )
    candidates = [_weights_for(suffix[i], types) for i in chosen]
    class_of = {j.id: k - 1 if j.gpus > 1 else index[_load(j, params)] for j in ordered}
    capacities: list[tuple[tuple[float, ...], float]] = []
    best = ClassTerm(0.0, ordered[0].arrival_s, (0.0,) * k, (*names, "multi-GPU")[:k], mixes, cap)
    for weights in candidates:
        capacity = sum(t.count * t.best(weights)[0] for t in types)
        if capacity <= 0:
            continue
        capacities.append((tuple(float(w) for w in weights), capacity))
        for i in starts:
            bound = ordered[i].arrival_s + float(suffix[i] @ weights) / capacity
            if bound > best.makespan_s:
                best = ClassTerm(
                    bound,
                    ordered[i].arrival_s,
                    tuple(float(w) for w in weights),
                    best.classes,
                    mixes,
                    cap,
                )
    return replace(best, capacities=tuple(capacities), class_of=class_of)


def _load(job: TraceJob, params: ModelParams) -> Workload:
    return workload(job.sm_pct, job.membw_pct, params)


def whole_states(
    single: list[Workload], counts: list[int], multi: bool, params: ModelParams
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Every mix of fewer than `cap` single-GPU tenants on a whole GPU, under MPS and under
    time-slicing, as rows of class rates; the row that bounds every larger mix; and `cap`.
    Public: `bench/experiments/time_indexed_bound.py` builds its program from the same mixes."""
    k = len(single) + int(multi)
    cost = min(params.mps_tenant_cost, params.naive_switch_cost)
    floor_at = math.inf if cost <= 0 else 1 + math.ceil((1.0 - MIN_RATE) / cost)
    cap = int(min(floor_at, sum(counts) + 1))
    while cap > 2 and _mix_count(counts, cap - 1) > MAX_MIXES:
        cap -= 1
    if _mix_count(counts, cap - 1) > MAX_MIXES:
        return None
    rows: list[list[float]] = []
    if multi:
        rows.append([0.0] * (k - 1) + [1.0])  # a multi-GPU job alone on each of its GPUs
    for mix in _mixes(counts, cap - 1):
        tenants = [w for w, n in zip(single, mix, strict=True) for _ in range(n)]
        for mechanism in ("mps", "naive"):
            rates = shared_rates(params, mechanism, tenants)
            row = [0.0] * k
            at = 0
            for c, n in enumerate(mix):
                row[c] = sum(rates[at : at + n])
                at += n
            rows.append(row)
    # every mix of `cap` tenants or more at once (none where the trace has fewer jobs)
    most = max(MIN_RATE, 1.0 - cost * (cap - 1)) if cost > 0 else 1.0
    if cap > sum(counts):
        most = 0.0
    tail = np.array([most * n for n in counts] + ([0.0] if multi else []))
    return np.array(rows).reshape(len(rows), k), tail, cap


def _mix_count(counts: list[int], most: int) -> int:
    """How many mixes of 1..`most` tenants the class counts allow."""
    ways = [1] + [0] * most  # ways[n]: mixes of n tenants over the classes so far
    for count in counts:
        ways = [sum(ways[n - x] for x in range(min(count, n) + 1)) for n in range(most + 1)]
    return sum(ways) - 1


def _mixes(counts: list[int], most: int) -> Iterator[tuple[int, ...]]:
    """Every mix of 1..`most` tenants, at most counts[c] of class c."""

    def from_class(c: int, left: int) -> Iterator[tuple[int, ...]]:
        if c == len(counts):
            yield ()
            return
        for n in range(min(counts[c], left) + 1):
            for rest in from_class(c + 1, left - n):
                yield (n, *rest)

    return (mix for mix in from_class(0, most) if sum(mix))


def _slice_row(
    single: list[Workload], multi: bool, params: ModelParams, compute: int, memory: int
) -> list[float]:
    """Each class's rate alone on a slice of this shape (a multi-GPU job cannot take one)."""
    return [mig_rate(params, w, compute, memory) for w in single] + ([0.0] if multi else [])


def _one_job_a_slice(rates: np.ndarray, weights: np.ndarray) -> tuple[float, np.ndarray]:
    """A fixed layout at these weights: on each slice the job of the class worth most there
    (or none), and the class rates that gives."""
    row = np.zeros(rates.shape[1])
    value = 0.0
    for slice_rates in rates:
        worth = slice_rates * weights
        c = int(np.argmax(worth))
        if worth[c] > 0:
            value += float(worth[c])
            row[c] += slice_rates[c]
    return value, row


def _best_carving(
    shapes: tuple[tuple[int, int], ...], rates: np.ndarray, weights: np.ndarray
) -> tuple[float, np.ndarray]:
    """The most a re-carvable MIG GPU delivers at these weights: slices of the model's profiles
    with at most 7 compute and 8 memory slices in all (the driver's placement rules only allow
    fewer layouts: a bound), each running the job of the class worth most there; and the class
    rates that gives."""
    worth = rates * weights
    best_class = np.argmax(worth, axis=1) if len(shapes) else np.zeros(0, dtype=int)
    value = [float(worth[p, best_class[p]]) for p in range(len(shapes))]
    worthy = [(p, pc, pm) for p, (pc, pm) in enumerate(shapes) if value[p] > 0]
    # best[c][m]: the most with c compute and m memory slices used, and the profile added last
    # to get it (None: nothing), from which the rates it gives are summed once at the end
    best = [[0.0] * (MEMORY_SLICES + 1) for _ in range(COMPUTE_SLICES + 1)]
    last: list[list[int | None]] = [[None] * (MEMORY_SLICES + 1) for _ in range(COMPUTE_SLICES + 1)]
    for c in range(COMPUTE_SLICES + 1):
        for m in range(MEMORY_SLICES + 1):
            for p, pc, pm in worthy:
                if pc <= c and pm <= m and best[c - pc][m - pm] + value[p] > best[c][m]:
                    best[c][m], last[c][m] = best[c - pc][m - pm] + value[p], p
    chain: list[int] = []  # the profiles of the best layout, last added first
    c, m = COMPUTE_SLICES, MEMORY_SLICES
    while (added := last[c][m]) is not None:
        chain.append(added)
        c, m = c - shapes[added][0], m - shapes[added][1]
    row = np.zeros(rates.shape[1])
    for p in reversed(chain):  # in the order they were added: the same sums, bit for bit
        row[best_class[p]] += rates[p, best_class[p]]
    return best[COMPUTE_SLICES][MEMORY_SLICES], row


def _weights_for(work: np.ndarray, types: list[_GpuType]) -> np.ndarray:
    """A weight per class that makes the bound for this class work large: the dual of "the
    least time in which the GPUs' states deliver `work`", maximise work·λ subject to
    λ·(a state's rates) ≤ μ_t for each GPU type t and Σ count_t μ_t ≤ 1, with the states
    added one at a time (the one the current λ values most above its type's μ)."""
    k, t = work.shape[0], len(types)
    cuts: list[tuple[np.ndarray, int]] = []
    for g, kind in enumerate(types):  # start with each type's best state for each class
        for c in range(k):
            unit = np.zeros(k)
            unit[c] = 1.0
            cuts.append((kind.best(unit)[1], g))
    weights = np.zeros(k)
    for _ in range(MAX_CUTS):
        solved = _solve_dual(work, cuts, [kind.count for kind in types], k, t)
        if solved is None:
            break
        weights, limits = solved
        added = False
        for g, kind in enumerate(types):
            value, row = kind.best(weights)
            if value > limits[g] * (1 + 1e-7) + TOLERANCE:
                cuts.append((row, g))
                added = True
        if not added:
            break
    if not weights.any():  # fall back: the class work itself
        weights = work / max(float(work.sum()), 1.0)
    return weights


def _solve_dual(
    work: np.ndarray, cuts: list[tuple[np.ndarray, int]], counts: list[int], k: int, t: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """max work·λ over λ ≥ 0, μ ≥ 0 with row·λ − μ_g ≤ 0 per cut and Σ counts·μ ≤ 1: a
    dense simplex with Bland's rule (no cycling), from the all-slack basis (feasible: b ≥ 0)."""
    m, n = len(cuts) + 1, k + t
    table = np.zeros((m + 1, n + m + 1))
    for i, (row, g) in enumerate(cuts):
        table[i, :k] = row
        table[i, k + g] = -1.0
    table[m - 1, k : k + t] = counts
    table[m - 1, -1] = 1.0
    table[:m, n : n + m] = np.eye(m)
    table[m, :k] = -work
    basis = np.arange(n, n + m)
    for _ in range(50 * (m + n)):
        negative = np.flatnonzero(table[m, : n + m] < -TOLERANCE)
        if not len(negative):
            values = np.zeros(n + m)
            values[basis] = table[:m, -1]
            return values[:k], values[k:n]
        entering = int(negative[0])  # Bland's rule: the lowest index
        column = table[:m, entering]
        rows = np.flatnonzero(column > TOLERANCE)
        if not len(rows):
            return None  # unbounded: a class no state serves (it cannot run here)
        # the least ratio, ties to the lowest basic variable (Bland's rule), then the lowest row
        ratios = table[rows, -1] / column[rows]
        leaving = int(rows[np.lexsort((rows, basis[rows], ratios))[0]])
        table[leaving] /= table[leaving, entering]
        pivot = table[leaving].copy()
        factors = table[:, entering].copy()
        factors[leaving] = 0.0
        table -= np.outer(factors, pivot)
        basis[leaving] = entering
    return None
