"""Job control below the engine: the store's hold / priority / requeue writes and their schema
migration, the queue's re-sorting and held jobs, the per-GPU energy sums and local midnight."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudesk.core.job_changes import Requeue, SetHeld, SetPriority
from gpudesk.core.jobs import InvalidTransition, JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.engine.station.telemetry_sink import local_midnight
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import GPU_ENERGY_METRIC, MIGRATIONS, SCHEMA_VERSION
from gpudesk.policy.policy import Placement
from gpudesk.policy.queue import JobQueue


def spec(name: str = "j", **extra: object) -> JobSpec:
    return JobSpec(name=name, command=("true",), **extra)  # type: ignore[arg-type]


def set_held(store: Store, job_id: int, held: bool) -> JobRecord:
    """Hold or release one job, as a request of one does (engine/store/job_changes.py)."""
    store.change_jobs([SetHeld(store.job(job_id), held)], lambda _exc: False)
    return store.job(job_id)


def set_priority(store: Store, job_id: int, priority: int) -> JobRecord:
    store.change_jobs([SetPriority(store.job(job_id), priority)], lambda _exc: False)
    return store.job(job_id)


def requeue(store: Store, job_id: int) -> JobRecord:
    store.change_jobs([Requeue(store.job(job_id))], lambda _exc: False)
    return store.job(job_id)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "db")
    yield s
    s.close()


def fail_attempt(store: Store, job_id: int, jobs_root: Path, state: JobState) -> None:
    attempt = store.start_attempt(job_id, {"slot": "cpu:0"}, jobs_root)
    store.finish_attempt(
        attempt, attempt_state="exited", job_state=state, message="exit code 3", exit_code=3
    )


# ------------------------------------------------------------------- migration
def test_a_version_3_store_migrates_to_job_control_and_keeps_its_jobs(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db")
    for script in MIGRATIONS[:3]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 3")
    conn.execute(
        "INSERT INTO jobs (name, spec, state, priority, submitted_at, attempts) "
        "VALUES ('old', ?, 'failed', 2, 1.0, 1)",
        (json.dumps(spec("old", priority=2).to_dict()),),
    )
    conn.commit()
    conn.close()
    store = Store.open(tmp_path / "db")
    try:
        assert store.schema_version == SCHEMA_VERSION >= 4
        (old,) = store.jobs()
        assert (old.name, old.held, old.attempts_before_requeue) == ("old", False, 0)
        assert old.attempts_since_requeue == 1
    finally:
        store.close()


# ------------------------------------------------------------------------ hold
def test_hold_and_release_a_queued_job_with_events(store: Store, tmp_path: Path) -> None:
    (job,) = store.submit([spec()])
    held = set_held(store, job.id, True)
    assert held.held and held.state is JobState.QUEUED
    assert store.queued()[0].held
    released = set_held(store, job.id, False)
    assert not released.held
    assert [(e.kind, e.message) for e in store.events(job.id)][1:] == [
        ("hold", "held by user"),
        ("release", "released by user"),
    ]


def test_held_survives_reopening_the_store(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    (job,) = store.submit([spec()])
    set_held(store, job.id, True)
    store.close()
    again = Store.open(tmp_path / "db")
    try:
        assert again.job(job.id).held
    finally:
        again.close()


def test_only_a_queued_job_can_be_held_and_leaving_the_queue_clears_it(
    store: Store, tmp_path: Path
) -> None:
    running, cancelled = store.submit([spec("r"), spec("c")])
    store.start_attempt(running.id, {"slot": "cpu:0"}, tmp_path)
    with pytest.raises(InvalidTransition, match="job 1 is running"):
        set_held(store, running.id, True)
    assert not store.job(running.id).held
    set_held(store, cancelled.id, True)
    store.finish_queued([(cancelled.id, "cancelled while queued")], JobState.CANCELLED)
    assert not store.job(cancelled.id).held


# -------------------------------------------------------------------- priority
def test_set_priority_rewrites_the_spec_and_the_queue_order(store: Store, tmp_path: Path) -> None:
    a, _, c = store.submit([spec("a"), spec("b"), spec("c")])
    changed = set_priority(store, c.id, 7)
    assert changed.spec.priority == 7 and changed.spec.command == ("true",)
    assert [j.name for j in store.queued()] == ["c", "a", "b"]
    set_priority(store, c.id, -1)
    assert [j.name for j in store.queued()] == ["a", "b", "c"]
    assert [e.message for e in store.events(c.id) if e.kind == "priority"] == [
        "priority 0 -> 7 by user",
        "priority 7 -> -1 by user",
    ]
    store.start_attempt(a.id, {"slot": "cpu:0"}, tmp_path)
    assert set_priority(store, a.id, 3).spec.priority == 3  # kept for a retry


# --------------------------------------------------------------------- requeue
def test_requeue_a_failed_job_gives_a_fresh_budget_and_continues_numbering(
    store: Store, tmp_path: Path
) -> None:
    (job,) = store.submit([spec(max_attempts=2)])
    fail_attempt(store, job.id, tmp_path, JobState.QUEUED)
    fail_attempt(store, job.id, tmp_path, JobState.FAILED)
    failed = store.job(job.id)
    assert (failed.attempts, failed.attempts_since_requeue) == (2, 2)
    again = requeue(store, job.id)
    assert again.state is JobState.QUEUED
    assert (again.attempts, again.attempts_before_requeue, again.attempts_since_requeue) == (
        2,
        2,
        0,
    )
    assert (again.exit_code, again.reason, again.ended_at, again.started_at) == (
        None,
        None,
        None,
        None,
    )
    third = store.start_attempt(job.id, {"slot": "cpu:1"}, tmp_path)
    assert third.number == 3
    assert store.job(job.id).attempts_since_requeue == 1
    assert [a.number for a in store.attempts(job.id)] == [1, 2, 3]
    requeued = [e for e in store.events(job.id) if e.message.startswith("requeued by user")]
    assert [(e.state, e.message) for e in requeued] == [("queued", "requeued by user (was failed)")]


def test_requeue_clears_a_cancel_and_a_hold(store: Store, tmp_path: Path) -> None:
    (job,) = store.submit([spec()])
    attempt = store.start_attempt(job.id, {"slot": "cpu:0"}, tmp_path)
    store.request_cancel(job.id, grace=5)
    store.finish_attempt(
        attempt,
        attempt_state="exited",
        job_state=JobState.CANCELLED,
        message="cancelled",
        exit_code=143,
    )
    again = requeue(store, job.id)
    assert (again.cancel_requested, again.kill_deadline, again.held) == (False, None, False)


def test_only_a_finished_job_can_be_requeued(store: Store, tmp_path: Path) -> None:
    queued, running = store.submit([spec("q"), spec("r")])
    store.start_attempt(running.id, {"slot": "cpu:0"}, tmp_path)
    for job_id, state in ((queued.id, "queued"), (running.id, "running")):
        with pytest.raises(InvalidTransition, match=f"is {state}"):
            requeue(store, job_id)
        assert store.job(job_id).state.value == state


# ---------------------------------------------------------------------- energy
def test_gpu_energy_since_sums_only_the_energy_points_after_the_time(store: Store) -> None:
    store.add_samples(
        [
            (100.0, 0, GPU_ENERGY_METRIC, 1000.0),
            (110.0, 0, GPU_ENERGY_METRIC, 500.0),
            (120.0, 0, GPU_ENERGY_METRIC, 250.0),
            (110.0, 1, GPU_ENERGY_METRIC, 40.0),
            (110.0, 0, "power_w", 300.0),
        ],
        [],
    )
    assert store.gpu_energy_since([0, 1, 2], since=105.0) == {0: 750.0, 1: 40.0}
    assert store.gpu_energy_since([0], since=0.0) == {0: 1750.0}
    assert store.gpu_energy_since([], since=0.0) == {}


def test_local_midnight_starts_the_local_day() -> None:
    now = time.time()
    midnight = local_midnight(now)
    assert now - 25 * 3600 < midnight <= now
    start = time.localtime(midnight)
    assert (start.tm_hour, start.tm_min, start.tm_sec) == (0, 0, 0)
    assert start.tm_yday == time.localtime(now).tm_yday


# ----------------------------------------------------------------------- queue
def queued(job_id: int, priority: int = 0, held: bool = False) -> JobRecord:
    return JobRecord(
        id=job_id,
        spec=spec(f"j{job_id}", priority=priority),
        state=JobState.QUEUED,
        submitted_at=0.0,
        started_at=None,
        ended_at=None,
        attempts=0,
        exit_code=None,
        reason=None,
        cancel_requested=False,
        held=held,
    )


def test_a_new_priority_re_sorts_the_queue() -> None:
    queue = JobQueue([queued(1), queued(2), queued(3)])
    queue.add(queued(3, priority=5))
    assert [j.id for j in queue.ordered()] == [3, 1, 2]
    queue.add(queued(3, priority=-5))
    assert [j.id for j in queue.ordered()] == [1, 2, 3]
    queue.add(queued(1, priority=-5))
    assert [j.id for j in queue.ordered()] == [2, 1, 3]
    assert len(queue) == 3


def test_held_jobs_keep_their_place_but_are_not_placeable() -> None:
    queue = JobQueue([queued(1), queued(2, held=True), queued(3, priority=1)])
    assert [j.id for j in queue.ordered()] == [3, 1, 2]
    assert [j.id for j in queue.placeable()] == [3, 1]
    queue.add(queued(3, priority=1, held=True))
    assert [j.id for j in queue.placeable()] == [1]
    queue.add(queued(2))  # released: back at its place
    assert [j.id for j in queue.placeable()] == [1, 2]
    assert [j.id for j in queue.ordered()] == [3, 1, 2]


def test_preempted_attempts_do_not_count_against_max_attempts(store: Store, tmp_path: Path) -> None:
    """Schema 14: an attempt that ends "preempted" (docs/preemption.md) counts in the job's
    `preemptions`, not against max_attempts; a requeue by the user starts both afresh."""
    (job,) = store.submit([spec(max_attempts=1, preemptible=True)])
    placement = Placement(job.id, "cpu:0", "cpu", "first come, first served").to_dict()
    attempt = store.start_attempt(job.id, placement, tmp_path)
    store.finish_attempt(
        attempt,
        attempt_state="exited",
        job_state=JobState.QUEUED,
        message="attempt 1 preempted for job 9 (exit code 75); back in the queue to resume",
        exit_code=75,
        preempted_for=9,
    )
    back = store.job(job.id)
    assert (back.state, back.attempts, back.preemptions) == (JobState.QUEUED, 1, 1)
    assert back.attempts_since_requeue == 0 and back.spec.preemptible
    (first,) = store.attempts(job.id)
    assert (first.state, first.preempted_for) == ("exited", 9)
    assert first.view().state == "preempted" and "preempted for job 9" in (first.reason or "")
    fail_attempt(store, job.id, tmp_path, JobState.FAILED)
    failed = store.job(job.id)
    assert (failed.attempts, failed.preemptions, failed.attempts_since_requeue) == (2, 1, 1)
    again = requeue(store, job.id)
    assert (again.preemptions, again.attempts_since_requeue) == (0, 0)
