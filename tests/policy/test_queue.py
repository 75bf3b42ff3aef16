"""The engine's ordered queue."""

from __future__ import annotations

from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.policy.queue import JobQueue


def job(job_id: int, priority: int = 0) -> JobRecord:
    return JobRecord(
        id=job_id,
        spec=JobSpec(name=f"j{job_id}", command=("true",), priority=priority),
        state=JobState.QUEUED,
        submitted_at=0.0,
        started_at=None,
        ended_at=None,
        attempts=0,
        exit_code=None,
        reason=None,
        cancel_requested=False,
    )


def test_priority_first_then_arrival() -> None:
    queue = JobQueue([job(3), job(1), job(4, priority=2), job(2, priority=2), job(5, -1)])
    assert [j.id for j in queue.ordered()] == [2, 4, 1, 3, 5]


def test_remove_and_re_add() -> None:
    queue = JobQueue([job(1), job(2), job(3)])
    assert queue.remove(2) is not None
    assert queue.remove(2) is None
    assert 2 not in queue and len(queue) == 2
    queue.add(job(2, priority=9))
    queue.add(job(2, priority=9))  # adding twice keeps one entry
    assert [j.id for j in queue.ordered()] == [2, 1, 3]
