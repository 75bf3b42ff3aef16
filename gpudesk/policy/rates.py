"""The interference model's rules (gpudesk.policy.interference has them in words): a job's rate
under MPS, naive time-slicing, a MIG slice or an MPS thread cap, beside whom; and what a job
joining a GPU's tenants would do to them (`predict_join`, `Joining`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import msgspec

from gpudesk.core.mig_profiles import COMPUTE_SLICES, MEMORY_SLICES
from gpudesk.policy.model_params import ModelParams, Workload

MIN_RATE = 0.05  # a job under any amount of sharing still makes some progress


def shared_mechanism(modes: Iterable[str]) -> str:
    """How the tenants of one whole GPU, in these placement modes, share it: MPS only where
    every one is an MPS client; else time-slicing, for all of them (the MPS server is then one
    context among the GPU's others)."""
    return "mps" if all(mode == "mps" for mode in modes) else "naive"


def workload(sm_pct: float, membw_pct: float | None, params: ModelParams) -> Workload:
    """A job's workload from percentages; bandwidth defaults from its SM share."""
    return _workload(sm_pct, membw_pct, params.membw_per_sm)


@functools.lru_cache(maxsize=4096)
def _workload(sm_pct: float, membw_pct: float | None, membw_per_sm: float) -> Workload:
    # A placement pass asks for the same few workloads again and again (each tenant of each
    # GPU state it weighs, each job's), and a Workload is frozen: one object serves them all.
    sm = min(1.0, max(0.0, sm_pct / 100.0))
    membw = membw_pct / 100.0 if membw_pct is not None else sm * membw_per_sm
    return Workload(sm, min(1.0, max(0.0, membw)))


# --- rates ----------------------------------------------------------------------------------
def kernel_active(params: ModelParams, job: Workload) -> float:
    """The share of time a kernel of the job runs (NVML utilization), alone."""
    if job.sm <= 0.0:
        return 0.0
    return min(1.0, job.sm + params.kernel_active_extra)


def _stretch(params: ModelParams, job: Workload, sm_share: float, bw_share: float) -> float:
    """The job's rate when its kernels get `sm_share` of the SMs and `bw_share` of the DRAM
    bandwidth: kernels stretch by how much wider they are than that; the rest does not."""
    active = kernel_active(params, job)
    if active <= 0.0:
        return 1.0
    width = job.sm / active
    bandwidth = job.membw / active
    factor = max(1.0, width / max(sm_share, 1e-6), bandwidth / max(bw_share, 1e-6))
    return 1.0 / ((1.0 - active) + active * factor)


def cap_factor(params: ModelParams, job: Workload) -> float:
    """How much an MPS thread cap slows the job (1.0 without one)."""
    if job.thread_cap is None or job.thread_cap >= 1.0:
        return 1.0
    return _stretch(params, job, job.thread_cap, 1.0)


def mps_rates(params: ModelParams, tenants: Sequence[Workload]) -> list[float]:
    """Each MPS tenant's rate when these run together."""
    n = len(tenants)
    if n == 0:
        return []
    if n == 1:
        return [cap_factor(params, tenants[0])]
    pressure = max(sum([t.sm for t in tenants]), sum([t.membw for t in tenants]))
    shared = mps_shared_rate(params, pressure, n)
    if all([t.thread_cap is None for t in tenants]):
        return [shared] * n  # no cap to stretch them: each at the shared rate (MIN_RATE..1)
    return [max(MIN_RATE, min(shared, cap_factor(params, t))) for t in tenants]


def mps_shared_rate(params: ModelParams, pressure: float, n: int) -> float:
    """The rate of each of `n` uncapped MPS tenants at this pressure (n >= 2)."""
    return max(
        MIN_RATE,
        min(1.0, 1.0 / max(pressure, 1e-6))
        * max(MIN_RATE, 1.0 - params.mps_tenant_cost * (n - 1))
        * max(MIN_RATE, 1.0 - params.contention * max(0.0, pressure - 1.0)),
    )


def naive_rates(params: ModelParams, tenants: Sequence[Workload]) -> list[float]:
    """Each time-sliced tenant's rate when these run together."""
    n = len(tenants)
    if n <= 1:
        return [1.0] * n
    load = sum([kernel_active(params, t) for t in tenants])
    shared = min(1.0, 1.0 / max(load, 1e-6)) * max(
        MIN_RATE, 1.0 - params.naive_switch_cost * (n - 1)
    )
    return [max(MIN_RATE, shared)] * n


def mig_rate(params: ModelParams, job: Workload, compute_slices: int, memory_slices: int) -> float:
    """The job's rate alone on a MIG slice (slices do not slow each other)."""
    return max(
        MIN_RATE,
        _stretch(params, job, compute_slices / COMPUTE_SLICES, memory_slices / MEMORY_SLICES),
    )


def shared_rates(
    params: ModelParams,
    mechanism: str,
    tenants: Sequence[Workload],
    compute_slices: int = COMPUTE_SLICES,
    memory_slices: int = MEMORY_SLICES,
) -> list[float]:
    """Rates of jobs running together under `mechanism`: the tenants of one GPU (mps, naive,
    exclusive), or for "mig" each on a slice of this size."""
    if mechanism == "mps":
        return mps_rates(params, tenants)
    if mechanism == "naive":
        return naive_rates(params, tenants)
    if mechanism == "mig":
        return [mig_rate(params, t, compute_slices, memory_slices) for t in tenants]
    return [1.0] * len(tenants)


class Prediction(msgspec.Struct, frozen=True):
    """What joining a GPU does: the job's rate, and the work per second the GPU gains."""

    rate: float  # the new job's
    gain: float  # the job's rate minus what its tenants lose, in whole-GPU work per second
    tenants_before: tuple[float, ...] = ()
    tenants_after: tuple[float, ...] = ()


def predict_join(
    params: ModelParams,
    mechanism: str,
    job: Workload,
    tenants: Sequence[Workload],
    before: Sequence[float] | None = None,
) -> Prediction:
    """The job joins the GPU's `tenants` under `mechanism` (mps or naive); `before` are the
    tenants' rates now, where the caller has them already."""
    if before is None:
        before = shared_rates(params, mechanism, tenants) if tenants else []
    uncapped = job.thread_cap is None and all(t.thread_cap is None for t in tenants)
    if mechanism == "mps" and tenants and uncapped:
        # the placement hot path: every uncapped tenant runs at one shared rate
        pressure = max(
            sum(t.sm for t in tenants) + job.sm, sum(t.membw for t in tenants) + job.membw
        )
        rate = mps_shared_rate(params, pressure, len(tenants) + 1)
        after_all = tuple(rate for _ in tenants)
        return Prediction(rate, rate * (len(tenants) + 1) - sum(before), tuple(before), after_all)
    after = shared_rates(params, mechanism, [*tenants, job])
    rate = after[-1]
    lost = sum(b - a for b, a in zip(before, after, strict=False))
    return Prediction(rate, rate - lost, tuple(before), tuple(after[:-1]))


class Joining:
    """`predict_join` for many jobs that might join the same tenants (a placement pass weighs
    each GPU for many jobs): what depends on the tenants alone is taken once. Gives exactly
    what `predict_join` gives."""

    def __init__(
        self,
        params: ModelParams,
        mechanism: str,
        tenants: Sequence[Workload],
        before: Sequence[float] | None = None,
    ) -> None:
        self.params, self.mechanism, self.tenants = params, mechanism, tenants
        # the MPS hot path of predict_join: every uncapped tenant runs at one shared rate
        self.uniform = (
            mechanism == "mps" and bool(tenants) and all([t.thread_cap is None for t in tenants])
        )
        # (lists, not generators: a pass makes one of these per GPU state it weighs)
        self.sm = sum([t.sm for t in tenants])
        self.membw = sum([t.membw for t in tenants])
        self.before = tuple(shared_rates(params, mechanism, tenants) if before is None else before)
        self.lost = sum(self.before)
        # naive_rates' hot path: every time-sliced tenant runs at one rate, set by the summed
        # kernel-active time (thread caps do not matter there)
        self.sliced = mechanism == "naive" and bool(tenants)
        self.active = sum([kernel_active(params, t) for t in tenants]) if self.sliced else 0.0

    def __call__(self, job: Workload) -> Prediction:
        n = len(self.tenants)
        if self.uniform and job.thread_cap is None:
            pressure = max(self.sm + job.sm, self.membw + job.membw)
            rate = mps_shared_rate(self.params, pressure, n + 1)
            return Prediction(rate, rate * (n + 1) - self.lost, self.before, (rate,) * n)
        if self.sliced:
            load = self.active + kernel_active(self.params, job)
            shared = min(1.0, 1.0 / max(load, 1e-6)) * max(
                MIN_RATE, 1.0 - self.params.naive_switch_cost * n
            )
            rate = max(MIN_RATE, shared)
            lost = sum(b - rate for b in self.before)  # as predict_join sums it, to the bit
            return Prediction(rate, rate - lost, self.before, (rate,) * n)
        return predict_join(self.params, self.mechanism, job, self.tenants, self.before)
