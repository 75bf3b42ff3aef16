"""The jobs that job-control requests in flight have named, and in what order those requests act.

A request naming more jobs than one turn of the engine's loop should hold acts on them a slice
a turn (engine/requests/job_actions.py), and the loop serves every other client between two
slices. Two rules keep that as if each request were done at once:

- a queued job named by a request in flight is not placeable (`JobQueue.placeable`) until the
  request has acted on it: a cancel or a hold is never beaten by placement to a job it named;
- requests act on a job in the order they named it: a request that names a job an earlier
  one has not acted on yet waits for it (`first`), so a hold sent after a cancel finds the job
  cancelled. A request claims all of its jobs at once, when it arrives, so the earliest
  request in flight is first on each of its jobs: none waits for ever.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable


class JobClaims:
    def __init__(self) -> None:
        self._by_job: dict[int, deque[int]] = {}  # job id -> the requests naming it, in order
        self._tickets = itertools.count(1)

    def take(self, job_ids: Iterable[int]) -> int:
        """Claim `job_ids` for a new request, after those that claimed them before; its
        ticket."""
        ticket = next(self._tickets)
        for job_id in job_ids:
            self._by_job.setdefault(job_id, deque()).append(ticket)
        return ticket

    def first(self, ticket: int, job_ids: Iterable[int]) -> bool:
        """Whether no earlier request still claims any of `job_ids` (all `ticket`'s)."""
        return all(self._by_job[job_id][0] == ticket for job_id in job_ids)

    def drop(self, ticket: int, job_ids: Iterable[int]) -> None:
        """`ticket`'s request is done with `job_ids` (acted on them, or ended)."""
        for job_id in job_ids:
            claims = self._by_job.get(job_id)
            if claims is not None and ticket in claims:
                claims.remove(ticket)
                if not claims:
                    del self._by_job[job_id]

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_job
