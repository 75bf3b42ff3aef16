"""Job control of many jobs at once: `cancel`, `hold`, `release` and `requeue` naming hundreds of
jobs write the store in one transaction (a request naming 1,000 held the engine's loop 0.1-0.2
s, a commit a job), each job's outcome still its own; a change the store refuses (a real SQLite
trigger, as a disk that fills between two writes) leaves that job as it was in the engine's
queue as in the store, and the others go on; a refused commit leaves every one of them."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, EngineInProcess, wait_for
from store_fill import fill_jobs
from store_refusal import FULL_DISK, store_refusing
from test_job_control_store import set_held  # same folder: on sys.path under pytest

from gpudesk.core.identity import Caller, Identity
from gpudesk.core.job_changes import CancelQueued, Requeue, SetHeld, SetPriority
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.station import StationConfig
from gpudesk.engine.offloop import SLICE_JOBS
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home

DISK_FULL = "nothing changed: the store could not be written: the disk holding "


@pytest.fixture
def in_process(home: Home) -> Iterator[EngineInProcess]:
    """An engine built in this process, its loop not run (nothing starts)."""
    engine = EngineInProcess(home, StationConfig(backend="none", slots=1))
    try:
        yield engine
    finally:
        engine.close()


def filled(
    engine: EngineInProcess, queued: int = 300, finished: int = 300
) -> tuple[list[int], list[int]]:
    """`queued` queued jobs and `finished` finished ones in the store, the queue read from it
    as at a start."""
    done = fill_jobs(engine.engine.home.db, finished=finished, name="done")
    waiting = fill_jobs(engine.engine.home.db, queued=queued, name="waiting")
    engine.engine.recover()
    return waiting, done


def stored(db: Path, ids: list[int]) -> dict[int, tuple[str, bool]]:
    """(state, held) of each job as a reader of the database sees it."""
    conn = sqlite3.connect(db)
    try:
        marks = ",".join("?" * len(ids))
        rows = conn.execute(f"SELECT id, state, held FROM jobs WHERE id IN ({marks})", ids)
        return {job_id: (state, bool(held)) for job_id, state, held in rows}
    finally:
        conn.close()


def test_many_jobs_are_changed_in_one_commit_a_slice_read_at_once_each_outcome_its_own(
    in_process: EngineInProcess,
) -> None:
    """A request's jobs are acted on SLICE_JOBS at a time (a slice a turn of the loop): each
    slice's changes in one commit, its jobs not queued read in one query; the outcomes in the
    order the jobs were named, whatever the slices."""
    assert SLICE_JOBS == 250  # the slices below
    engine, me = in_process, Caller.of_process()
    waiting, done = filled(engine)
    queue = engine.engine.queue
    statements: list[str] = []
    engine.store._conn.set_trace_callback(statements.append)

    def commits_and_reads(op: str, jobs: list[int], **args: object) -> tuple[int, int, list]:
        statements.clear()
        results = engine.ok(me, op, jobs=jobs, **args)["results"]
        reads = [s for s in statements if s.startswith("SELECT * FROM jobs WHERE id")]
        return statements.count("COMMIT"), len(reads), results

    # a name, an id as digits, an id twice: each job once, in the order first named
    named = [waiting[0], str(waiting[1]), *waiting[1:200], "waiting"]
    commits, reads, results = commits_and_reads("hold", named)
    assert (commits, reads) == (1, 0)  # the queued jobs as the queue holds them
    assert [r["id"] for r in results] == [*waiting[:200], waiting[-1]]
    assert {(r["outcome"], r["ok"]) for r in results} == {("held", True)}
    assert commits_and_reads("hold", waiting[:3])[2][0]["outcome"] == "already held"
    commits, _, results = commits_and_reads("release", waiting[:250])
    assert commits == 1
    assert [r["outcome"] for r in results] == ["released"] * 200 + ["not held"] * 50
    # priority too: one commit for the slice (it was one a job), in any state
    commits, reads, results = commits_and_reads("priority", [*waiting[:249], done[0]], delta=1)
    assert (commits, reads) == (1, 1)
    later = "already succeeded, so it changes nothing now (it orders the queue after a requeue)"
    assert [r["outcome"] for r in results] == ["priority 0 -> 1"] * 249 + [
        f"priority 0 -> 1; {later}"
    ]
    assert [j.spec.priority for j in engine.store.jobs(ids=[waiting[0], done[0]])] == [1, 1]
    assert queue.get(waiting[0]) == engine.store.job(waiting[0])  # moved in the queue

    commits, reads, results = commits_and_reads("cancel", [*waiting[:250], done[0]])
    assert (commits, reads) == (1, 1)  # the finished one read in its slice, the queued not
    assert [r["outcome"] for r in results] == ["cancelled"] * 250 + ["already succeeded"]
    assert all(job_id not in queue for job_id in waiting[:250])
    assert set(stored(engine.engine.home.db, waiting[:250]).values()) == {("cancelled", False)}

    # cancelled, finished, and one still queued: 551 jobs, three slices of one commit each,
    # each reading the jobs of its slice that are not queued, in one query
    again = [*waiting[:250], *done, waiting[-1]]
    commits, reads, results = commits_and_reads("requeue", again)
    assert (commits, reads) == (3, 3)
    assert [r["id"] for r in results] == again
    assert [r["outcome"] for r in results] == ["requeued"] * 550 + ["already queued (held)"]
    assert all(job_id in queue for job_id in [*waiting, *done])
    for job_id in (waiting[0], done[0]):
        assert engine.store.job(job_id) == queue.get(job_id)  # the queue's copy is the store's
    events = [e.message for e in engine.store.events(done[0])]
    assert events[-1] == "requeued by user (was succeeded)"
    assert not any(job_id in queue.claims for job_id in again)  # the request let them go


def test_max_queued_per_user_counts_the_jobs_the_same_request_requeues(
    in_process: EngineInProcess,
) -> None:
    engine, me = in_process, Caller.of_process()
    _, done = filled(engine, queued=3, finished=5)
    engine.ok(me, "configure", station={"max_queued_per_user": 6})
    results = engine.ok(me, "requeue", jobs=done)["results"]
    assert [r["ok"] for r in results] == [True, True, True, False, False]
    assert "has 6 jobs queued" in results[3]["outcome"], results[3]
    assert len(engine.engine.queue) == 6


def test_a_change_the_store_refuses_leaves_that_job_as_it_was_here_and_in_the_store(
    in_process: EngineInProcess,
) -> None:
    """Per job, as when each had its own transaction: the refused job's outcome says the
    disk is full and it is left as it was, in the queue as in the store; the rest of the
    request goes through in the same commit."""
    engine, me = in_process, Caller.of_process()
    waiting, done = filled(engine, queued=20, finished=20)
    db, queue = engine.engine.home.db, engine.engine.queue
    for op, jobs, refused in (
        ("priority", waiting[:10], waiting[3]),
        ("cancel", waiting[:10], waiting[4]),
        ("hold", waiting[10:], waiting[12]),
        ("requeue", done, done[7]),
    ):
        before = engine.store.job(refused).state.value
        when = f"BEFORE INSERT ON events WHEN NEW.job_id = {refused}"
        args = {"priority": 5} if op == "priority" else {}
        with store_refusing(db, when, FULL_DISK):
            results = engine.ok(me, op, jobs=jobs, **args)["results"]
        outcomes = {r["id"]: (r["ok"], r["outcome"]) for r in results}
        ok, said = outcomes.pop(refused)
        assert not ok and said.startswith(DISK_FULL), said
        assert all(ok for ok, _ in outcomes.values())
        assert stored(db, [refused])[refused] == (before, False)
        assert (refused in queue) == (op != "requeue")
        assert queue.get(refused) in (None, engine.store.job(refused))
    assert [job_id for job_id in waiting if job_id in queue] == [waiting[4], *waiting[10:]]
    assert engine.store.job(waiting[3]).spec.priority == 0  # its priority refused, then cancelled
    assert [queue.get(j).held for j in waiting[10:]] == [True] * 2 + [False] + [True] * 7
    assert all(engine.store.job(j) == queue.get(j) for j in waiting[10:])


def test_a_refused_commit_writes_none_and_the_store_takes_the_next_write(tmp_path: Path) -> None:
    """A commit the store refuses (here a deferred foreign key that fails at COMMIT, as a
    full disk can fail it) leaves none of the changes and no transaction open: before, every
    later write failed "cannot start a transaction within a transaction"."""
    store = Store.open(tmp_path / "db")
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    try:
        jobs = store.submit([JobSpec(name=f"j{i}", command=("true",)) for i in range(4)])
        conn.executescript(
            "CREATE TABLE checked (job INTEGER REFERENCES jobs (id) DEFERRABLE INITIALLY "
            "DEFERRED); CREATE TRIGGER at_commit AFTER INSERT ON events WHEN NEW.kind = 'hold' "
            "BEGIN INSERT INTO checked VALUES (-1); END"
        )
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            set_held(store, jobs[0].id, True)
        assert not store._conn.in_transaction
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            store.change_jobs([SetHeld(job, True) for job in jobs], refused=lambda _exc: True)
        assert not store._conn.in_transaction
        assert [job.held for job in store.jobs()] == [False] * 4
        conn.execute("DROP TRIGGER at_commit")
        assert set_held(store, jobs[0].id, True).held
        assert store.change_jobs([SetHeld(jobs[1], True)], refused=lambda _exc: False) == [None]
        assert [job.held for job in store.jobs()] == [True, True, False, False]
    finally:
        conn.close()
        store.close()


def test_each_change_says_the_record_the_store_reads_back(tmp_path: Path) -> None:
    """`applied` is what the engine's queue and events are given instead of a read of each job
    after its write: it must be what the store reads back, field for field."""
    store = Store.open(tmp_path / "db")
    try:
        other = Identity.of(os.getuid() + 1, os.getgid() + 1, [7])
        specs = [JobSpec(name=f"j{i}", command=("true",), priority=i) for i in range(3)]
        queued, held, finished = store.submit(specs, owner=other, held=True)
        set_held(store, finished.id, False)
        for state in (JobState.QUEUED, JobState.FAILED):  # a retry, then its last attempt
            store.finish_attempt(
                store.start_attempt(finished.id, {"slot": "cpu:1"}, tmp_path),
                attempt_state="exited",
                job_state=state,
                message="exit code 3",
                exit_code=3,
            )
        store.request_cancel(finished.id, 5.0)  # a cancel asked for as it failed: cleared
        changes = [
            CancelQueued(store.job(queued.id), "cancelled while queued \udcff"),
            SetHeld(store.job(held.id), False),
            Requeue(store.job(finished.id)),
        ]
        changes.append(SetPriority(changes[1].applied(1000.0), -3))  # after the release
        changes.append(SetPriority(changes[2].applied(1000.0), 9))  # after the requeue
        assert store.change_jobs(changes, refused=lambda _exc: False, now=1000.0) == [None] * 5
        for change in changes[:1] + changes[3:]:  # each job's last change
            assert change.applied(1000.0) == store.job(change.job.id), change
        assert store.job(finished.id).attempts_before_requeue == 2
    finally:
        store.close()


@pytest.mark.slow(8)
def test_jobs_left_queued_by_a_refusal_run_once_and_the_cancelled_never(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """On the real daemon: of four queued jobs cancelled in one request, the one whose change
    the store refuses stays queued and later runs, once; the three cancelled never run."""
    gate, marker = tmp_path / "gate", tmp_path / "runs"
    blocker = engine.occupy_the_only_slot(gate)
    ids = engine.submit(
        *({"name": f"j{i}", "command": ["sh", "-c", f"echo {i} >> {marker}"]} for i in range(4))
    )
    refused = ids[2]
    with store_refusing(engine.home.db, f"BEFORE INSERT ON events WHEN NEW.job_id = {refused}"):
        results = engine.api.cancel(ids)
    assert [(r.id, r.ok) for r in results] == [(i, i != refused) for i in ids]
    assert results[2].outcome.startswith(DISK_FULL)
    assert [engine.job(i).state for i in ids] == ["cancelled"] * 2 + ["queued", "cancelled"]
    gate.touch()
    engine.wait_state(blocker, "succeeded")
    assert engine.wait_state(refused, {"succeeded", "failed"}).state == "succeeded"
    wait_for(lambda: marker.exists(), what="the job's output")
    assert marker.read_text() == "2\n"  # it ran once; the cancelled ones never
