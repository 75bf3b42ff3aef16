"""Memory and out-of-memory deaths in the simulator (docs/simulator.md, "Memory and OOM"): a job's
memory grows to its true peak over its first epoch; when it reaches its peak it dies if the peak
exceeds what it was given (its MPS limit, its MIG slice) or what the GPU's tenants together leave,
and goes back to the queue with the policy's recovery (`Demand.after_oom`), capped where the
engine caps it, until it has died `MAX_ATTEMPTS` times or its measured need is beyond every GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudesk.policy.demand import beyond_every_gpu
from gpudesk.policy.policy import RESERVE_MIB
from gpudesk.policy.sim_records import SimRun

if TYPE_CHECKING:
    from gpudesk.policy.simulator import Simulation

MAX_ATTEMPTS = 4  # a job that dies this often is lost

RAMP_S = 60.0  # a job reaches its peak memory over its first epoch: 10 % of its run,
MAX_RAMP_S = 600.0  # at least a minute and at most ten


def peak_at(run: SimRun) -> float:
    """When an attempt that starts progressing at `run.blocked_until` (past its start-up and any
    restore) reaches its peak memory: its first epoch of steady work."""
    steady_s = run.job.steady_s
    return run.blocked_until + min(MAX_RAMP_S, max(RAMP_S, 0.1 * steady_s), steady_s / 2)


def crash_out_of_memory(sim: Simulation) -> None:
    """The running jobs that reach their peak now and find no room for it die."""
    for run in list(sim.running):
        if abs(run.peak_at - sim.now) < 1e-6 and out_of_memory(sim, run):
            crash(sim, run)


def out_of_memory(sim: Simulation, run: SimRun) -> bool:
    peak = run.job.peak_memory_mib
    if run.limit_mib is not None and peak > run.limit_mib:
        return True
    if run.placed.mode == "mig":
        return False
    for gpu in run.placed.gpus:
        on_gpu = [t for t in sim.tenants_on(gpu) if t.placed.mode != "mig"]
        in_use = sum(t.job.peak_memory_mib if t.peak_at <= sim.now else 0.0 for t in on_gpu)
        if in_use > sim.model.memory_total_mib:
            return True
    return False


def crash(sim: Simulation, run: SimRun) -> None:
    sim.ooms += 1
    observed = min(run.job.peak_memory_mib, run.limit_mib or sim.model.memory_total_mib)
    had_whole = run.placed.mode == "exclusive"  # every GPU here is the largest
    sim.stop(run, "oom")
    if run.attempts >= MAX_ATTEMPTS:
        run.lost = True
        sim.lost_why[run.job.id] = f"out of memory {run.attempts} times"
        return
    # Capped where the engine caps it (attempts.py): at what the GPU offers a job alone,
    # so a job that died sharing is retried alone rather than lost as "too big"; only a
    # need measured beyond that fails it, as the engine's retry rule does.
    usable = sim.model.memory_total_mib - RESERVE_MIB
    run.demand = run.demand.after_oom(observed, usable, had_whole)
    if beyond_every_gpu(run.demand, usable):
        run.lost = True
        sim.lost_why[run.job.id] = (
            "ran out of memory holding all a GPU offers: its measured need is beyond every GPU"
        )
        return
    run.work_done = 0.0
    sim.queue.add(run)
