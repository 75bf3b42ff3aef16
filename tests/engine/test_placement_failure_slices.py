"""Jobs the placement pass finds can never run here (GPU jobs on a station with no GPUs, queued
before its GPUs went) are failed SLICE_JOBS a pass, each slice in one transaction, the rest in
the passes of the next turns of the engine's loop: every other client is answered between two
slices. Failed one commit a job, 500 of them held the loop 60-120 ms (docs/benchmarks.md,
"Placement failures in slices"). Each job ends as it did: failed, its reason the policy's, its
event the same, no exit status."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from conftest import EngineHandle, EngineInProcess
from test_job_control_slices import RawClient, engine_stopped  # same folder: on sys.path

from gpudesk.core.jobs import JobSpec
from gpudesk.core.station import StationConfig
from gpudesk.core.wire.control import DrainView
from gpudesk.engine.drain import DRAIN_SETTING
from gpudesk.engine.offloop import SLICE_JOBS
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home

GPU_JOBS = 2 * SLICE_JOBS + 10  # three slices
REASON = (
    "the job asks for 1 GPU but this station has none (backend none); submit it with gpus = 0 "
    "to run on the CPU"
)


def gpu_specs(workdir: Path) -> list[JobSpec]:
    return [
        JobSpec(name=f"g{k}", command=("true",), workdir=str(workdir), gpus=1)
        for k in range(GPU_JOBS)
    ]


def assert_failed_as_before(store: Store, ids: list[int]) -> None:
    """Each job failed before it started, with the policy's reason and its one state event."""
    jobs = store.jobs(ids=ids)
    assert [j.id for j in jobs] == ids
    assert {(j.state.value, j.reason, j.exit_code, j.attempts, j.held) for j in jobs} == {
        ("failed", REASON, None, 0, False)
    }
    for job_id in (ids[0], ids[SLICE_JOBS], ids[-1]):
        events = [(e.kind, e.state, e.message) for e in store.events(job_id)]
        assert events[1:] == [("state", "failed", REASON)], events


@pytest.fixture
def in_process(home: Home) -> Iterator[EngineInProcess]:
    """An engine built in this process, its loop's turns run by the test."""
    engine = EngineInProcess(home, StationConfig(backend="none", slots=1))
    try:
        yield engine
    finally:
        engine.close()


def test_jobs_that_can_never_run_here_are_failed_a_slice_a_turn_in_one_commit_each(
    in_process: EngineInProcess, tmp_path: Path
) -> None:
    """510 GPU jobs queued on a station with no GPUs: the first turn fails 250 of them in one
    commit and leaves placement due, the next 250, the third the last 10 (before: all 510 in
    the first turn, a commit each)."""
    engine = in_process
    ids = [job.id for job in engine.store.submit(gpu_specs(tmp_path))]
    engine.engine.recover()  # the queue read from the store, as at a start
    statements: list[str] = []
    engine.store._conn.set_trace_callback(statements.append)
    failed, commits, due = [], [], []
    for _turn in range(3):
        statements.clear()
        engine.step()
        commits.append(commits_ending_jobs(statements))
        failed.append(sum(1 for job_id in ids if job_id not in engine.engine.queue))
        due.append(engine.engine.due.pending)
    assert failed == [SLICE_JOBS, 2 * SLICE_JOBS, GPU_JOBS]
    assert commits == [1, 1, 1]
    assert due == [True, True, False]
    assert_failed_as_before(engine.store, ids)


def commits_ending_jobs(statements: list[str]) -> int:
    """The transactions among `statements` that changed a job's state (the turn's others, an
    archive's, say, are not counted)."""
    commits, changed = 0, False
    for statement in statements:
        if statement.startswith("UPDATE jobs SET state"):
            changed = True
        elif statement == "COMMIT":
            commits, changed = commits + changed, False
    return commits


def test_another_clients_request_is_answered_between_the_slices_of_failures(
    home: Home, tmp_path: Path
) -> None:
    """A real daemon started drained with 510 GPU jobs queued and no GPUs; read in one turn, an
    undrain and, from another client, a priority change of 501 held jobs (acted on a slice a
    turn): a slice of the priority's lands after the first slice of failures, before the
    others (before: the 510 failures written in one run, nothing between them)."""
    home.ensure()
    store = Store.open(home.db)
    gpu = [job.id for job in store.submit(gpu_specs(tmp_path))]
    specs = [JobSpec(name=f"c{k}", command=("true",), workdir=str(tmp_path)) for k in range(501)]
    held = [job.id for job in store.submit(specs, held=True)]
    drained = DrainView(by="test", uid=os.getuid(), since=time.time(), reason="maintenance")
    store.set_setting(DRAIN_SETTING, msgspec.to_builtins(drained))
    store.close()
    engine = EngineHandle(home)
    engine.start()
    first, second = RawClient(home), RawClient(home)
    try:
        assert engine.pid is not None
        with engine_stopped(engine.pid):
            first.send("undrain")
            second.send("priority", jobs=held, delta=1)
        first.reply()
        assert {r["outcome"] for r in second.reply()["results"]} == {"priority 0 -> 1"}
    finally:
        first.close()
        second.close()
    engine.wait_all_done(gpu)
    runs = failure_runs(home.db, gpu)
    assert sum(runs) == GPU_JOBS
    assert len(runs) > 1 and runs[0] == SLICE_JOBS, runs
    store = Store.open(home.db)
    try:
        assert_failed_as_before(store, gpu)
    finally:
        store.close()
    engine.client.close()


def failure_runs(db: Path, ids: list[int]) -> list[int]:
    """The jobs' failure events in the order written, in runs that no other event splits."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT job_id, state FROM events ORDER BY id").fetchall()
    finally:
        conn.close()
    wanted, runs, run = set(ids), [], 0
    for job_id, state in rows:
        if job_id in wanted and state == "failed":
            run += 1
        elif run:
            runs.append(run)
            run = 0
    return [*runs, run] if run else runs
