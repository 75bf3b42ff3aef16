"""Preemption in the simulator, by the engine's own rule (gpudesk.policy.preemption): after each
scheduling pass a running preemptible trace job may be asked to give way to a waiting one. It
then saves its checkpoint (`checkpoint_s` of the trace: its GPU held, no progress), leaves,
goes back to the queue with its work kept, and when placed again spends `checkpoint_s` more
restoring before it progresses (the engine's assumption: resuming costs what saving did).

What the rule is told, as the engine would know it: each victim's priority, how long its
attempt has run, its remaining time from its progress (remaining work at its current rate:
a job that cooperates with preemption is taken to print progress lines), and its grace and
restart cost, both `checkpoint_s` (a trace states what saving takes, not a grace with slack).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudesk.policy import preemption
from gpudesk.policy.sim_rates import true_rates
from gpudesk.policy.sim_records import SimRun

if TYPE_CHECKING:
    from gpudesk.policy.simulator import Simulation


def queue_key(run: SimRun) -> tuple[int, int]:
    """The queue's order, as the engine's: the higher priority first, then the earlier."""
    return (-run.record.spec.priority, run.record.id)


def leaving_times(sim: Simulation) -> list[float]:
    """Events the replay must stop at: when preempted jobs have saved their checkpoints, and,
    while jobs wait, when a running preemptible job stops being protected (the engine asks the
    rule again every few seconds; the replay asks it when its answer can change)."""
    times = [r.leaves_at for r in sim.running if r.leaves_at is not None and r.leaves_at >= sim.now]
    if sim.queue and sim.preempt:
        for run in sim.running:
            if run.job.preemptible and run.leaves_at is None:
                loss = 2 * run.job.checkpoint_s  # grace + restart, both checkpoint_s
                free = run.started_at + preemption.PROTECT_FACTOR * loss
                if free > sim.now:
                    times.append(free)
    return times


def leave_due(sim: Simulation) -> None:
    """Preempted jobs whose checkpoint is saved leave their GPUs and go back to the queue."""
    for run in list(sim.running):
        if run.leaves_at is None or run.leaves_at > sim.now + 1e-9:
            continue
        sim.stop(run, "preempted")
        run.leaves_at, run.preempted_for = None, None
        run.restore_s = run.job.checkpoint_s
        sim.preemptions += 1
        sim.queue.add(run)


def preempt_if_due(sim: Simulation) -> None:
    """Ask the rule; start the chosen job's checkpoint (its GPU held, no progress, until
    `leaves_at`)."""
    if not sim.queue:
        return
    candidates = [r for r in sim.running if r.job.preemptible]
    if not candidates:
        return
    rates = true_rates(sim)
    running = []
    for run in candidates:
        if run.leaves_at is not None:
            continue
        rate = rates.get(run.job.id, 0.0)
        left = (run.job.steady_s - run.work_done) / rate if rate > 0 else None
        running.append(
            preemption.Preemptible(
                run.job.id,
                run.record.spec.priority,
                sim.now - run.started_at,
                left,
                run.job.checkpoint_s,
                run.job.checkpoint_s,
            )
        )
    served = {r.preempted_for for r in candidates if r.preempted_for is not None}
    leaving = {r.job.id for r in candidates if r.leaves_at is not None}
    choice = preemption.choose(
        list(sim.queue.records),
        sim.view(),
        running,
        preemption.placed_by(sim.policy),
        skip=frozenset(served | leaving),
    )
    if choice is None:
        return
    victim = next(r for r in candidates if r.job.id == choice.victim)
    victim.preempted_for = choice.for_job
    victim.leaves_at = sim.now + victim.job.checkpoint_s
    victim.blocked_until = max(victim.blocked_until, victim.leaves_at)  # saving: no progress
