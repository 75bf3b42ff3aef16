"""Job dependencies (`after`): a queued job starts only once every job it names has succeeded
(pueue's `add --after`, Slurm's `--dependency=afterok` with `--kill-on-invalid-dep=yes`). One
of them failing, being cancelled or no longer existing means it can never start: it is
cancelled, with the reason, and so are the jobs that wait for it in turn.

The scheduler asks before every placement pass; the verdict is read from the store, so a
restarted engine needs nothing more than its queue."""

from __future__ import annotations

from dataclasses import dataclass

from gpudesk.engine.jobs import JobState
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.records import JobRecord
from gpudesk.engine.store.schema import UnknownJob


@dataclass(frozen=True)
class Verdict:
    """What a queued job's dependencies say: `waiting_on`, the first that has not ended yet;
    `never`, why the job can never start ("" while it still can)."""

    waiting_on: JobRecord | None = None
    never: str = ""


def verdict(store: Store, after: tuple[int, ...]) -> Verdict:
    waiting_on: JobRecord | None = None
    for job_id in after:
        try:
            dependency = store.job(job_id)
        except UnknownJob:
            return Verdict(never=f"job {job_id}, which it runs after, no longer exists")
        if dependency.state is JobState.SUCCEEDED:
            continue
        if dependency.state in (JobState.FAILED, JobState.CANCELLED):
            return Verdict(
                never=f"job {dependency.id} ({dependency.name}), which it runs after, "
                f"{dependency.state.value}; this job never ran"
            )
        if waiting_on is None:
            waiting_on = dependency
    return Verdict(waiting_on=waiting_on)


def waiting_text(dependency: JobRecord) -> str:
    return (
        f"waiting: runs after job {dependency.id} ({dependency.name}), which is "
        f"{dependency.state.value}{' (held)' if dependency.held else ''}"
    )
