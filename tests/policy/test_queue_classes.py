"""The queue by class (`gpudesk.policy.queue_classes`): the index kept as jobs join, leave and
change class; the walk a pass takes over it; and `SharingPolicy.place` deciding the same over a
`ClassedQueue` as over the plain list of the same jobs (a pass that drops a class drops only jobs
that would have done nothing)."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from gpudesk.core.identity import Identity
from gpudesk.core.records import JobRecord
from gpudesk.policy import queue_classes
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.demand import Demand
from gpudesk.policy.queue_classes import (
    ClassedQueue,
    OrderKey,
    QueueClasses,
    job_class,
    walk,
)
from gpudesk.policy.sim_queue import SimQueue
from gpudesk.policy.simulator import Simulation, load_trace
from tests.policy.test_place_equivalence import BENCH, GIB, ROOT, varied


def test_classes_keep_their_members_in_order_as_jobs_join_move_and_leave() -> None:
    classes = QueueClasses()
    for key, cls in [((0, 5), "a"), ((0, 2), "b"), ((0, 9), "a"), ((-1, 7), "a"), ((0, 3), "b")]:
        classes.put(key, cls)
    assert classes.members == {"a": [(-1, 7), (0, 5), (0, 9)], "b": [(0, 2), (0, 3)]}
    classes.put((0, 5), "a")  # the same class again: nothing moves
    classes.put((0, 9), "b")  # its demand corrected: another class
    assert classes.members == {"a": [(-1, 7), (0, 5)], "b": [(0, 2), (0, 3), (0, 9)]}
    classes.take((-1, 7))
    classes.take((0, 5))  # the class's last member: the class is gone
    assert classes.members == {"b": [(0, 2), (0, 3), (0, 9)]}
    assert len(classes) == 1
    with pytest.raises(KeyError):
        classes.take((0, 5))


def _classed(classes_of: list[str]) -> tuple[ClassedQueue, list[JobRecord]]:
    """A queue of one job per entry, of the named classes, in order (ids 1, 2, ...)."""
    jobs = BENCH.queue(random.Random(7), len(classes_of))
    records = [msgspec.structs.replace(job, id=i + 1) for i, job in enumerate(jobs)]
    keys: list[OrderKey] = [(0, r.id) for r in records]
    classes = QueueClasses()
    for key, cls in zip(keys, classes_of, strict=True):
        classes.put(key, cls)
    return ClassedQueue(records, keys, classes), records


def test_the_walk_gives_every_job_in_order_where_none_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(queue_classes, "CLASS_SHARE", 1.0)
    queue, records = _classed(["a", "b", "a", "c", "b", "a"])
    jobs, drop = walk(queue)
    assert drop is not None
    assert list(jobs) == list(enumerate(records))
    assert list(queue) == records and queue[1:3] == records[1:3] and len(queue) == 6


def test_a_dropped_class_is_left_out_for_the_rest_of_the_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(queue_classes, "CLASS_SHARE", 1.0)
    queue, records = _classed(["a", "b", "a", "c", "b", "a", "c", "a"])
    jobs, drop = walk(queue)
    assert drop is not None
    seen = []
    for position, job in jobs:
        seen.append(position)
        assert records[position] is job
        if position in (2, 4):  # the second "a", the second "b"
            drop()
    assert seen == [0, 1, 2, 3, 4, 6]  # no "a" after 2, no "b" after 4; "c" goes on
    # a new walk starts with every class again
    assert [p for p, _ in walk(queue)[0]] == list(range(8))


def test_a_queue_of_nearly_all_distinct_jobs_or_a_plain_list_is_walked_job_by_job() -> None:
    few, records = _classed(["a", "b"] * 10)  # 2 classes for 20 jobs: by class
    assert walk(few)[1] is not None
    many, _ = _classed(["a", "b", "c"] * 6)  # 3 for 18: one by one
    assert walk(many)[1] is None
    jobs, drop = walk(records)
    assert drop is None and list(jobs) == list(enumerate(records))


def test_job_class_reads_what_the_pass_reads() -> None:
    job = BENCH.queue(random.Random(3), 1)[0]
    told = Demand(8 * GIB, 30.0, "history")
    assert job_class(job, None) == job_class(msgspec.structs.replace(job, id=job.id + 1), None)
    assert job_class(job, None) != job_class(job, told)
    assert job_class(job, told) == job_class(job, Demand(8 * GIB, 30.0, "history"))
    other = Identity.of(4242, 4242, [4242])
    assert job_class(job, None) != job_class(msgspec.structs.replace(job, owner=other), None)
    assert job_class(job, None) != job_class(
        msgspec.structs.replace(job, spec=msgspec.structs.replace(job.spec, gpus=2)), None
    )


def _few_classes(rng: random.Random, queue: list[JobRecord]) -> list[JobRecord]:
    """The queue's jobs with their specs and owners drawn from a few of its own jobs: a long
    queue of many alike (a sweep, a synthetic trace), where walking by class pays."""
    palette = rng.sample(queue, min(len(queue), rng.choice((2, 5, 12))))
    out = []
    for job in queue:
        model = rng.choice(palette)
        out.append(msgspec.structs.replace(job, spec=model.spec, owner=model.owner))
    return out


def _as_classed(queue: list[JobRecord], demands: dict[int, Demand]) -> ClassedQueue:
    keys: list[OrderKey] = [(0, position) for position in range(len(queue))]
    classes = QueueClasses()
    for key, job in zip(keys, queue, strict=True):
        classes.put(key, job_class(job, demands.get(job.id)))
    return ClassedQueue(queue, keys, classes)


@pytest.mark.parametrize(("jobs", "rounds"), [(40, 60), (400, 20), (3000, 3)])
def test_place_over_the_classed_queue_decides_what_it_decides_over_the_list(
    jobs: int, rounds: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On bench/policy.py's inputs, their jobs drawn from a few alike (and every other round
    varied as test_place_equivalence varies them: CPU jobs, unknown hints, measured demands with
    and without bandwidth, another user, MIG, a lost GPU, overtaken jobs), with demands told
    for some: every policy mode decides the same over the classes as over the list (walked by
    class however many classes there are)."""
    monkeypatch.setattr(queue_classes, "CLASS_SHARE", 1.0)
    rng = random.Random(jobs + 1)
    policies = [SharingPolicy(mode) for mode in ("auto", "mps", "naive", "exclusive", "mig")]
    for index in range(rounds):
        queue = _few_classes(rng, BENCH.queue(rng, jobs))
        view = BENCH.station(rng, rng.choice((2, 4, 8)), queue)
        if index % 2:
            queue, view = varied(rng, queue, view)
        classed = _as_classed(queue, dict(view.demands))
        for policy in policies:
            assert policy.place(classed, view) == policy.place(queue, view), (
                f"{policy.name}, round {index}"
            )


class _AskedDemands(dict[int, Demand]):
    """The station's demands, counting how often a pass asks for a job's: once for each GPU
    job it visits (and for the few in a look-ahead window)."""

    asked = 0

    def get(self, key: int, default: Demand | None = None) -> Demand | None:  # type: ignore[override]
        self.asked += 1
        return super().get(key, default)


def test_a_pass_over_a_long_queue_of_alike_jobs_visits_each_class_not_each_job() -> None:
    """The reason for the classes: 3,000 waiting jobs of three kinds on a station with room for a
    few. Walked by class, the pass visits those it places and one more of each kind (found
    dominated); job by job, all 3,000."""
    rng = random.Random(11)
    palette = BENCH.queue(rng, 3)
    queue = [
        msgspec.structs.replace(
            palette[i % 3], id=i + 1, spec=msgspec.structs.replace(palette[i % 3].spec, gpus=1)
        )
        for i in range(3000)
    ]
    view = BENCH.station(rng, 4, queue)
    full = tuple(replace(g, memory_used_mib=g.memory_total_mib) for g in view.gpu_states)
    by_class, one_by_one = _AskedDemands(), _AskedDemands()
    decision = SharingPolicy("auto").place(
        _as_classed(queue, {}), msgspec.structs.replace(view, gpu_states=full, demands=by_class)
    )
    assert len(decision.placements) < 20  # the few the station has room for
    assert by_class.asked < 100
    assert decision == SharingPolicy("auto").place(
        queue, msgspec.structs.replace(view, gpu_states=full, demands=one_by_one)
    )
    assert one_by_one.asked >= 3000


def test_a_replay_under_heavy_overload_is_the_same_by_class_as_job_by_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """bench/sim_scaling.py's heavy trace (a queue of hundreds), replayed with the simulator's
    queue handed to the policy by class and as a plain list: the same result, every figure and
    every attempt of every job (walked by class on every pass where it is handed a classed
    queue, however many classes it has)."""
    monkeypatch.setattr(queue_classes, "CLASS_SHARE", 1.0)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from sim_scaling import write_trace
    finally:
        sys.path.remove(str(ROOT / "bench"))
    path = tmp_path / "heavy.json"
    write_trace(300, "heavy", path)
    trace = load_trace(path)

    def replay() -> list[dict[str, object]]:
        out = []
        for policy in ("auto", "mps", "carma"):
            result = Simulation(trace, policy=policy, station=trace.sim_station).run()
            # every figure unrounded, and every attempt; not the wall-clock decision time
            out.append({k: v for k, v in vars(result).items() if k != "decision_p99_ms"})
        return out

    by_class = replay()
    monkeypatch.setattr(SimQueue, "classed", lambda self: list(self.records))
    assert by_class == replay()
