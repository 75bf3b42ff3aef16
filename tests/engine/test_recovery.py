"""Killing the engine never loses or duplicates a job; cancelling never leaves a process behind."""

from __future__ import annotations

import collections
import signal
import sqlite3
import time
from pathlib import Path

import psutil
from conftest import EngineHandle, processes_in_group, wait_for

from gpudesk.api.models import ActionOutcome
from gpudesk.core.station import StationConfig
from gpudesk.hw import boottime, process_start


def started_marker(ran: Path, tag: str) -> str:
    """Shell that records every time a job's process really starts."""
    return f"echo {tag} >> {ran};"


def test_sigkill_engine_while_jobs_run_then_restart(engine: EngineHandle, tmp_path: Path) -> None:
    engine.api.configure(StationConfig(backend="none", slots=4), ["backend", "slots"])
    ran = tmp_path / "ran"
    release = tmp_path / "release"
    wait_release = f"while [ ! -e {release} ]; do sleep 0.02; done;"
    specs = {
        # end while the engine is dead
        "ok-while-down": f"{wait_release} exit 0",
        "fail-while-down": f"{wait_release} exit 3",
        "killed-while-down": f"{wait_release} kill -KILL $$",
        # still running when the new engine starts: re-adopted
        "outlives": f"{wait_release} sleep 1.5; exit 0",
        # queued (all 4 slots busy) while the engine dies: must run once, after the restart
        "queued": "exit 0",
    }
    ids = engine.submit(
        *(
            {"name": name, "command": ["sh", "-c", started_marker(ran, name) + s]}
            for name, s in specs.items()
        )
    )
    by_name = dict(zip(specs, ids, strict=True))
    wait_for(
        lambda: len(ran.read_text().split()) == 4 if ran.exists() else False,
        what="the four slot jobs to start",
    )

    engine.kill9()
    release.touch()
    # let the first three finish while no engine watches them
    wait_for(
        lambda: all(
            (engine.home.attempt_dir(by_name[n], 1) / "exit.json").exists()
            for n in ("ok-while-down", "fail-while-down")
        ),
        what="jobs to end",
    )
    time.sleep(0.2)
    assert engine.pid is None

    engine.start(slots=4)
    jobs = {j.name: j for j in engine.wait_all_done(ids)}

    assert (jobs["ok-while-down"].state, jobs["ok-while-down"].exit_code) == ("succeeded", 0)
    assert (jobs["fail-while-down"].state, jobs["fail-while-down"].exit_code) == ("failed", 3)
    assert jobs["killed-while-down"].state == "failed"
    assert jobs["killed-while-down"].exit_code == 137
    assert (jobs["outlives"].state, jobs["outlives"].exit_code) == ("succeeded", 0)
    assert (jobs["queued"].state, jobs["queued"].exit_code) == ("succeeded", 0)

    # every job ran exactly once and has exactly one attempt and one final event
    assert collections.Counter(ran.read_text().split()) == {name: 1 for name in specs}
    db = sqlite3.connect(engine.home.db)
    try:
        for name, job_id in by_name.items():
            attempts = db.execute(
                "SELECT COUNT(*) FROM attempts WHERE job_id = ?", (job_id,)
            ).fetchone()[0]
            finals = db.execute(
                "SELECT COUNT(*) FROM events WHERE job_id = ? AND state IN "
                "('succeeded', 'failed', 'cancelled')",
                (job_id,),
            ).fetchone()[0]
            assert (name, attempts, finals) == (name, 1, 1)
        live = db.execute("SELECT COUNT(*) FROM attempts WHERE state IN ('launching', 'running')")
        assert live.fetchone()[0] == 0
    finally:
        db.close()


def test_a_second_restart_does_not_settle_anything_twice(
    engine: EngineHandle, tmp_path: Path
) -> None:
    (job_id,) = engine.submit({"name": "long", "command": ["sleep", "1"]})
    engine.wait_state(job_id, "running")
    engine.kill9()
    engine.start()
    engine.kill9()
    engine.start()
    job = engine.wait_state(job_id, "succeeded")
    assert job.attempts == 1
    states = [e.state for e in engine.show(job_id).events if e.state]
    assert states == ["queued", "running", "succeeded"]


def test_cancel_kills_the_whole_process_tree(engine: EngineHandle, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    # three children, one of which ignores SIGTERM and must be SIGKILLed after the grace period
    script = (
        "sleep 300 & sleep 300 & "
        "sh -c 'trap \"\" TERM; while true; do sleep 0.05; done' & "
        f"touch {ready}; wait"
    )
    (job_id,) = engine.submit({"name": "tree", "command": ["sh", "-c", script]})
    wait_for(ready.exists, what="the job's children to start")
    pgid = engine.show(job_id).attempts[0].pid
    assert len(processes_in_group(pgid)) >= 5  # wrapper, sh, 2 sleeps, the stubborn sh (+ sleep)

    result = engine.api.cancel([job_id], grace=0.5)
    assert result == [ActionOutcome(id=job_id, name="tree", outcome="stopping", ok=True)]
    job = engine.wait_state(job_id, "cancelled")
    assert job.attempts == 1
    wait_for(lambda: not processes_in_group(pgid), 5.0, what="the process group to be empty")


def test_cancel_queued_job_and_already_finished_job(engine: EngineHandle, tmp_path: Path) -> None:
    engine.api.configure(StationConfig(backend="none", slots=1), ["backend", "slots"])
    gate = tmp_path / "gate"
    blocker, queued = engine.submit(
        {"name": "blocker", "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done"]},
        {"name": "queued", "command": ["sh", "-c", f"touch {tmp_path / 'must-not-run'}"]},
    )
    engine.wait_state(blocker, "running")
    outcomes = engine.api.cancel(["queued"])
    assert outcomes[0].outcome == "cancelled"
    gate.touch()
    engine.wait_state(blocker, "succeeded")
    assert engine.job(queued).state == "cancelled"
    assert not (tmp_path / "must-not-run").exists()
    again = engine.api.cancel([blocker])
    assert again[0].outcome == "already succeeded"


def test_cancel_survives_an_engine_restart(engine: EngineHandle, tmp_path: Path) -> None:
    script = "trap '' TERM; while true; do sleep 0.05; done"
    (job_id,) = engine.submit({"name": "stubborn", "command": ["sh", "-c", script]})
    engine.wait_state(job_id, "running")
    pgid = engine.show(job_id).attempts[0].pid
    engine.api.cancel([job_id], grace=2)
    engine.kill9()  # dies before its SIGKILL deadline
    engine.start()  # must take the cancel over: SIGTERM again, SIGKILL at the same deadline
    job = engine.wait_state(job_id, "cancelled", timeout=10)
    assert job.attempts == 1
    wait_for(lambda: not processes_in_group(pgid), 5.0, what="the process group to be empty")


def test_engine_stop_leaves_jobs_running(engine: EngineHandle, tmp_path: Path) -> None:
    (job_id,) = engine.submit({"name": "survivor", "command": ["sleep", "0.8"]})
    engine.wait_state(job_id, "running")
    pgid = engine.show(job_id).attempts[0].pid
    engine.stop()
    assert processes_in_group(pgid), "stopping the engine must not stop its jobs"
    engine.start()
    assert engine.wait_state(job_id, "succeeded").exit_code == 0


def test_sigterm_to_the_engine_is_a_clean_stop(engine: EngineHandle) -> None:
    pid = engine.pid
    assert pid
    import os

    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: engine.pid is None, 5.0, what="the engine to exit")
    assert not engine.home.control_socket.exists()
    # said by the loop, not in the handler (a log write there can land inside another)
    assert (
        "engine stopping on SIGTERM; 0 attempt(s) keep running"
        in engine.home.engine_log.read_text()
    )


def test_a_start_after_a_killed_engine_says_so_and_one_after_a_stop_does_not(
    engine: EngineHandle,
) -> None:
    """The log said nothing of an engine that ended without stopping (SIGKILL, the OOM killer,
    a power loss): the next one now warns, naming its pid, beside what it took up; a start
    after a clean stop says nothing of the kind."""
    killed = engine.pid
    engine.kill9()
    engine.start()
    warned = f"WARNING gpudesk.engine: the last engine (pid {killed}) ended without stopping"
    assert warned in engine.home.engine_log.read_text()
    engine.stop()
    engine.start()
    assert engine.home.engine_log.read_text().count("ended without stopping") == 1


def test_the_store_names_a_wrapper_by_its_start_from_boot_and_a_restart_adopts_it(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """The wrapper's start is kept as the boot's tick (gpudesk.hw.process_start), which no
    clock step moves; a store from an earlier gpudesk, with create_time() in its place, is read
    too: its running job is adopted, not settled, by the engine after the upgrade."""
    release = tmp_path / "release"
    ids = engine.submit(
        *(
            {
                "name": name,
                "command": ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.02; done"],
            }
            for name in ("now", "older")
        )
    )
    for job_id in ids:
        engine.wait_state(job_id, "running")
    engine.kill9()
    db = sqlite3.connect(engine.home.db)
    try:
        rows = db.execute(
            "SELECT job_id, pid, pid_started, boot_id FROM attempts ORDER BY job_id"
        ).fetchall()
        for _job, pid, started, boot in rows:
            assert (started, boot) == (process_start.started(pid), boottime.boot_id())
        older_pid = rows[1][1]
        with db:
            db.execute(
                "UPDATE attempts SET pid_started = ?, boot_id = NULL WHERE job_id = ?",
                (psutil.Process(older_pid).create_time(), ids[1]),
            )
    finally:
        db.close()
    engine.start()
    release.touch()
    for job_id in ids:
        job = engine.wait_state(job_id, "succeeded")
        assert job.attempts == 1
        assert [e.state for e in engine.show(job_id).events if e.state] == [
            "queued",
            "running",
            "succeeded",
        ]
