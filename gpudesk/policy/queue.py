"""The engine's in-memory view of queued jobs, kept in placement order (higher priority first,
then first come) so the policy gets an ordered queue without a sort on every decision.

A held job stays in the queue at its place (so releasing it puts it back where it was) but is
not placeable; so does a job waiting for the jobs it runs after (`blocked`), one that can
never start, its cancel left to a later turn of the loop (`doomed`), and one a job-control
request in flight named and has not acted on yet (`claims`). One that placement fails on a
later turn (`failing`) stays placeable, but waits for nothing. A changed job (held,
released, a new priority) is re-added: `add` replaces."""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Iterable, Iterator

from gpudesk.core.records import JobRecord
from gpudesk.policy.dependencies import pending_cancel
from gpudesk.policy.job_claims import JobClaims


def order_key(job: JobRecord) -> tuple[int, int]:
    return (-job.spec.priority, job.id)


class JobQueue:
    def __init__(self, jobs: Iterable[JobRecord] = ()) -> None:
        self._jobs: dict[int, JobRecord] = {}
        self._keys: list[tuple[int, int]] = []
        # owner uid -> how many of the queue's jobs are hers: `[station] max_queued_per_user`
        # is checked per job of a request (a requeue of 1,000), too often for a scan each
        self._owned: Counter[int] = Counter()
        # queued job id -> the job it waits for (`after`), as the scheduler last found it
        self.blocked: dict[int, JobRecord] = {}
        # queued job id -> why it can never start (a job it runs after failed, say): the
        # scheduler cancels such jobs a slice a turn, and these are for the next turns
        self.doomed: dict[int, str] = {}
        # queued job id -> why placement fails it: a pass's failures past its slice, failed by
        # the next turns' passes. The policy still sees them (it fails them again, or places
        # them if the station changed since), but they wait for nothing: no preemption, no
        # place at the head of the queue, no "waiting for a GPU" is for them
        self.failing: dict[int, str] = {}
        self.claims = JobClaims()  # the jobs requests in flight named (policy/job_claims.py)
        for job in jobs:
            self.add(job)

    def replace(self, jobs: Iterable[JobRecord]) -> None:
        """The queue becomes exactly `jobs` (the store's queued jobs, after a restart)."""
        self._jobs.clear()
        self._keys.clear()
        self._owned.clear()
        for job in jobs:
            self.add(job)

    def add(self, job: JobRecord) -> None:
        if job.spec.cluster is not None:
            return  # Slurm places a job that names a cluster; the station never runs it
        if job.id in self._jobs:
            self.remove(job.id)
        self._jobs[job.id] = job
        bisect.insort(self._keys, order_key(job))
        self._owned[job.owner.uid] += 1

    def remove(self, job_id: int) -> JobRecord | None:
        job = self._jobs.pop(job_id, None)
        self.failing.pop(job_id, None)
        if job is not None:
            key = order_key(job)
            index = bisect.bisect_left(self._keys, key)
            del self._keys[index]
            self._owned[job.owner.uid] -= 1
        return job

    def owned_by(self, uid: int) -> int:
        """How many of the queue's jobs (held ones included) `uid` owns."""
        return self._owned[uid]

    def get(self, job_id: int) -> JobRecord | None:
        return self._jobs.get(job_id)

    def ordered(self) -> list[JobRecord]:
        """Every queued job, held ones included, in placement order."""
        return [self._jobs[job_id] for _, job_id in self._keys]

    def ordered_iter(self) -> Iterator[JobRecord]:
        """ordered(), one job at a time: for a scan that may stop at the first few."""
        return (self._jobs[job_id] for _, job_id in self._keys)

    def placeable(self) -> list[JobRecord]:
        """The queued jobs a policy may start (not held, not waiting for another job or doomed
        by one, not before their begin time, not named by a request in flight), in placement
        order."""
        now = time.time()
        return [
            job
            for job in self.ordered()
            if not job.held
            and job.id not in self.blocked
            and job.id not in self.doomed
            and job.id not in self.claims
            and (job.spec.begin_at is None or job.spec.begin_at <= now)
        ]

    def ending(self, job_id: int) -> str | None:
        """Why a queued job that can never start will end, said while that waits for a later
        turn (`doomed`: a dependency's cancel; `failing`: placement's failure); None: it may."""
        if job_id in self.doomed:
            return pending_cancel(self.doomed[job_id])
        if job_id in self.failing:
            return f"being failed: {self.failing[job_id]}"
        return None

    def waiting(self, jobs: list[JobRecord]) -> list[JobRecord]:
        """`jobs` but those placement fails on a later turn (`failing`): they can never start,
        so they may not preempt a running job, nor be waited behind (wait codes, `show`)."""
        return [job for job in jobs if job.id not in self.failing] if self.failing else jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs
