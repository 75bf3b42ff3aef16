"""The user's job control: cancel, hold, release, priority and requeue, each job with an outcome
that says what it did (or why it did nothing)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from gpudesk.core.field_checks import reads_as_job_id
from gpudesk.core.job_changes import JobOutcome
from gpudesk.core.jobs import PRIORITY_RANGE, TERMINAL_STATES, JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.engine.backends.base import Backend, JobsView
from gpudesk.engine.backends.local import LocalBackend
from gpudesk.engine.backends.slurm import SlurmBackend
from gpudesk.engine.backends.slurm_jobs import SlurmJobs
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import UnknownJob
from gpudesk.policy import job_changes

__all__ = ["Backends", "JobControl", "JobOutcome"]


class Backends(msgspec.Struct, frozen=True):
    """Which backend a job is the business of, picked once per job from its spec: a job that
    names a cluster is Slurm's, any other the station's. The one place that tells them apart."""

    local: LocalBackend
    slurm: Backend

    @classmethod
    def of_engine(cls, local: LocalBackend, slurm: SlurmBackend) -> Backends:
        return cls(local, SlurmJobs(slurm, local))

    def for_spec(self, spec: JobSpec) -> Backend:
        return self.local if spec.cluster is None else self.slurm

    def for_job(self, job: JobRecord) -> Backend:
        return self.for_spec(job.spec)

    def for_specs(self, specs: Sequence[JobSpec]) -> Backend:
        """A request's backend: its jobs all go to one place (the submit checks), the first's;
        the station's for none."""
        return self.for_spec(specs[0]) if specs else self.local

    def views(self, jobs: Sequence[JobRecord]) -> Callable[[JobRecord], JobsView]:
        """Each backend's view of its jobs of a page, each read once; the view of a job."""
        mine: dict[int, list[JobRecord]] = {}
        backends: dict[int, Backend] = {}
        for job in jobs:
            backend = self.for_job(job)
            backends.setdefault(id(backend), backend)
            mine.setdefault(id(backend), []).append(job)
        views = {key: backends[key].view(page) for key, page in mine.items()}
        return lambda job: views[id(self.for_job(job))]


class JobControl:
    """Finds jobs and controls them: what every job gets here (its priority, "already
    finished"), the rest by its backend (engine/backends/), picked once per job."""

    def __init__(self, store: Store, backends: Backends) -> None:
        self.store = store
        self.backends = backends

    def find(self, ref: int | str | tuple[int, int], uid: int) -> JobRecord:
        """A job by id (int or digits), array task (`144_2` as (144, 2)) or name: user `uid`'s
        newest of it, else anyone's (as Slurm's `scancel --name`: no newer namesake shadows)."""
        if isinstance(ref, tuple):
            job_id = self.store.array_tasks([ref[0]]).get(ref[0], {}).get(ref[1])
            if job_id is None:
                raise UnknownJob(f"no job {ref[0]}_{ref[1]} (task {ref[1]} of array {ref[0]})")
            return self.store.job(job_id)
        if isinstance(ref, int) or reads_as_job_id(ref):  # "12", not "²"
            return self.store.job(int(ref))
        jobs = self.store.jobs_named(ref)
        if not jobs:
            raise UnknownJob(f"no job with id or name {ref!r}")
        return ([job for job in jobs if job.owner.uid == uid] or jobs)[-1]

    def cancel(self, job: JobRecord, grace: float) -> JobOutcome:
        if job.state in TERMINAL_STATES:
            return JobOutcome(f"already {job.state.value}")
        return self.backends.for_job(job).cancel(job, grace)

    def hold(self, job: JobRecord) -> JobOutcome:
        return self.backends.for_job(job).hold(job)

    def release(self, job: JobRecord) -> JobOutcome:
        return self.backends.for_job(job).release(job)

    def requeue(self, job: JobRecord) -> JobOutcome:
        return self.backends.for_job(job).requeue(job)

    def suspend(self, job: JobRecord, by: str) -> JobOutcome:
        return self.backends.for_job(job).suspend(job, by)

    def resume(self, job: JobRecord, by: str) -> JobOutcome:
        return self.backends.for_job(job).resume(job, by)

    def signal(self, job: JobRecord, name: str, by: str) -> JobOutcome:
        if job.state in TERMINAL_STATES:
            return JobOutcome(f"already {job.state.value}: {name} not sent", ok=False)
        return self.backends.for_job(job).signal(job, name, by)

    def set_priorities(
        self, jobs: Sequence[JobRecord], wanted: Callable[[JobRecord], int | JobOutcome]
    ) -> dict[int, JobOutcome]:
        """Each job given the priority `wanted` says (or its refusal), on any backend
        (policy/job_changes.py): the changes stored in one transaction."""
        outcomes, planned = job_changes.prioritized(jobs, wanted)
        return self.backends.local.change_all(planned, outcomes)

    @staticmethod
    def moved_priority(job: JobRecord, delta: int) -> int:
        """The priority `delta` makes: raised (+) or lowered (-), kept in the range."""
        low, high = PRIORITY_RANGE
        return min(high, max(low, job.spec.priority + delta))
