"""The simulated truth: every running job's true rate (seconds of exclusive work per second), by
the interference model with the TRUTH parameters (exclusive 1.0; MPS and naive time-slicing by
its co-tenants' SM and bandwidth demand, in the product's form, the queueing form or the
once-paid form; a MIG slice by its share of the SMs and of the DRAM bandwidth; an MPS thread cap
stretches its kernels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from gpudesk.core.mig_profiles import COMPUTE_SLICES, MEMORY_SLICES
from gpudesk.policy.interference import (
    ModelParams,
    Workload,
    mig_rate,
    shared_mechanism,
    shared_rates,
    workload,
)
from gpudesk.policy.once_paid_form import OncePaid, once_paid_rates
from gpudesk.policy.queueing_form import queueing_rates
from gpudesk.policy.sim_records import SimRun
from gpudesk.policy.sim_station import slice_of, slice_shape

if TYPE_CHECKING:
    from gpudesk.policy.simulator import Simulation


def job_workload(run: SimRun, params: ModelParams) -> Workload:
    """A job's workload under these parameters (the truth's: its `sm_pct`), its MPS thread cap
    included."""
    sm_pct = run.job.sm_pct
    work = workload(sm_pct, run.job.membw_pct, params)
    placement = run.placement
    if placement is not None and placement.mode == "mps" and placement.mps_thread_pct:
        work = msgspec.structs.replace(work, thread_cap=placement.mps_thread_pct / 100.0)
    return work


def true_rates(sim: Simulation) -> dict[int, float]:
    """Every running job's true rate now (seconds of exclusive work per second)."""
    rates: dict[int, float] = {}
    shared: dict[int, list[SimRun]] = {}
    for run in sim.running:
        placement = run.placed
        if run.blocked_until > sim.now:
            rates[run.job.id] = 0.0
        elif placement.mode == "exclusive" or len(placement.gpus) > 1:
            rates[run.job.id] = 1.0
        elif placement.mode == "mig":
            mig = slice_of(sim, run)
            compute, memory = slice_shape(sim, mig) if mig else (COMPUTE_SLICES, MEMORY_SLICES)
            rates[run.job.id] = mig_rate(sim.truth, job_workload(run, sim.truth), compute, memory)
        else:
            shared.setdefault(placement.gpus[0], []).append(run)
    for group in shared.values():
        rates.update({r.job.id: v for r, v in zip(group, group_rates(sim, group), strict=True)})
    return rates


def group_rates(sim: Simulation, group: list[SimRun]) -> list[float]:
    """The true rates of the jobs sharing one whole GPU, in `group`'s order: time-sliced
    unless all are MPS clients (an MPS server beside other contexts is time-sliced too)."""
    tenants = [job_workload(r, sim.truth) for r in group]
    mode = shared_mechanism(r.placed.mode for r in group)
    if sim.truth_form is None:
        return list(shared_rates(sim.truth, mode, tenants))
    if isinstance(sim.truth_form, OncePaid):
        return once_paid_rates(sim.truth, mode, tenants)
    return list(queueing_rates(sim.truth_form, sim.truth, mode, tenants))
