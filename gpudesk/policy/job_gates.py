"""What keeps a queued job from starting besides the GPUs and its dependencies (issue 41,
item 5): its begin time (`submit --begin`, sbatch's BeginTime) and its array's throttle
(`submit --array 0-9%2`, sbatch's JobArrayTaskLimit). Pure rules on the queue: the engine's
scheduler asks before each placement pass, and its loop wakes at the next begin time
(`next_begin`), never polling for it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.protocol import INVALID_ARGS, REFUSED, UNKNOWN_JOB

if TYPE_CHECKING:  # `gpudesk submit` asks submit_problem without importing the policy (~20 ms)
    from gpudesk.core.records import JobRecord
    from gpudesk.policy.policy import Decision

BEGIN_TIME = "BeginTime"
# How a dependency's cancel reason ends once the job is cancelled (here and in
# policy/dependencies.py, whose pending_cancel says it "will not run" while it is still queued)
NEVER_RAN = "this job never ran"
ARRAY_LIMIT = "JobArrayTaskLimit"


def array_key(job: JobRecord) -> int | None:
    """The id that names a job's array (its first job's); None for a job of no array."""
    if job.spec.array_task is None:
        return None
    return job.spec.array_job if job.spec.array_job is not None else job.id


def begins_later(job: JobRecord, now: float) -> bool:
    return job.spec.begin_at is not None and job.spec.begin_at > now


def next_begin(jobs: Iterable[JobRecord], now: float) -> float | None:
    """The earliest begin time still ahead among `jobs` (None: none is)."""
    ahead = [begin for job in jobs if (begin := job.spec.begin_at) is not None and begin > now]
    return min(ahead) if ahead else None


def begin_text(job: JobRecord, now: float) -> str:
    from gpudesk import render

    begin = job.spec.begin_at or now
    return (
        f"waiting: begins at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(begin))} "
        f"(in {render.duration(begin - now)}), as submitted (--begin)"
    )


def submit_problem(index: int, spec: JobSpec, named: Callable[[str], str] | None = None) -> str:
    """What is wrong with the `index`-th job of a submit request, in these fields ("": nothing):
    an array's first job named as -k is the k-th job of the request, before it (an id: an array
    continued from an earlier request, which the engine checks); a Slurm job takes none of them
    yet (sbatch would, as its own options). `named`: how a field is said (`gpudesk submit`
    says its option); by default as the request names it."""
    if spec.array_job is not None and spec.array_job < 0 and spec.array_job < -index:
        where = named("array_job") if named else f"jobs[{index}].array_job"
        return (
            f"{where}: an array's first job is named as -k, the k-th job of this request, "
            "before this one (or by its id, for an array its owner continues in a later request)"
        )
    if spec.cluster is not None and (
        spec.array_task is not None or spec.after_any or spec.after_notok or spec.notify is not None
    ):
        say = named or str
        return (
            ("" if named else f"jobs[{index}]: ")
            + f"{say('array_task')}, {say('after_any')}, {say('after_notok')} and "
            f"{say('notify')} are for the station's jobs; a job sent to Slurm cannot take them "
            f"yet (it takes {say('begin_at')} and {say('comment')})"
        )
    return ""


def one_place_problem(specs: Iterable[JobSpec]) -> str | None:
    """Why one request's jobs may not be submitted together: they do not all run on the station
    or all on one cluster (a run is followed, and refused, as a whole)."""
    if len({spec.cluster for spec in specs}) > 1:
        return (
            "one request's jobs go to one place: some of these name a Slurm cluster and "
            "some do not (or name another); submit them separately"
        )
    return None


def other_dependencies(
    spec: JobSpec, known: Mapping[int, JobRecord]
) -> tuple[JobRecord | None, str]:
    """Slurm's afterany (`after_any`: once each has ended, however) and afternotok
    (`after_notok`: once each has ended without succeeding) weighed against the jobs `known`
    (a job missing there no longer exists): the first not ended yet, and why the job can never
    start ("" while it can). An afternotok whose job succeeded can never be met (Slurm's
    DependencyNeverSatisfied): the engine cancels the job as it does for a failed afterok."""
    waiting_on: JobRecord | None = None
    for job_id, must_fail in (
        *((i, False) for i in spec.after_any),
        *((i, True) for i in spec.after_notok),
    ):
        dependency = known.get(job_id)
        if dependency is None:
            return None, f"job {job_id}, which it runs after, no longer exists"
        if not dependency.state.terminal:
            waiting_on = waiting_on or dependency
        elif must_fail and dependency.state is JobState.SUCCEEDED:
            return None, (
                f"job {dependency.id} ({dependency.name}), which it runs after only if it did "
                f"not succeed (afternotok), succeeded; {NEVER_RAN} (DependencyNeverSatisfied)"
            )
    return waiting_on, ""


class ArrayThrottle:
    """How many of each throttled array's jobs run now. `running` is asked for the running
    jobs only when a queued job belongs to a throttled array (otherwise nothing is read)."""

    def __init__(
        self, queued: Iterable[JobRecord], running: Callable[[], Iterable[JobRecord]]
    ) -> None:
        self.limits = {
            key: job.spec.array_limit
            for job in queued
            if job.spec.array_limit is not None and (key := array_key(job)) is not None
        }
        self.running: dict[int, int] = {}
        if not self.limits:
            return
        for job in running():
            key = array_key(job)
            if key in self.limits:
                self.running[key] = self.running.get(key, 0) + 1

    def at_limit(self, job: JobRecord) -> bool:
        key = array_key(job)
        limit = self.limits.get(key) if key is not None else None
        return limit is not None and self.running.get(key or 0, 0) >= limit

    def text(self, job: JobRecord) -> str:
        key = array_key(job)
        return (
            f"waiting: {self.running.get(key or 0, 0)} of its array (job {key}) run, and the "
            f"array runs at most {job.spec.array_limit} at once (--array …%{job.spec.array_limit})"
        )

    def trim(self, decision: Decision, job_of: dict[int, JobRecord]) -> Decision:
        """The decision without the placements that would run more of an array than its
        throttle: a pass may place several of one array at once."""
        if not self.limits:
            return decision
        starting = dict(self.running)

        def keep(job_id: int) -> bool:
            job = job_of.get(job_id)
            key = array_key(job) if job is not None else None
            if job is None or key is None or key not in self.limits:
                return True
            if starting.get(key, 0) >= self.limits[key]:
                return False
            starting[key] = starting.get(key, 0) + 1
            return True

        kept = [p for p in decision.placements if keep(p.job_id)]
        if len(kept) == len(decision.placements):
            return decision
        from gpudesk.policy.policy import Decision  # the engine's, imported by then (above)

        return Decision(kept, decision.rejections, decision.overtaken)


def continued_array_refusal(
    index: int, spec: JobSpec, head: JobRecord | None, caller_uid: int
) -> tuple[str, str] | None:
    """Why the `index`-th job of a submit request may not continue the array whose first job
    (`head`, None: no such job) it names by id, as a submission too large for one request
    continues an array in its later parts (gpudesk.api.submit_parts): (the protocol's code, the
    message); None where it may. Only the array's owner continues it, with its task limit."""
    where = f"jobs[{index}].array_job"
    if head is None:
        return UNKNOWN_JOB, f"{where}: there is no job {spec.array_job} whose array to continue"
    if head.owner.uid != caller_uid:
        return (
            REFUSED,
            f"{where}: job {head.id} is another user's; an array is continued only by its owner",
        )
    if head.spec.array_task is None or head.spec.array_job is not None:
        return INVALID_ARGS, f"{where}: job {head.id} is not the first job of an array"
    if head.spec.array_limit != spec.array_limit:
        return (
            INVALID_ARGS,
            f"{where}: job {head.id}'s array runs {_limit(head.spec.array_limit)}, this task "
            f"{_limit(spec.array_limit)}: an array has one limit",
        )
    return None


def _limit(array_limit: int | None) -> str:
    return "with no limit" if array_limit is None else f"at most {array_limit} at once"
