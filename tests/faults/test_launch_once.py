"""Launching is exactly once across an engine crash.

The window: the engine has started an attempt's wrapper but dies before recording its pid. The
fault point GPUDESK_FAULT=after-spawn (gpudesk/engine/faults.py, test only) makes it deterministic:
the engine freezes the wrapper it just started (SIGSTOP, before the wrapper wrote anything: a slow
start on a loaded machine) and exits at once. The next engine must find that wrapper by its launch
lock and adopt it, never start the attempt again; and where the wrapper died, start it again only
if the command never ran.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import EngineHandle, wait_for
from store_refusal import store_refusing

from gpudesk.engine import faults
from gpudesk.paths import Home


def wrapper_of(home: Home, job_id: int, number: int) -> psutil.Process:
    """The wrapper process of an attempt, found by its command line (the engine that started it
    is dead and never recorded it)."""
    attempt_dir = str(home.attempt_dir(job_id, number))

    def find() -> psutil.Process | None:
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if any(arg.endswith("wrapper.py") for arg in cmdline) and attempt_dir in cmdline:
                return proc
        return None

    return wait_for(find, 5.0, what=f"the wrapper of attempt {number} of job {job_id}")


def store_attempts(home: Home, job_id: int) -> list[tuple[int, str, int | None]]:
    db = sqlite3.connect(home.db)
    try:
        rows = db.execute(
            "SELECT number, state, pid FROM attempts WHERE job_id = ? ORDER BY number", (job_id,)
        )
        return [(int(n), str(s), p) for n, s, p in rows]
    finally:
        db.close()


@pytest.fixture
def crashed(home: Home, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict]:
    """An engine that started one job's wrapper (frozen) and died before recording its pid; the
    job's command counts its runs in `ran` and waits for `gate`."""
    ran, gate = tmp_path / "ran", tmp_path / "gate"
    engine = EngineHandle(home)
    monkeypatch.setenv(faults.FAULT_ENV, "after-spawn")
    engine.start()
    monkeypatch.delenv(faults.FAULT_ENV)  # the next engine is an ordinary one
    script = f"echo run >> {ran}; while [ ! -e {gate} ]; do sleep 0.02; done"
    (job_id,) = engine.submit(
        {"name": "once", "command": ["sh", "-c", script]}, env=dict(os.environ)
    )
    wait_for(lambda: engine.pid is None, 10.0, what="the engine to die at the fault point")
    wrapper = wrapper_of(home, job_id, 1)
    # SIGSTOP is sent, not yet taken: a loaded machine may not have run the wrapper since
    wait_for(lambda: wrapper.status() == psutil.STATUS_STOPPED, 10.0, what="the frozen wrapper")
    # the window, as the store shows it: an attempt in 'launching' with no pid
    assert store_attempts(home, job_id) == [(1, "launching", None)]
    assert not ran.exists()
    try:
        yield {"engine": engine, "job": job_id, "wrapper": wrapper, "ran": ran, "gate": gate}
    finally:
        engine.client.close()
        if wrapper.is_running():
            os.killpg(wrapper.pid, signal.SIGKILL)
            os.kill(wrapper.pid, signal.SIGCONT)


def runs(ran: Path) -> int:
    return len(ran.read_text().split()) if ran.exists() else 0


def test_a_wrapper_started_by_a_dead_engine_is_adopted_not_started_again(crashed: dict) -> None:
    engine, job_id, wrapper, ran = (crashed[k] for k in ("engine", "job", "wrapper", "ran"))
    engine.start()
    # The new engine has recovered; the frozen wrapper now goes on as a slow one would.
    os.kill(wrapper.pid, signal.SIGCONT)
    wait_for(lambda: runs(ran) >= 1, 10.0, what="the command to run")
    assert engine.job(job_id).state == "running"
    crashed["gate"].touch()
    job = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"})
    time.sleep(0.5)  # a second attempt, had one been started, would have counted by now
    assert runs(ran) == 1, "the command ran twice"
    assert (job.state, job.exit_code, job.attempts) == ("succeeded", 0, 1)
    assert store_attempts(engine.home, job_id) == [(1, "exited", wrapper.pid)]
    states = [e.state for e in engine.show(job_id).events if e.state]
    assert states == ["queued", "running", "succeeded"]


def test_a_wrapper_that_died_before_starting_the_command_is_started_again(crashed: dict) -> None:
    engine, job_id, wrapper, ran = (crashed[k] for k in ("engine", "job", "wrapper", "ran"))
    wrapper.kill()  # frozen before it did anything: the command never ran
    wait_for(lambda: not wrapper.is_running(), 5.0, what="the wrapper to die")
    crashed["gate"].touch()
    engine.start()
    job = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"})
    assert runs(ran) == 1
    assert (job.state, job.exit_code, job.attempts) == ("succeeded", 0, 2)
    first, second = store_attempts(engine.home, job_id)
    assert first[:2] == (1, "launch_failed")
    assert second[:2] == (2, "exited")


def test_a_wrapper_that_died_after_starting_the_command_is_not_started_again(
    crashed: dict,
) -> None:
    engine, job_id, wrapper, ran = (crashed[k] for k in ("engine", "job", "wrapper", "ran"))
    os.kill(wrapper.pid, signal.SIGCONT)
    wait_for(lambda: runs(ran) == 1, 10.0, what="the command to run")
    command = [p for p in wrapper.children() if p.is_running()]
    wrapper.kill()  # the wrapper dies; its command runs on, unwatched
    wait_for(lambda: not wrapper.is_running(), 5.0, what="the wrapper to die")
    engine.start()
    job = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"})
    crashed["gate"].touch()
    time.sleep(0.5)
    assert runs(ran) == 1, "the command was started again"
    assert job.state == "failed"
    assert job.attempts == 1
    messages = " | ".join(e.message for e in engine.show(job_id).events)
    assert "its wrapper died after starting the command" in messages
    # what the dead wrapper left running was killed when the attempt settled
    wait_for(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in command),
        5.0,
        what="the orphaned command to be killed",
    )


def test_a_wrapper_that_died_after_starting_the_command_is_settled_when_its_event_is_refused(
    crashed: dict,
) -> None:
    """The same, with the store refusing the "cleanup" event recovery writes about it (a real
    SQLite trigger). The event is best effort; the attempt's end is not: it is settled, failed,
    once. (Before, the refused event kept it from being settled, and the job was shown running
    until the next engine start.)"""
    engine, job_id, wrapper, ran = (crashed[k] for k in ("engine", "job", "wrapper", "ran"))
    os.kill(wrapper.pid, signal.SIGCONT)
    wait_for(lambda: runs(ran) == 1, 10.0, what="the command to run")
    wrapper.kill()
    wait_for(lambda: not wrapper.is_running(), 5.0, what="the wrapper to die")
    refused = "BEFORE INSERT ON events WHEN NEW.kind = 'cleanup'"
    with store_refusing(engine.home.db, refused, "the store refuses the event"):
        engine.start()
        job = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"})
    crashed["gate"].touch()
    assert (job.state, job.attempts) == ("failed", 1)
    assert runs(ran) == 1, "the command was started again"
