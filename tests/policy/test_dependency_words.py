"""A dependency that can never be met cancels the job (policy/dependencies.py, job_gates.py),
its reason in two tenses: while the job is still queued, its cancel left to a later turn of the
engine's loop (`gpudesk show`: "being cancelled: ..."), it "will not run"; once cancelled, it
"never ran". Each way a dependency can never be met says both (the afterok one end to end:
tests/engine/test_dependencies_slices.py)."""

from __future__ import annotations

import msgspec
import pytest

from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.policy.dependencies import pending_cancel, settle


def record(job_id: int, state: JobState = JobState.QUEUED, **spec: object) -> JobRecord:
    job = JobRecord.queued(job_id, JobSpec(name=f"j{job_id}", command=("true",), **spec), 0.0)  # type: ignore[arg-type]
    return msgspec.structs.replace(job, state=state)


@pytest.mark.parametrize(
    ("ended", "after", "why", "rest"),
    [
        (JobState.FAILED, "after", "which it runs after, failed", ""),
        (JobState.CANCELLED, "after", "which it runs after, cancelled", ""),
        (
            JobState.SUCCEEDED,
            "after_notok",
            "which it runs after only if it did not succeed (afternotok), succeeded",
            " (DependencyNeverSatisfied)",
        ),
    ],
)
def test_a_dependency_never_met_says_will_not_run_while_queued_and_never_ran_once_cancelled(
    ended: JobState, after: str, why: str, rest: str
) -> None:
    job = record(2, **{after: (1,)})
    (never,) = settle([job], {1: record(1, ended)}).never
    assert never == (2, f"job 1 (j1), {why}; this job never ran{rest}")  # the cancelled job's
    assert pending_cancel(never[1]) == f"being cancelled: job 1 (j1), {why}; it will not run{rest}"


def test_a_dependency_gone_says_so_in_both_tenses() -> None:
    (never,) = settle([record(2, after_notok=(1,))], {}).never
    gone = "job 1, which it runs after, no longer exists"
    assert never == (2, gone)
    assert pending_cancel(never[1]) == f"being cancelled: {gone}"
