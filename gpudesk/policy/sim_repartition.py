"""MIG repartitioning in the simulator (`--mig-repartition`, under `auto` and `mig`), by the
engine's own check (policy.mig_payoff.choose_layouts): which idle fixed-layout GPUs may get a new
layout now, and the layout each gets where the payoff says it pays and its replay of the queue
says it does not slow the queue. A GPU whose layout changes is unusable for `RECONFIG_S`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudesk.policy.mig_payoff import RECONFIG_S, choose_layouts
from gpudesk.policy.mig_planner import (
    GpuMigState,
    PlansOnly,
    QueuedDemand,
    any_whole_gpu,
    mig_candidate,
)
from gpudesk.policy.mig_planner import simulated_profiles as planner_profiles
from gpudesk.policy.mig_queue_time import layout_drain
from gpudesk.policy.sim_station import new_slice

if TYPE_CHECKING:
    from gpudesk.policy.simulator import Simulation


def relayable(sim: Simulation) -> set[int]:
    """The idle fixed-layout GPUs that may get a new layout now (`--mig-repartition`,
    under `auto` and `mig`, as in the engine)."""
    if not sim.config.repartitions_on_its_own:
        return set()
    return {
        gpu
        for gpu in sim.fixed
        if not sim.tenants_on(gpu) and sim.reconfig_until.get(gpu, 0.0) <= sim.now
    }


def mig_queue(sim: Simulation) -> list[QueuedDemand]:
    """The queued jobs a MIG slice could take, listed as the engine's `mig_candidates` lists
    them (`mig_candidate`), each with its family's run time where the replay has measured one
    (the engine's `typical_run_s`)."""
    whole = any_whole_gpu(sim.view().gpu_states)
    candidates = (
        mig_candidate(r.record, r.demand, sim.family_times.expected_s(r), whole) for r in sim.queue
    )
    return [c for c in candidates if c is not None]


def repartition(sim: Simulation, gpus: set[int]) -> bool:
    """The engine's own check (policy.mig_payoff.choose_layouts) on these GPUs; a GPU whose
    layout changes is unusable for `RECONFIG_S`. True when one changed."""
    ready = sorted(gpus)
    queue = mig_queue(sim)
    if not queue:
        return False
    states = []
    for gpu in ready:
        profiles, placements = planner_profiles(sim.model, gpu)
        current = tuple(s.profile for s in sim.slices[gpu])
        states.append(
            GpuMigState(
                gpu,
                sim.model.name,
                "enabled",
                profiles,
                placements,
                current,
                has_gpu_instances=bool(current),
                has_compute_instances=bool(current),
            )
        )
    changed = False
    for choice in choose_layouts(
        states,
        queue,
        sim.interference.params,
        simulated=True,
        commands_from=PlansOnly(),  # the simulator shows no command lines
        # as the engine weighs it: no change that its replay says slows the queue (each job's
        # run time its family's where measured, else mig_queue_time's assumption); the replay
        # is the Simulation itself
        drain=layout_drain(type(sim), sim.interference.params),
    ):
        if choice.payoff.worth:
            gpu = choice.plan.gpu
            sim.slices[gpu] = [new_slice(sim, gpu, name) for name in choice.payoff.planned]
            sim.reconfig_until[gpu] = sim.now + RECONFIG_S
            sim.repartitions += 1
            changed = True
    return changed
