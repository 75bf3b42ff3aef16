"""The jobs a queue's dependencies name (`after`, `after_any`, `after_notok`), read from the store
in a few queries for the verdicts (gpudesk.policy.dependencies): the scheduler reads them before
every placement pass, the Slurm backend before it submits, `edit` for a dependency cycle."""

from __future__ import annotations

from collections.abc import Iterable

from gpudesk.core.records import JobRecord
from gpudesk.engine.store.database import Store

_IDS_PER_QUERY = 500  # well under SQLite's limit on a statement's parameters


def dependencies_of(store: Store, queued: list[JobRecord]) -> dict[int, JobRecord]:
    """Every job the queued jobs run after, read in a few queries (not one per job and pass:
    a sweep of thousands after one pre-pass is asked about on every placement pass)."""
    return jobs_by_id(store, {job_id for job in queued for job_id in job.spec.dependencies})


def jobs_by_id(store: Store, ids: Iterable[int]) -> dict[int, JobRecord]:
    """These jobs (those that exist), by id, in a few queries."""
    wanted = sorted(set(ids))
    found: dict[int, JobRecord] = {}
    for start in range(0, len(wanted), _IDS_PER_QUERY):
        for job in store.jobs(ids=wanted[start : start + _IDS_PER_QUERY]):
            found[job.id] = job
    return found
