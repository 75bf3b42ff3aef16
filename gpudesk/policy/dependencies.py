"""Job dependencies (`after`): a queued job starts only once every job it names has succeeded
(pueue's `add --after`, Slurm's `--dependency=afterok` with `--kill-on-invalid-dep=yes`). One
of them failing, being cancelled or no longer existing means it can never start: it is
cancelled, with the reason, and so are the jobs that wait for it in turn.

Beside them (issue 41 item 5), Slurm's `afterany` (`after_any`: once each has ended, however)
and `afternotok` (`after_notok`: once each has ended without succeeding: failed, cancelled,
timed out). An `after_notok` job whose dependency succeeded can never start, and is cancelled
the same way, its reason saying so (Slurm's DependencyNeverSatisfied).

Pure rules of the jobs' records: the engine's scheduler asks before every placement pass, with
the jobs a queue runs after read from the store (gpudesk.engine.dependencies), so a restarted
engine needs nothing more than its queue; its Slurm backend asks of the jobs it submits."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import msgspec

from gpudesk.core.jobs import JobState
from gpudesk.core.records import JobRecord
from gpudesk.policy import job_gates
from gpudesk.policy.job_gates import NEVER_RAN

# How a dependency's cancel reason (its NEVER_RAN, once the job is cancelled) reads while its
# cancel waits for a later turn of the loop (`gpudesk show` of a job still queued).
WILL_NOT_RUN = "it will not run"


def pending_cancel(reason: str) -> str:
    """`reason` (a cancel reason of this module's or job_gates') as read before the cancel."""
    return "being cancelled: " + reason.replace(NEVER_RAN, WILL_NOT_RUN)


class Verdict(msgspec.Struct, frozen=True):
    """What a queued job's dependencies say: `waiting_on`, the first that has not ended yet;
    `never`, why the job can never start ("" while it still can)."""

    waiting_on: JobRecord | None = None
    never: str = ""


def verdict(after: tuple[int, ...], known: Mapping[int, JobRecord]) -> Verdict:
    """`after`'s verdict from `known` (dependencies_of): a job missing there no longer exists."""
    waiting_on: JobRecord | None = None
    for job_id in after:
        dependency = known.get(job_id)
        if dependency is None:
            return Verdict(never=f"job {job_id}, which it runs after, no longer exists")
        if dependency.state is JobState.SUCCEEDED:
            continue
        if dependency.state in (JobState.FAILED, JobState.CANCELLED):
            return Verdict(
                never=f"job {dependency.id} ({dependency.name}), which it runs after, "
                f"{dependency.state.value}; {NEVER_RAN}"
            )
        if waiting_on is None:
            waiting_on = dependency
    return Verdict(waiting_on=waiting_on)


def spec_verdict(job: JobRecord, known: Mapping[int, JobRecord]) -> Verdict:
    """Every dependency of `job`'s weighed: after (here), after_any and after_notok
    (policy/job_gates.py): the first that can never be met, else the first not ended yet."""
    found = verdict(job.spec.after, known)
    if found.never:
        return found
    waiting_on, never = job_gates.other_dependencies(job.spec, known)
    return Verdict(found.waiting_on or waiting_on, never)


class Settling(msgspec.Struct, frozen=True):
    """One round of verdicts over the queued jobs that run after others: `never`, those that
    can never start, each (id, why), in queue order; `blocked`, those still waiting (id -> the
    first job they wait for that has not ended)."""

    never: list[tuple[int, str]]
    blocked: dict[int, JobRecord]

    def cancels(self, left: Collection[int]) -> list[tuple[int, str]]:
        """The jobs this round cancels. `left` is the rest of a round cut short (its first jobs
        cancelled on an earlier turn of the loop): those of them that still can never start go
        first, alone, as the uncut round would have cancelled them before the jobs that
        cancelling them dooms in turn (the next round's). Else all of `never`."""
        rest = [(job_id, why) for job_id, why in self.never if job_id in left]
        return rest or self.never


def settle(waiting: Iterable[JobRecord], known: Mapping[int, JobRecord]) -> Settling:
    """The verdicts of `waiting` (queued jobs that run after others, in queue order) from
    `known` (dependencies_of)."""
    never: list[tuple[int, str]] = []
    blocked: dict[int, JobRecord] = {}
    for job in waiting:
        found = spec_verdict(job, known)
        if found.never:
            never.append((job.id, found.never))
        elif found.waiting_on is not None:
            blocked[job.id] = found.waiting_on
    return Settling(never, blocked)


def waiting_text(dependency: JobRecord) -> str:
    return (
        f"waiting: runs after job {dependency.id} ({dependency.name}), which is "
        f"{dependency.state.value}{' (held)' if dependency.held else ''}"
    )
