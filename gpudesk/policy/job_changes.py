"""The rules of the user's job control: what holding, releasing or requeueing each of a
request's station jobs, or changing any job's priority, does in the state it is in. For each
job, the change the store writes (gpudesk.core.job_changes: with its event's message and the
outcome once stored) or the outcome that says why nothing changes. The engine stores a
request's changes in one transaction (engine/backends/local/backend.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from gpudesk.core.job_changes import (
    JobOutcome,
    Planned,
    Requeue,
    SetHeld,
    SetPriority,
    state_phrase,
)
from gpudesk.core.jobs import PRIORITY_RANGE, JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.requests import InParts
from gpudesk.policy import user_limits

# Each job's outcome where nothing changes, and the changes planned for the others.
Plan = tuple[dict[int, JobOutcome], list[Planned]]


def held(jobs: Sequence[JobRecord], hold: bool, in_parts: InParts | None = None) -> Plan:
    """Hold (`hold`) or release queued jobs: a job in any other state is refused, as release
    refuses it as hold does; a release of a job free to start is what it asks. `in_parts`: the
    release of a submission sent in parts, by its client (core/job_changes.hold_event)."""
    outcomes: dict[int, JobOutcome] = {}
    planned: list[Planned] = []
    done = "held" if hold else "released"
    for job in jobs:
        if job.state is not JobState.QUEUED:
            only = "a queued job can be held" if hold else "a held job can be released"
            outcomes[job.id] = JobOutcome(f"{state_phrase(job)}: only {only}", ok=False)
        elif job.held == hold:
            outcomes[job.id] = JobOutcome("already held" if hold else "not held")
        else:
            change = SetHeld(job, hold, in_parts)
            planned.append((change, change.event, done))
    return outcomes, planned


def requeued(jobs: Sequence[JobRecord], limit: int | None, queued: Callable[[int], int]) -> Plan:
    """Requeue finished jobs, each unless that would leave its owner more queued jobs than
    `[station] max_queued_per_user` (`limit`; whoever asks: the limit is the owner's), counting
    those requeued before it (`queued(uid)`: the owner's jobs queued now)."""
    outcomes: dict[int, JobOutcome] = {}
    planned: list[Planned] = []
    requeues: Counter[int] = Counter()  # owner uid -> jobs requeued here, not yet queued
    for job in jobs:
        uid = job.owner.uid
        refusal = limit is not None and user_limits.queued_refusal(
            limit,
            job.user,
            queued(uid) + requeues[uid],
            1,
            "requeue",
            "It was not requeued",  # the outcome is said after the job's id
        )
        if job.state is JobState.QUEUED:
            outcomes[job.id] = JobOutcome("already queued" + (" (held)" if job.held else ""))
        elif job.state is JobState.RUNNING:
            refused = f"{state_phrase(job)}: only a finished job can be requeued"
            outcomes[job.id] = JobOutcome(refused, ok=False)
        elif refusal:
            outcomes[job.id] = JobOutcome(refusal, ok=False)
        else:
            requeues[uid] += 1
            said = (
                f"requeued by user (was {job.state.value}); attempt "
                f"{job.attempts + 1} next, {job.spec.max_attempts} allowed"
            )
            planned.append((Requeue(job), said, "requeued"))
    return outcomes, planned


def prioritized(jobs: Sequence[JobRecord], wanted: Callable[[JobRecord], int | JobOutcome]) -> Plan:
    """Each job given the priority `wanted` says (or its refusal), in any state: a queued job
    moves in the queue; a running or finished one keeps it for a retry or a requeue, and its
    outcome says it changes nothing now."""
    outcomes: dict[int, JobOutcome] = {}
    planned: list[Planned] = []
    low, high = PRIORITY_RANGE
    for job in jobs:
        new, old = wanted(job), job.spec.priority
        if isinstance(new, JobOutcome):
            outcomes[job.id] = new
        elif new == old:
            limit = " (the highest)" if old == high else " (the lowest)" if old == low else ""
            outcomes[job.id] = JobOutcome(f"priority stays {old}{limit}")
        else:
            said = message = f"priority {old} -> {new}"
            if job.state is not JobState.QUEUED:
                later = "a retry" if job.state is JobState.RUNNING else "a requeue"
                said += (
                    f"; {state_phrase(job)}, so it changes nothing now "
                    f"(it orders the queue after {later})"
                )
            planned.append((SetPriority(job, new), f"{message} by user", said))
    return outcomes, planned
