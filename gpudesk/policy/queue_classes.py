"""A queue that knows which of its jobs a placement pass judges alike (`ClassedQueue`), so that
the pass visits a long queue's jobs by class rather than one by one.

Why: `SharingPolicy.place` looks at every waiting job on every pass, and most of a long queue is
jobs whose shape's no-room frontier says they find no room (`placement_pass.Pass.no_room`). Under
heavy overload (thousands waiting) that made each event's pass linear in the queue and a replay of
`gpudesk simulate` about n^1.5 in its length (docs/benchmarks.md, "gpudesk simulate against trace
length"). Whether a job is skipped that way is a function of its `job_class` (its GPUs, hints,
owner and the demand the station tells for it) and of the pass's state, and the pass's frontiers
only grow: once one job of a class is found dominated, every later one of the class is too, and
does nothing (the job the station drains for, `Pass.waiting`, is then set or can never be set by
that class: the same test on the same figures). So a pass may drop the rest of that class
(`walk`'s drop) and go on to the next job in queue order of a class still live: a pass costs
the jobs it weighs, one per dropped class, and a heap step and a binary search each, instead of
one check per job waiting. The result is the same pass, job for job.

`QueueClasses` keeps the classes as the queue changes (a job joining, leaving, its demand
corrected), so no pass builds them: the simulator's queue (`sim_queue.SimQueue`) keeps one. Any
other queue (a plain list: the engine's, or the simulator's in shortest-first order, which
changes every pass) is walked one job at a time (`walk`), as before.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from heapq import heapify, heappop, heapreplace
from typing import overload

from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import Demand

# A job's class: what a pass's no-room check reads of it (`job_class`)
JobClass = tuple[int, float | None, float | None, int, Demand | None]
# A queued job's place in the queue's order (unique per job: the simulator's (-priority, id))
OrderKey = tuple[int, int]

# Walk by class only where the classes are at most this share of the queue: each class costs a
# pass a heap entry, a binary search and at least one visit, more than a plain check of one job,
# so a queue of jobs mostly unlike each other is walked one by one (the same result either way).
# Measured (2,000 jobs on bench/policy.py's 4-GPU stations, the best of 7 passes, the 2-core
# VM): by class 0.43 ms against 0.86 job by job at 20 classes, 1.08 against 1.18 at 200, 1.45
# against 1.20 at 500, 3.5 against 1.4 at 2,000.
CLASS_SHARE = 0.1


def job_class(job: JobRecord, known: Demand | None) -> JobClass:
    """What `SharingPolicy.place` reads of a job to decide whether its shape's frontier
    dominates it (`_judge` and the hot path before it), besides the pass's own state: its GPUs,
    memory and SM hints, owner, and the demand the station tells for it (`known`: None where
    the policy derives it from the hints). Jobs of one class are judged alike."""
    spec = job.spec
    return (spec.gpus, spec.memory_gb, spec.sm_pct, job.owner.uid, known)


class QueueClasses:
    """The queue's jobs by class, each class's members in queue order (their `OrderKey`s)."""

    def __init__(self) -> None:
        self.members: dict[Hashable, list[OrderKey]] = {}
        self._class_of: dict[OrderKey, Hashable] = {}

    def __len__(self) -> int:
        return len(self.members)

    def put(self, key: OrderKey, job_class: Hashable) -> None:
        """The job at `key` is of `job_class` now (joining, or moved from its last class)."""
        before = self._class_of.get(key)
        if before is not None:
            if before == job_class:
                return
            self.take(key)
        self._class_of[key] = job_class
        insort(self.members.setdefault(job_class, []), key)

    def take(self, key: OrderKey) -> None:
        """The job at `key` leaves the queue."""
        job_class = self._class_of.pop(key)
        members = self.members[job_class]
        del members[bisect_left(members, key)]
        if not members:
            del self.members[job_class]


class _ClassWalk:
    """One pass's walk over a `ClassedQueue` by class: (position, job) pairs in queue order,
    where `drop()` leaves out the rest of the class of the job just given."""

    def __init__(self, queue: ClassedQueue) -> None:
        self._queue = queue
        self._dropped = False

    def drop(self) -> None:
        self._dropped = True

    def __iter__(self) -> Iterator[tuple[int, JobRecord]]:
        classes = list(self._queue.classes.members.values())
        keys, records = self._queue.keys, self._queue.records
        # each live class's next member, the earliest in queue order on top
        heap = [(members[0], index) for index, members in enumerate(classes)]
        heapify(heap)
        cursors = [0] * len(classes)
        while heap:
            key, index = heap[0]
            position = bisect_left(keys, key)
            self._dropped = False
            yield position, records[position]
            members = classes[index]
            cursors[index] += 1
            if self._dropped or cursors[index] == len(members):
                heappop(heap)
            else:
                heapreplace(heap, (members[cursors[index]], index))


class ClassedQueue(Sequence[JobRecord]):
    """The queue's records in order, with their order keys and classes: what one pass reads.
    It holds the queue's own lists, not copies: valid until the queue next changes."""

    def __init__(
        self, records: list[JobRecord], keys: list[OrderKey], classes: QueueClasses
    ) -> None:
        self.records, self.keys, self.classes = records, keys, classes

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> JobRecord: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[JobRecord]: ...

    def __getitem__(self, index: int | slice) -> JobRecord | Sequence[JobRecord]:
        return self.records[index]

    def __iter__(self) -> Iterator[JobRecord]:
        return iter(self.records)


def walk(
    queue: Sequence[JobRecord],
) -> tuple[Iterable[tuple[int, JobRecord]], Callable[[], None] | None]:
    """The walk a pass takes over `queue` ((position, job) pairs, in its order), and what leaves
    out the rest of the class of the job just given (None: nothing is left out; a pass checks
    for None rather than call a no-op, a call per job being a good part of a long queue's cost):
    by class where `queue` is a `ClassedQueue` with few enough classes (`CLASS_SHARE`), else one
    job at a time."""
    if isinstance(queue, ClassedQueue) and len(queue.classes) <= CLASS_SHARE * len(queue):
        by_class = _ClassWalk(queue)
        return by_class, by_class.drop
    return enumerate(queue), None
