"""Learning in the simulator: what the engine would measure, fed to the policy's `Learner`. A
running job's run is cut into segments, stretches under one set of co-tenants (its mode, its MIG
slice, who shares its GPU, whether any of them is held up); when a segment of at least
`OBSERVE_AFTER_S` ends, its rate is an observation: on a MIG slice or among co-tenants, each
job's workload as the engine measures it, its steady SM share (the trace's `sm_pct`, never the
`hint_sm_pct` the policy is told: the engine reads each command's share alone after its first
progress line, gpudesk.engine.learning), completed by the current parameters, and so only once
every job of the stretch has a family that ran alone; alone on a whole GPU, its SM activity and
kernel-active time, which measure the kernel-active gap. Only steady
phases teach: a stretch in which the job or a tenant of its GPU is held (its start-up, a
checkpoint's restore or save) is none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpudesk.policy.interference import Observation, kernel_active, shared_mechanism
from gpudesk.policy.sim_order import family_of
from gpudesk.policy.sim_rates import job_workload
from gpudesk.policy.sim_records import Segment, SimRun
from gpudesk.policy.sim_station import slice_of, slice_shape

if TYPE_CHECKING:
    from gpudesk.policy.simulator import Simulation

# Assumption: the engine needs about a minute of a job's progress lines (or NVML samples) under
# one set of co-tenants to measure its rate there; shorter stretches teach it nothing.
OBSERVE_AFTER_S = 60.0


def _segment_key(sim: Simulation, run: SimRun) -> tuple[Any, ...]:
    placement = run.placed
    if placement.mode in ("mig", "exclusive") or len(placement.gpus) > 1:
        others: tuple[int, ...] = ()
    else:
        others = tuple(
            sorted(
                t.job.id
                for t in sim.tenants_on(placement.gpus[0])
                if t is not run and t.placed.mode not in ("mig", "exclusive")
            )
        )
    blocked = any(t.blocked_until > sim.now for t in sim.tenants_on(placement.gpus[0]))
    return (placement.mode, placement.mig_slice, others, blocked)


def track_segments(sim: Simulation, rates: dict[int, float]) -> None:
    for run in sim.running:
        key = _segment_key(sim, run)
        if run.segment is None or run.segment.key != key:
            close_segment(sim, run)
            run.segment = Segment(key, sim.now, rates[run.job.id])


def close_segment(sim: Simulation, run: SimRun) -> None:
    segment, run.segment = run.segment, None
    if segment is None or not sim.learn or sim.now - segment.since < OBSERVE_AFTER_S:
        return
    mode, _slice, others, blocked = segment.key
    if blocked or len(run.placed.gpus) > 1:
        return
    if mode != "mig" and not others:
        _observe_alone(sim, run)
        return
    if mode == "exclusive":
        return
    # The engine reads a stretch beside others or on a slice only with each job's steady SM
    # share measured alone first (gpudesk.engine.learning: per command; a trace job's command
    # is its family, sim_order.family_of): a job whose family never ran alone teaches nothing.
    if not {family_of(run), *(family_of(sim.run_of[o]) for o in others)} <= sim.ran_alone:
        sim.unmeasured_intervals += 1
        return
    # What the engine measures of each job (its steady SM share, not its hint), completed by
    # the current parameters.
    params = sim.learner.params(sim.model.name)
    job = job_workload(run, params)
    by_id = {r.job.id: r for r in sim.running}
    if mode == "mig":
        mig = slice_of(sim, run)
        if mig is None:
            return
        compute, memory = slice_shape(sim, mig)
        obs = Observation("mig", job, (), segment.rate, compute, memory)
    else:
        if any(o not in by_id for o in others):
            return
        # the mechanism the GPU's tenants share it by, as sim_rates runs them
        obs = Observation(
            shared_mechanism([mode, *(by_id[o].placed.mode for o in others)]),
            job,
            tuple(job_workload(by_id[o], params) for o in others),
            segment.rate,
        )
    sim.learner.observe(sim.model.name, obs, at=sim.now)
    sim.observations += 1


def _observe_alone(sim: Simulation, run: SimRun) -> None:
    """A job alone on a whole GPU: what the engine reads of it there (SM activity and
    kernel-active time, from the truth) measures the kernel-active gap."""
    sim.ran_alone.add(family_of(run))  # its steady SM share is now measured
    job = job_workload(run, sim.truth)
    if job.thread_cap is not None:
        return  # its cap, not its own kernels, set how long they run
    obs = Observation("exclusive", job, (), 1.0, kernel_active=kernel_active(sim.truth, job))
    if sim.learner.observe(sim.model.name, obs, at=sim.now) is not None:
        sim.observations += 1
