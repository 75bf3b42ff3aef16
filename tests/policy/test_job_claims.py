"""The jobs job-control requests in flight named (policy/job_claims.py): each request acts on a
job after the requests that named it before, and a queued job named is not placeable until the
request has acted on it."""

from __future__ import annotations

from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.policy.job_claims import JobClaims
from gpudesk.policy.queue import JobQueue


def test_requests_act_on_a_job_in_the_order_they_named_it() -> None:
    claims = JobClaims()
    first, second, third = claims.take([1, 2, 3]), claims.take([3, 4]), claims.take([4])
    assert claims.first(first, [1, 2, 3])
    assert not claims.first(second, [3, 4]) and not claims.first(third, [4])
    claims.drop(first, [1, 2])  # its first slice done: job 3 still to act on
    assert not claims.first(second, [3, 4]) and 1 not in claims and 3 in claims
    claims.drop(first, [3])
    assert claims.first(second, [3, 4]) and not claims.first(third, [4])
    claims.drop(second, [3, 4, 99])  # a job it never claimed is no matter
    assert claims.first(third, [4])
    claims.drop(third, [4])
    assert not any(job_id in claims for job_id in (1, 2, 3, 4))


def test_a_queued_job_a_request_in_flight_named_is_not_placeable_until_let_go() -> None:
    jobs = [JobRecord.queued(k, JobSpec(name=f"j{k}", command=("true",)), float(k)) for k in (1, 2)]
    queue = JobQueue(jobs)
    ticket = queue.claims.take([1])
    assert [job.id for job in queue.placeable()] == [2]
    assert [job.id for job in queue.ordered()] == [1, 2]  # it keeps its place
    queue.claims.drop(ticket, [1])
    assert [job.id for job in queue.placeable()] == [1, 2]
