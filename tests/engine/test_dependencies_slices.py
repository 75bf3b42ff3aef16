"""Queued jobs that can never start because a job they run after failed are cancelled
SLICE_JOBS a turn of the engine's loop, each slice in one transaction, the rest in the next
turns (placement left due, so nothing else need happen): every other client is answered
between two slices. Cancelled one commit a job, all in one turn, 500 of them held the loop
70-195 ms (docs/benchmarks.md, "Dependency cancels in slices"). Each job ends as it did:
cancelled, never started, its reason and event the same, in the same order; and none of those
left for a later turn is started meanwhile."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineInProcess
from test_placement_failure_slices import commits_ending_jobs  # same folder: on sys.path

from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.engine.offloop import SLICE_JOBS
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home

AFTER = 2 * SLICE_JOBS + 10  # three slices


@pytest.fixture
def in_process(home: Home) -> Iterator[EngineInProcess]:
    """An engine built in this process, its loop's turns run by the test (4 CPU slots: a job
    wrongly placed would start)."""
    engine = EngineInProcess(home, StationConfig(backend="none", slots=4))
    try:
        yield engine
    finally:
        engine.close()


def queue_after_a_failed_job(store: Store, workdir: Path, count: int) -> tuple[int, list[int]]:
    """A job, `count` CPU jobs queued to run after it, and then the first job failed (as
    placement fails one): none of the others can ever start."""
    (first,) = store.submit([JobSpec(name="prep", command=("true",), workdir=str(workdir))])
    specs = [
        JobSpec(name=f"a{k}", command=("true",), workdir=str(workdir), after=(first.id,))
        for k in range(count)
    ]
    ids = [job.id for job in store.submit(specs)]
    store.finish_queued([(first.id, "it could never run here")], JobState.FAILED)
    return first.id, ids


def cancel_order(db: Path) -> list[int]:
    """The jobs whose cancel events were written, in the order written."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT job_id FROM events WHERE state = 'cancelled' ORDER BY id")
        return [job_id for (job_id,) in rows]
    finally:
        conn.close()


def test_jobs_after_a_failed_job_are_cancelled_a_slice_a_turn_in_one_commit_each(
    in_process: EngineInProcess, home: Home, tmp_path: Path
) -> None:
    """510 jobs queued after a job that failed: the first turn cancels 250 of them in one commit
    and leaves placement due, the next 250, the third the last 10; none of them is started in
    between (before: all 510 in the first turn, a commit each)."""
    engine = in_process
    first, ids = queue_after_a_failed_job(engine.store, tmp_path, AFTER)
    engine.engine.recover()  # the queue read from the store, as at a start
    statements: list[str] = []
    engine.store._conn.set_trace_callback(statements.append)
    reason = f"job {first} (prep), which it runs after, failed; this job never ran"
    cancelled, commits, due = [], [], []
    for turn in range(3):
        statements.clear()
        engine.step()
        commits.append(commits_ending_jobs(statements))
        cancelled.append(sum(1 for job_id in ids if job_id not in engine.engine.queue))
        due.append(engine.engine.due.pending)
        if turn == 0:
            scheduler, last = engine.engine.scheduler, engine.engine.queue.get(ids[-1])
            why = last and (scheduler.explain_wait(last), scheduler.wait_codes([last.id]))
    assert cancelled == [SLICE_JOBS, 2 * SLICE_JOBS, AFTER]
    assert commits == [1, 1, 1]
    assert due == [True, True, False]
    # one left for a later turn says so, not that it waits for a slot, and not that it "never
    # ran" while it is still queued: that is said once it is cancelled
    pending = f"job {first} (prep), which it runs after, failed; it will not run"
    assert why == (f"being cancelled: {pending}", {ids[-1]: "Dependency"})
    jobs = engine.store.jobs(ids=ids)
    assert [j.id for j in jobs] == ids
    assert {(j.state.value, j.reason, j.started_at, j.attempts, j.held) for j in jobs} == {
        ("cancelled", reason, None, 0, False)
    }
    for job_id in (ids[0], ids[SLICE_JOBS], ids[-1]):
        events = [(e.kind, e.state, e.message) for e in engine.store.events(job_id)]
        assert events[1:] == [("state", "cancelled", reason)], events
    assert cancel_order(home.db) == ids  # in queue order, as one pass wrote them


def test_a_job_doomed_in_turn_is_cancelled_after_the_round_it_follows_as_before(
    in_process: EngineInProcess, home: Home, tmp_path: Path
) -> None:
    """300 jobs after a failed job, and one of higher priority (first in the queue) after the
    first of them: it is cancelled last, once all 300 are, as one uncut pass would have (the
    round of jobs a cancel dooms comes after the round it follows, though a slice cut it)."""
    engine = in_process
    _first, ids = queue_after_a_failed_job(engine.store, tmp_path, SLICE_JOBS + 50)
    spec = JobSpec(
        name="late", command=("true",), workdir=str(tmp_path), after=(ids[0],), priority=5
    )
    (late,) = engine.store.submit([spec])
    engine.engine.recover()
    for _turn in range(3):
        engine.step()
    assert cancel_order(home.db) == [*ids, late.id]
    assert engine.store.job(late.id).reason == (
        f"job {ids[0]} (a0), which it runs after, cancelled; this job never ran"
    )


def test_a_turns_cancels_and_placement_failures_share_one_slice(
    in_process: EngineInProcess, tmp_path: Path
) -> None:
    """200 jobs after a failed job and 100 GPU jobs on a station with no GPUs: the first turn
    ends 250 of them (the 200 cancels, then 50 failures), the loop held by jobs ended whatever
    the reason; the second the other 50."""
    engine = in_process
    after, gpu_ids = cancels_and_failures(engine, tmp_path)
    ended = []
    for _turn in range(2):
        engine.step()
        ended.append(
            (
                sum(1 for job_id in after if job_id not in engine.engine.queue),
                sum(1 for job_id in gpu_ids if job_id not in engine.engine.queue),
            )
        )
    assert ended == [(200, SLICE_JOBS - 200), (200, 100)]


def test_the_jobs_a_turn_ends_are_told_as_stored_read_back_in_one_query_a_slice(
    in_process: EngineInProcess, tmp_path: Path
) -> None:
    """200 jobs after a failed job and 100 GPU jobs on a station with no GPUs, ended over two
    turns: each job event carries the job as a read of it alone gives it (cancelled or failed,
    its reason), in the order they ended, and the ended jobs are read back in one query a slice
    (before: a SELECT each; bench/queue_ends.py)."""
    engine = in_process
    after, gpu_ids = cancels_and_failures(engine, tmp_path)
    told: list[JobRecord] = []
    engine.engine.events.listeners.append(told.append)
    statements: list[str] = []
    engine.store._conn.set_trace_callback(statements.append)
    for _turn in range(2):
        engine.step()
    engine.store._conn.set_trace_callback(None)
    assert [job.id for job in told] == [*after, *gpu_ids]
    assert told == [engine.store.job(job.id) for job in told]
    assert {job.state for job in told[:200]} == {JobState.CANCELLED}
    assert {job.state for job in told[200:]} == {JobState.FAILED}
    one_each = [s for s in statements if s.startswith("SELECT * FROM jobs WHERE id = ")]
    assert one_each == []


def cancels_and_failures(engine: EngineInProcess, tmp_path: Path) -> tuple[list[int], list[int]]:
    """200 jobs queued after a failed job and 100 GPU jobs on a station with no GPUs, the
    engine recovered onto them: (the 200's ids, the GPU jobs' ids)."""
    _first, after = queue_after_a_failed_job(engine.store, tmp_path, 200)
    gpu = [
        JobSpec(name=f"g{k}", command=("true",), workdir=str(tmp_path), gpus=1) for k in range(100)
    ]
    gpu_ids = [job.id for job in engine.store.submit(gpu)]
    engine.engine.recover()
    return after, gpu_ids
