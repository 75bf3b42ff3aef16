"""The simulated station as the placement policy sees it (`station_view`): each GPU's tenants with
the memory the engine would reserve for them by now, its recent SM activity, its MIG slices
(busy, or being re-carved), and the queue's demands.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import msgspec

from gpudesk.policy.demand import PEAK_SETTLED_S, reservation
from gpudesk.policy.policy import GpuState, StationView, Tenant
from gpudesk.policy.remaining import Remaining, estimate
from gpudesk.policy.sim_order import family_of

if TYPE_CHECKING:
    from gpudesk.policy.sim_records import SimRun
    from gpudesk.policy.simulator import Simulation


def learn_hint_ratios(sim: Simulation) -> None:
    """Each running job placed on its hint whose memory has settled tells its family how far
    that hint was off (hint_correction), as the engine's family history learns it: on every
    event, queue or not (the engine reads every running job's peak on each telemetry tick)."""
    for run in sim.running:
        if run.demand.source == "hint" and run.peak_at + PEAK_SETTLED_S <= sim.now:
            sim.hint_ratios.learn(family_of(run), run.demand.memory_mib, run.job.peak_memory_mib)


def _remaining(sim: Simulation, run: SimRun) -> Remaining:
    """A running job's remaining time as the engine would know it (policy/remaining.py): from
    its progress lines where it prints them (its remaining work at its current rate: the
    engine measures that rate over its last minute of progress, here it is exact), else from
    its family's finished runs, else unknown."""
    typical, elapsed = sim.family_times.expected_s(run), sim.now - run.started_at
    if run.job.progress and run.segment is not None and run.segment.rate > 0.0:
        left = max(0.0, run.job.steady_s - run.work_done) / run.segment.rate
        return Remaining(left, "progress", typical_s=typical, elapsed_s=elapsed)
    return estimate(None, typical, elapsed)


def station_view(sim: Simulation) -> StationView:
    """The simulated station as the policy sees it, as the engine's `StationView` would show it."""
    states = []
    for gpu in range(sim.gpu_count):
        tenants = []
        measured = 0.0
        on_gpu = sim.tenants_on(gpu)
        for t in on_gpu:
            elapsed = max(0.0, sim.now - max(t.started_at, t.blocked_until))
            ramp = max(1e-6, t.peak_at - max(t.started_at, t.blocked_until))
            used = t.job.peak_memory_mib * min(1.0, elapsed / ramp)
            measured += used
            # Its memory stops growing at its peak; the engine's rule takes it from there. Until
            # then it holds what its placement assumed, as in the engine (live_attempt): for a
            # job whose hint was taken as unknown, the room it was given.
            placed = t.placed.demand
            reserved = reservation(
                float(placed["memory_mib"]) if placed else t.demand.memory_mib,
                used,
                sim.now - t.peak_at if t.peak_at <= sim.now else 0.0,
            )
            remaining = _remaining(sim, t)
            tenants.append(
                Tenant(
                    t.job.id,
                    t.placed.mode,
                    reserved,
                    t.job.told_sm_pct,  # its hint, as the engine has it
                    t.placed.mig_slice,
                    membw_pct=t.job.membw_pct,
                    thread_pct=t.placed.mps_thread_pct,
                    remaining_s=remaining.seconds,
                    measured_remaining_s=remaining.measured_s,
                )
            )
        history = sim.sm_history[gpu]
        window = statistics.fmean(v for _, v in history) if history else 0.0
        if gpu in sim.fixed:
            mig_enabled, dynamic = True, False
            busy_keys = {t.placed.mig_slice for t in on_gpu}
            # a layout being changed (--mig-repartition) is unusable until it is made
            unusable = any(t.placed.mode == "exclusive" for t in on_gpu) or (
                sim.reconfig_until.get(gpu, 0.0) > sim.now
            )
            slices = tuple(
                msgspec.structs.replace(s, busy=unusable or s.key in busy_keys)
                for s in sim.slices[gpu]
            )
        elif sim.policy_name == "mig":
            mig_enabled, dynamic = True, True
            slices = tuple(msgspec.structs.replace(s, busy=True) for s in sim.slices[gpu])
        else:
            mig_enabled, dynamic, slices = False, False, ()
        states.append(
            GpuState(
                index=gpu,
                uuid=f"GPU-SIM-{gpu}",
                memory_total_mib=sim.model.memory_total_mib,
                model=sim.model.name,
                memory_used_mib=measured,
                sm_activity_pct=window,
                tenants=tuple(tenants),
                mps_usable=sim.mps,
                mig_enabled=mig_enabled,
                mig_slices=slices,
                mig_dynamic=dynamic,
                placed_s_ago=sim.now - sim.placed_at[gpu] if gpu in sim.placed_at else None,
            )
        )
    return StationView(
        config=sim.config,
        cores=64,
        backend=sim.station,
        simulated=True,
        gpu_states=tuple(states),
        demands=sim.queue.demands(),
        overtaken=sim.overtaken,
        interference=sim.interference,
        run_time_of=lambda job: sim.family_times.expected_s(sim.run_of[job.id]),
    )
