"""Lower bounds a simulated run is judged against (`gpudesk simulate --lower-bound`): no policy,
however clever, finishes a trace sooner than `LowerBound.makespan_s` or with a smaller mean job
completion time than `LowerBound.mean_jct_s`, under the model's own rates (the simulated truth).

Makespan: the largest of four terms, the last two for a run of the station as given (no whole
GPU carved into MIG slices for free).

- **Arrival term**: max over jobs of (arrival + its run time alone). No rate exceeds 1.0 (the
  model never makes a job faster than alone), so no job ends sooner than that.
- **Fluid term**: give each job a weight per second of its steady exclusive work (its run time
  alone past its start-up, `startup_s`: a start-up takes no share of a GPU, so it is left out),
  λ = α·sm + β (its SM share alone, and a constant). Whatever runs on one GPU at one moment
  delivers weighted work at most θ(α, β) per second, the best the model's rates allow
  (`_best_throughput`; the proof of each case is in docs/simulator.md). No work is done before a
  job arrives, so for every arrival time a: makespan ≥ a + Σ (weighted work of the jobs
  arriving at or after a) ÷ (GPUs × θ). Every choice of (α, β) gives a true bound; the term is
  the largest over a fixed grid of choices, which spans "SM work over the SMs" (β = 0) to "jobs'
  work over the most job-seconds a GPU can do at once" (α = 0).
- **Class term** (sim_bound_classes): the fluid term with a weight per kind of job, and what a
  GPU delivers from the model's rates for every mix of those kinds.
- **Burst term** (sim_bound_burst): the last jobs, where they are one program (a sweep's burst),
  packed whole onto the GPUs and slices: a job runs where it started.

Mean JCT: two figures. `mean_jct_s`, the mean of the jobs' run times alone (a job's completion
time is at least that: the bound issue 39's targets are stated against); and `mean_jct_queue_s`,
which also counts the queueing no schedule avoids. Mean JCT = (1/n) ∫ N(t) dt, N(t) the jobs
arrived and not finished at t, and at every instant N(t) is at least each of:

- the jobs whose run time alone (start-up included) has not passed since they arrived (none
  ends sooner);
- for each weight (α, β) of the fluid term, the jobs a single server of the station's whole
  weighted capacity Σ θ would hold at t under shortest-remaining-work-first: any schedule on the
  station is one such server's schedule (its weighted work per second is at most Σ θ, none done
  before a job arrives), and on one server SRPT has the fewest jobs in the system at every
  instant of any schedule, fractional sharing included (Schrage 1968; Smith 1978, "A new proof
  of the optimality of the shortest remaining processing time discipline", Oper. Res. 26(1)).
  Each job's work there is its steady work: a schedule's start-ups, which take none of the
  station's capacity, only delay it further.

- for each weight per kind of job the class term found (sim_bound_classes), the jobs one
  server of the station's capacity at that weight would hold under SRPT, for a run of the
  station as given (`mean_jct_queue_of`: without these for one that is not,
  `mean_jct_queue_any_s`).

So (1/n) ∫ the largest of them is a bound too, at least the mean run time alone.

Jobs that can never run on the station (`impossible`) are left out: no policy runs them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudesk.core.mig_profiles import COMPUTE_SLICES
from gpudesk.policy.model_params import ModelParams
from gpudesk.policy.rates import MIN_RATE, workload
from gpudesk.policy.sim_bound_burst import BurstTerm, burst_term, slices_of
from gpudesk.policy.sim_bound_classes import ClassTerm, class_term
from gpudesk.policy.sim_station import slice_shape
from gpudesk.policy.trace import TraceJob

if TYPE_CHECKING:
    from gpudesk.policy.sim_records import SimResult
    from gpudesk.policy.simulator import Simulation

# (α, β) choices of the fluid term's weight: SM work alone, SM work plus a per-job constant at
# geometric steps, job-seconds alone. Any choice is a valid bound; more only tighten it.
WEIGHTS: tuple[tuple[float, float], ...] = (
    (1.0, 0.0),
    *((1.0, 0.01 * 1.25**i) for i in range(40)),
    (0.0, 1.0),
)


@dataclass(frozen=True)
class LowerBound:
    """What no policy can beat on this trace and station, and where each figure comes from."""

    makespan_s: float  # max(arrival_term_s, fluid_term_s, class_term_s): the station as given
    arrival_term_s: float  # latest (arrival + run time alone)
    arrival_job: int  # the job that gives it
    fluid_term_s: float  # the best fluid bound over WEIGHTS
    fluid_weight: tuple[float, float]  # the (α, β) that gave it
    fluid_from_s: float  # the arrival time it counts from
    fluid_throughput: float  # θ(α, β) for that weight, per GPU (the mean over the GPUs)
    class_term: ClassTerm | None  # the fluid term by workload class (sim_bound_classes)
    mean_jct_s: float  # mean run time alone
    mean_jct_queue_s: float  # the number-in-system bound: also the queueing no schedule avoids
    mean_jct_queue_any_s: float  # the same without the class term's servers (any run)
    jobs: int  # the jobs it covers (those that can run on the station)
    gpus: int
    burst_term: BurstTerm | None = None  # the last jobs of one program, packed (sim_bound_burst)

    @property
    def class_term_s(self) -> float:
        return self.class_term.makespan_s if self.class_term is not None else 0.0

    @property
    def burst_term_s(self) -> float:
        return self.burst_term.makespan_s if self.burst_term is not None else 0.0

    def makespan_of(self, result: SimResult) -> float:
        """The makespan bound `result` is judged against: every term for a run of the station
        as given; for one that is not (forced mig carving whole GPUs for free), the arrival and
        fluid terms only, the class and burst terms not holding there."""
        if result.not_runnable is not None:
            return max(self.arrival_term_s, self.fluid_term_s)
        return self.makespan_s

    def mean_jct_queue_of(self, result: SimResult) -> float:
        """The queueing mean-JCT bound `result` is judged against: with the class term's
        servers for a run of the station as given, without them for one that is not."""
        if result.not_runnable is not None:
            return self.mean_jct_queue_any_s
        return self.mean_jct_queue_s

    def to_dict(self) -> dict[str, object]:
        term = self.class_term
        return {
            "makespan_s": round(self.makespan_s, 1),
            "arrival_term_s": round(self.arrival_term_s, 1),
            "arrival_job": self.arrival_job,
            "fluid_term_s": round(self.fluid_term_s, 1),
            "fluid_weight": {"sm": self.fluid_weight[0], "per_job": round(self.fluid_weight[1], 5)},
            "fluid_from_s": round(self.fluid_from_s, 1),
            "fluid_throughput_per_gpu": round(self.fluid_throughput, 4),
            "class_term": None
            if term is None
            else {
                "makespan_s": round(term.makespan_s, 1),
                "from_s": round(term.from_s, 1),
                "weights": {
                    c: round(w, 6) for c, w in zip(term.classes, term.weights, strict=True)
                },
                "mixes": term.mixes,
            },
            "burst_term": None
            if self.burst_term is None
            else {
                "makespan_s": round(self.burst_term.makespan_s, 1),
                "from_s": round(self.burst_term.from_s, 1),
                "jobs": self.burst_term.jobs,
                "per_gpu": round(self.burst_term.per_gpu, 4),
            },
            "mean_jct_s": round(self.mean_jct_s, 1),
            "mean_jct_queue_s": round(self.mean_jct_queue_s, 1),
            "mean_jct_queue_any_s": round(self.mean_jct_queue_any_s, 1),
            "jobs": self.jobs,
            "gpus": self.gpus,
        }


def _best_throughput(
    params: ModelParams, alpha: float, beta: float, jobs: int, sm_total: float
) -> float:
    """θ(α, β): the most weighted work per second one GPU can deliver, over every way the model
    lets up to `jobs` tenants share it. Each case is an upper bound on what the model's rates
    (gpudesk/policy/rates.py) give; docs/simulator.md has the derivation."""
    best = alpha + COMPUTE_SLICES * beta  # alone, exclusive, or MIG slices (≤ 7 of them)
    for cost in (params.mps_tenant_cost, params.naive_switch_cost):
        for n in range(1, jobs + 1):
            shared = max(MIN_RATE, 1.0 - cost * (n - 1))
            # below the MIN_RATE floor the model still gives each tenant 0.05
            floor = MIN_RATE * (alpha * min(float(n), sm_total) + n * beta)
            best = max(best, shared * (alpha + n * beta), floor)
    return best


def _mig_throughput(alpha: float, beta: float, slices: tuple[int, ...] | None) -> float:
    """θ of a GPU in MIG mode: it runs work only on its slices, each at rate <= 1 and with SM
    work <= its compute share c/7; `slices` (compute slices of each) where its layout is fixed,
    None where it may be re-carved (any layout: at most 7 slices over 7 compute slices)."""
    if slices is None:
        return alpha + COMPUTE_SLICES * beta
    return alpha * min(1.0, sum(slices) / COMPUTE_SLICES) + beta * min(COMPUTE_SLICES, len(slices))


def bound_of(sim: Simulation) -> LowerBound:
    """The bounds of a simulation's trace on its station, under its truth: the jobs it can run,
    its GPUs, and each GPU it holds in MIG mode (fixed layouts, unless it may repartition).
    ValueError for a truth of another form than the product's: the fluid term's proof holds for
    the product's rates only."""
    if sim.truth_form is not None:
        raise ValueError(
            "the lower bound is proved for the model's own form only, not for a queueing truth"
        )
    repartition = sim.config.mig_repartition
    mig = {
        gpu: None if repartition else tuple(slice_shape(sim, s) for s in sim.slices[gpu])
        for gpu in sim.fixed
    }
    possible = [r.job for r in sim.runs if r.impossible is None]
    profiles = [(p.compute_slices, p.memory_slices) for p in sim.table] if repartition else []
    memory = {gpu: tuple(s.memory_mib for s in sim.slices[gpu]) for gpu in sim.fixed}
    return lower_bound(possible, sim.gpu_count, sim.truth, mig, profiles, memory)


def lower_bound(
    jobs: Sequence[TraceJob],
    gpu_count: int,
    params: ModelParams,
    mig: Mapping[int, tuple[tuple[int, int], ...] | None] | None = None,
    profiles: Sequence[tuple[int, int]] = (),
    slice_mib: Mapping[int, tuple[float, ...]] | None = None,
) -> LowerBound:
    """The lower bounds of a trace's possible jobs on `gpu_count` GPUs under `params` (the
    simulated truth); `mig` maps each GPU in MIG mode to its fixed layout's slices as (compute,
    memory) slices (None:
    it may be re-carved, into slices of `profiles`: the model's, as (compute slices, memory
    slices)); `slice_mib`: each fixed layout's slices' memory (None: every job fits every slice,
    which only loosens the burst term). `jobs` must be non-empty."""
    if not jobs or gpu_count < 1:
        raise ValueError("a lower bound needs at least one job and one GPU")
    mig = mig or {}
    by_arrival = sorted(jobs, key=lambda j: j.arrival_s)
    last = max(by_arrival, key=lambda j: (j.arrival_s + j.exclusive_s, j.id))
    sm = {j.id: workload(j.sm_pct, j.membw_pct, params).sm for j in by_arrival}
    sm_total = sum(sm[j.id] * j.gpus for j in by_arrival)
    fluid, weight, start, theta = 0.0, WEIGHTS[0], by_arrival[0].arrival_s, 1.0
    departures = [sorted(j.arrival_s + j.exclusive_s for j in by_arrival)]
    for alpha, beta in WEIGHTS:
        whole = _best_throughput(params, alpha, beta, len(jobs), sm_total)
        capacity = sum(
            _mig_throughput(alpha, beta, _compute(mig[g])) if g in mig else whole
            for g in range(gpu_count)
        )
        if capacity <= 0:
            continue  # (a MIG layout with no slices does no work; another weight bounds it)
        # steady work only: a start-up takes no share of a GPU (docs/simulator.md)
        work = [j.steady_s * j.gpus * (alpha * sm[j.id] + beta) for j in by_arrival]
        departures.append(_srpt_departures([j.arrival_s for j in by_arrival], work, capacity))
        remaining = 0.0  # weighted work of the jobs arriving at or after job i
        for i in range(len(by_arrival) - 1, -1, -1):
            j = by_arrival[i]
            remaining += work[i]
            if i > 0 and by_arrival[i - 1].arrival_s == j.arrival_s:
                continue  # count from the first job of this arrival time
            bound = j.arrival_s + remaining / capacity
            if bound > fluid:
                fluid, weight, start = bound, (alpha, beta), j.arrival_s
                theta = capacity / gpu_count
    arrival = last.arrival_s + last.exclusive_s
    term = class_term(jobs, gpu_count, params, mig, profiles)
    burst = burst_term(jobs, gpu_count - len(mig), params, slices_of(mig, slice_mib))
    arrivals = [j.arrival_s for j in by_arrival]
    given = list(departures)  # the station as given: the class term's servers too
    if term is not None:
        for weights, capacity in term.capacities:
            work = [term.work(j, weights) for j in by_arrival]
            given.append(_srpt_departures(arrivals, work, capacity))
    return LowerBound(
        makespan_s=max(
            arrival, fluid, term.makespan_s if term else 0.0, burst.makespan_s if burst else 0.0
        ),
        arrival_term_s=arrival,
        arrival_job=last.id,
        fluid_term_s=fluid,
        fluid_weight=weight,
        fluid_from_s=start,
        fluid_throughput=theta,
        class_term=term,
        mean_jct_s=sum(j.exclusive_s for j in jobs) / len(jobs),
        mean_jct_queue_s=_in_system_integral(arrivals, given) / len(jobs),
        mean_jct_queue_any_s=_in_system_integral(arrivals, departures) / len(jobs),
        jobs=len(jobs),
        gpus=gpu_count,
        burst_term=burst,
    )


def _compute(layout: tuple[tuple[int, int], ...] | None) -> tuple[int, ...] | None:
    """A fixed layout's compute slices per slice (None: it may be re-carved)."""
    return None if layout is None else tuple(compute for compute, _ in layout)


def _srpt_departures(arrivals: list[float], work: list[float], capacity: float) -> list[float]:
    """When each job leaves one server of `capacity` work per second that always serves the job
    with the least work left (preemptive SRPT), jobs arriving at `arrivals` (ascending) with
    `work` to do; ascending."""
    left: list[float] = []  # a heap of the work left of the jobs in the system
    done: list[float] = []
    now, i, n = 0.0, 0, len(arrivals)
    while i < n or left:
        if not left:
            now = max(now, arrivals[i])
        while i < n and arrivals[i] <= now:
            heapq.heappush(left, work[i])
            i += 1
        upcoming = arrivals[i] if i < n else math.inf
        ends = now + left[0] / capacity
        if ends <= upcoming:
            heapq.heappop(left)
            now = ends
            done.append(now)
        else:  # served until the next arrival, which may take the server
            heapq.heapreplace(left, left[0] - (upcoming - now) * capacity)
            now = upcoming
    return done


def _in_system_integral(arrivals: list[float], departures: list[list[float]]) -> float:
    """∫ max over the curves of N(t) dt, each curve's N(t) being the jobs arrived by t less its
    departures by t (`arrivals` and each curve ascending, each curve one departure per job):
    the largest N is the arrivals less the fewest departures by t."""
    events = sorted(
        [(t, -1) for t in arrivals]
        + [(t, curve) for curve, times in enumerate(departures) for t in times]
    )
    gone = [0] * len(departures)  # departures by now, per curve
    arrived, fewest, total, previous = 0, 0, 0.0, 0.0
    for t, curve in events:
        total += (arrived - fewest) * (t - previous)
        previous = t
        if curve < 0:
            arrived += 1
            continue
        gone[curve] += 1
        if gone[curve] - 1 == fewest:  # it may have been the one behind: look again
            fewest = min(gone)
    return total
