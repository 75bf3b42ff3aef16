"""The engine's ordered queue."""

from __future__ import annotations

import msgspec

from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.policy.queue import JobQueue
from gpudesk.policy.user_limits import queued_count


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


def test_each_owners_count_follows_adds_removes_and_replace() -> None:
    """`[station] max_queued_per_user` is checked per job of a request: a requeue of 1,000
    jobs scanned the whole queue 1,000 times (0.5 s of the engine's loop with 3,000 queued);
    the queue keeps each owner's count as it changes."""
    alice, bob = Identity.of(2001, 2001, [2001]), Identity.of(2002, 2002, [2002])

    def owned(job_id: int, who: Identity, priority: int = 0) -> JobRecord:
        return msgspec.structs.replace(job(job_id, priority), owner=who)

    queue = JobQueue([owned(1, alice), owned(2, alice), owned(3, bob)])
    assert (queued_count(queue, 2001), queued_count(queue, 2002), queued_count(queue, 7)) == (
        2,
        1,
        0,
    )
    queue.add(owned(2, alice, priority=5))  # re-added (a new priority): still one job
    queue.remove(3)
    queue.remove(3)
    assert (queued_count(queue, 2001), queued_count(queue, 2002)) == (2, 0)
    queue.replace([owned(4, bob)])
    assert (queued_count(queue, 2001), queued_count(queue, 2002)) == (0, 1)
    for uid in (2001, 2002):
        assert queued_count(queue, uid) == sum(1 for j in queue.ordered() if j.owner.uid == uid)
