"""The replay's clock: the next moment anything can change (a job arriving, finishing, reaching
its peak memory or having it settle, a GPU's re-carve or a checkpoint ending, a preemptible job's
protection running out), and what the time up to it does: each running job's progress at its
true rate, each GPU's energy between the model's idle and busy draw, its busy time, and the
recent SM activity the policy sees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudesk.policy.demand import PEAK_SETTLED_S
from gpudesk.policy.sim_preemption import leaving_times

if TYPE_CHECKING:
    from gpudesk.policy.simulator import Simulation

SAMPLE_WINDOW_S = 30.0  # what "recent SM activity" averages over, for the policy


def next_event_at(sim: Simulation, rates: dict[int, float]) -> float | None:
    """When the next event is, at the running jobs' true `rates`; None when none is to come."""
    candidates = [sim.pending[0].job.arrival_s] if sim.pending else []
    for r in sim.running:
        if r.blocked_until > sim.now:
            candidates.append(r.blocked_until)
            continue
        candidates.append(sim.now + (r.job.steady_s - r.work_done) / rates[r.job.id])
        if r.peak_at > sim.now:
            candidates.append(r.peak_at)
        elif r.peak_at + PEAK_SETTLED_S > sim.now:
            candidates.append(r.peak_at + PEAK_SETTLED_S)  # its reservation is corrected
    candidates.extend(t for t in sim.reconfig_until.values() if t > sim.now)
    candidates.extend(leaving_times(sim))
    return min(candidates) if candidates else None


def advance(sim: Simulation, step: float, rates: dict[int, float]) -> None:
    for gpu in range(sim.gpu_count):
        tenants = sim.tenants_on(gpu)
        activity = _gpu_activity(sim, gpu, rates)
        sim.energy_j += _power(sim, activity, len(tenants)) * step
        if tenants:
            sim.busy_s += step
        history = sim.sm_history[gpu]
        history.append((sim.now + step, activity * 100.0))
        while history and history[0][0] < sim.now + step - SAMPLE_WINDOW_S:
            history.pop(0)
    for run in sim.running:
        run.work_done += rates[run.job.id] * step
    sim.now += step


def _gpu_activity(sim: Simulation, gpu: int, rates: dict[int, float]) -> float:
    """SM activity (0..1) the GPU shows: the work its tenants get done."""
    return min(1.0, sum(t.job.sm_pct / 100.0 * rates[t.job.id] for t in sim.tenants_on(gpu)))


def _power(sim: Simulation, activity: float, tenants: int) -> float:
    m = sim.model
    if not tenants:
        return m.idle_w
    return m.idle_w + (m.busy_w - m.idle_w) * (activity**0.9 + 0.03)
