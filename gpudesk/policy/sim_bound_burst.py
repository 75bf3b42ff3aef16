"""The makespan bound by packing the last jobs of a trace, where they are one program
(`gpudesk/policy/sim_bounds.py` uses it): a same-command sweep's burst, which the fluid terms
spread over the station as if its jobs were divisible.

A job runs where it started: the simulator never moves a running job's work (an OOM starts it
over, which only adds work; a preemptible job, whose checkpoint may carry work to another GPU,
is never counted). Take the one-GPU jobs of one workload class (SM and bandwidth share alone)
arriving at or after a time a, and a horizon H. Under the model's rates (`rates.shared_rates`,
`rates.mig_rate`: the truth `sim_rates.true_rates` plays):

- **a whole GPU** does at most T* = max over n of (n tenants of the class × their rate), under MPS
  or time-slicing, or 1 alone, seconds of exclusive steady work per second: other tenants (of
  the class or not), more of them, a thread cap or a start-up delay only lower each one's rate,
  each rate is at most 1, and a job in its start-up (the trace's `startup_s`) takes no share and
  does no steady work. So it finishes k of these jobs within [a, a + H] only if the k smallest
  steady works add up to at most T*·H, and each job's run time alone is at most H;
- **a MIG slice** of a layout as given runs one job at a time, its start-up at wall-clock speed
  and its steady work at `mig_rate` for its profile, and finishes there only a job whose peak
  memory it holds (a larger one dies of OOM): k jobs within H only if the k smallest that fit,
  each so, take at most H in a row.

No job of them starts before a. If the resources' k, each counted on the smallest jobs (which
counts some jobs twice and only loosens the bound), add up to fewer than the jobs, no schedule
ends them by a + H (whatever else runs). The term is a + the least H at which they do (by
bisection to a second, keeping the largest H found too short), the largest over the classes and
over the arrival times a of each class's last MAX_JOBS jobs. It holds for a run of the station
as given, as the class term does, and is None where a GPU may be re-carved (its slices are not
known) or no job qualifies.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpudesk.policy.model_params import ModelParams, Workload
from gpudesk.policy.rates import mig_rate, shared_rates, workload
from gpudesk.policy.trace import TraceJob

MAX_JOBS = 256  # a class's jobs counted back from its last, at most (any subset bounds)
RESOLUTION_S = 1.0  # the bisection's step


@dataclass(frozen=True)
class BurstTerm:
    """The burst term: its value, the arrival time it counts from, and what gave it."""

    makespan_s: float
    from_s: float  # a
    jobs: int  # the jobs arriving at or after a
    per_gpu: float  # T*: a whole GPU's most exclusive work per second for their class


@dataclass(frozen=True)
class Slice:
    """A MIG slice of a layout as given: its shape and the memory it holds."""

    compute: int
    memory: int  # memory slices
    memory_mib: float


def burst_term(
    jobs: Sequence[TraceJob],
    whole_gpus: int,
    params: ModelParams,
    slices: Sequence[Slice] | None,
) -> BurstTerm | None:
    """The burst term of `jobs` (those the station can run) on `whole_gpus` whole GPUs and
    the MIG `slices` of its GPUs in MIG mode (None: a GPU may be re-carved: no term)."""
    if slices is None:
        return None
    # a class is a workload under the truth, as the class term has it (sim_bound_classes)
    classes: dict[Workload, list[TraceJob]] = {}
    for job in sorted(jobs, key=lambda j: j.arrival_s):
        if job.gpus == 1 and not job.preemptible:
            classes.setdefault(workload(job.sm_pct, job.membw_pct, params), []).append(job)
    best: BurstTerm | None = None
    for load, ordered in classes.items():
        first = max(0, len(ordered) - MAX_JOBS)
        tops = throughputs(load, params, len(ordered) - first)  # once a class
        for start in range(len(ordered) - 1, first - 1, -1):
            if start > first and ordered[start - 1].arrival_s == ordered[start].arrival_s:
                continue  # count from the first job of this arrival time
            counted = ordered[start:]
            term = _term(counted, load, tops[len(counted)], whole_gpus, params, slices)
            if best is None or term.makespan_s > best.makespan_s:
                best = term
    return best


def throughputs(load: Workload, params: ModelParams, most: int) -> list[float]:
    """T* for up to n tenants of this workload, for every n from 0 to `most` (the model's
    MIN_RATE floor gives each of many tenants 0.05, so it grows again with n past a point: a
    count of jobs is bound by T* for that count, not a larger one)."""
    tops = [1.0, 1.0]
    for n in range(2, most + 1):
        shared = max(sum(shared_rates(params, m, [load] * n)) for m in ("mps", "naive"))
        tops.append(max(tops[-1], shared))
    return tops[: most + 1]


def _term(
    counted: Sequence[TraceJob],
    load: Workload,
    top: float,
    whole_gpus: int,
    params: ModelParams,
    slices: Sequence[Slice],
) -> BurstTerm:
    """The bound for these jobs (of workload `load`, arriving from counted[0]'s arrival), a
    whole GPU doing at most `top` of their work a second."""
    works = sorted(j.exclusive_s for j in counted)  # each job's least time, start-up included
    # what a whole GPU must do of them: their steady work (a start-up takes no share of it)
    total = list(itertools.accumulate(sorted(j.steady_s for j in counted)))
    rated = [(mig_rate(params, load, p.compute, p.memory), p.memory_mib) for p in slices]
    in_row = []  # per slice: the running sums of the fitting jobs' times there, smallest first
    for rate, memory_mib in rated:
        fits = sorted(_on_slice(j, rate) for j in counted if j.peak_memory_mib <= memory_mib)
        in_row.append(list(itertools.accumulate(fits)))

    def finished(horizon: float) -> int:
        per_gpu = min(
            bisect.bisect_right(total, top * horizon), bisect.bisect_right(works, horizon)
        )
        return whole_gpus * per_gpu + sum(bisect.bisect_right(s, horizon) for s in in_row)

    # A horizon by which they all end: one whole GPU runs them one after another (T* >= 1), or
    # without one, each on the fastest slice that holds it (a slice's smallest-first count is
    # at least what any set of its jobs within the horizon holds). A job no slice holds is one
    # the station cannot run, left out before: were one here, there would be no bound.
    if whole_gpus:
        high = sum(works)
    else:
        high = sum(
            min((_on_slice(j, r) for r, m in rated if j.peak_memory_mib <= m), default=math.inf)
            for j in counted
        )
        if math.isinf(high):
            return BurstTerm(counted[0].arrival_s, counted[0].arrival_s, len(counted), top)
    low = 0.0
    while high - low > RESOLUTION_S:
        middle = (low + high) / 2
        low, high = (low, middle) if finished(middle) >= len(counted) else (middle, high)
    arrival = counted[0].arrival_s
    return BurstTerm(arrival + low, arrival, len(counted), top)


def _on_slice(job: TraceJob, rate: float) -> float:
    """How long the job holds a slice where it runs at `rate`: its start-up at wall-clock
    speed, then its steady work (a slice runs one job at a time)."""
    return job.startup_s + job.steady_s / rate


def slices_of(
    mig: Mapping[int, tuple[tuple[int, int], ...] | None],
    memory_mib: Mapping[int, tuple[float, ...]] | None = None,
) -> list[Slice] | None:
    """The slices of the GPUs in MIG mode, from their layouts as (compute, memory) slices and
    each slice's memory (None: every job fits every slice, which only loosens the term); None
    where a GPU may be re-carved."""
    out: list[Slice] = []
    for gpu, layout in mig.items():
        if layout is None:
            return None
        sizes = memory_mib[gpu] if memory_mib is not None else (math.inf,) * len(layout)
        out.extend(
            Slice(compute, memory, mib)
            for (compute, memory), mib in zip(layout, sizes, strict=True)
        )
    return out
