"""A state folder removed (`rm -rf ~/.local/state/gpudesk`) or moved away under a running engine.
Its jobs run on, so the engine does too: it puts back its lock, socket, database (from its open
copy) and its running attempts' folders, and the next command reaches it. An engine started
before that (a command, in the moment between) neither starts beside it nor kills its jobs as
leftovers (hw/containment's hold, where attempts get cgroups); the command waits for the engine
that runs the home instead. Before: the second engine started afresh and killed the first's
running job ("killed 3 leftover process(es)")."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_escaped_processes import alive, home_cgroups
from test_store_damage import GPUDESK, cli, job_names

from gpudesk.hw import containment


def gated_job(engine: EngineHandle, gate: Path) -> int:
    """A job whose command runs (its wrapper has read its folder) until `gate` exists."""
    started = gate.with_name("started")
    script = f"touch {started}; while [ ! -e {gate} ]; do sleep 0.05; done; echo done"
    (job_id,) = engine.submit({"name": "long", "command": ["sh", "-c", script]})
    wait_for(started.exists, 20.0, what="the job's command to start")
    return job_id


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The engine stopped (SIGSTOP) meanwhile: it can put nothing back until it goes on."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("how", ["removed", "moved away"])
def test_a_state_folder_gone_under_the_engine_is_put_back_and_its_job_runs_on(
    engine: EngineHandle, tmp_path: Path, how: str
) -> None:
    gate = tmp_path / "gate"
    running = gated_job(engine, gate)
    pid = engine.pid
    assert pid is not None
    with stopped(pid):
        if how == "removed":
            shutil.rmtree(engine.home.root)
        else:
            engine.home.root.rename(tmp_path / "moved")
    wait_for(engine.home.db.exists, 10.0, what="the database put back")
    after = cli("submit", "--name", "after", "--", "echo", "after")
    assert after.returncode == 0, after.stderr
    assert engine.pid == pid  # the same engine: none started beside it
    gate.touch()
    assert engine.wait_state(running, "succeeded").exit_code == 0  # outcome recorded
    said = " ".join(engine.home.engine_log.read_text().split())
    assert f"the state folder {engine.home.root} went while the engine ran: put back" in said
    assert "what this log and 1 running job(s)' logs held is lost" in said
    engine.stop()
    assert job_names(engine.home.db) == ["long", "after"]  # nothing lost


def test_an_engine_started_meanwhile_neither_starts_nor_kills_the_jobs(
    engine: EngineHandle, tmp_path: Path
) -> None:
    folder = home_cgroups(engine.home)
    if folder is None or not folder.is_dir():
        pytest.skip("attempts get no cgroup here (no writable cgroup v2): no job is swept")
    gate = tmp_path / "gate"
    running = gated_job(engine, gate)
    pid = engine.pid
    assert pid is not None
    wait_for(lambda: containment.members(folder / f"job-{running}-1"), 10.0, what="its cgroup")
    with stopped(pid):
        shutil.rmtree(engine.home.root)
        second = subprocess.run(
            [sys.executable, "-m", "gpudesk.engine.daemon", "--home", str(engine.home.root)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 3, second.stderr
        said = " ".join(second.stderr.split())
        assert f"another engine (pid {pid}) runs this home's jobs" in said, said
        assert f"`kill {pid}`" in said and "Traceback" not in said
        assert not engine.home.db.exists()  # none made, to be taken for a backup put back
        assert containment.members(folder / f"job-{running}-1")  # not swept: it ends below
        # a command now starts an engine, which says the same; the command waits for the one
        # that runs the home, which answers once it goes on (below)
        waiting = subprocess.Popen(
            [*GPUDESK, "submit", "--name", "after", "--", "true"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(
            lambda: (
                engine.home.engine_log.exists()
                and "another engine (pid" in engine.home.engine_log.read_text()
            ),
            30.0,
            what="the command's engine to refuse",
        )
        refused = int(engine.home.lock.read_text())  # its pid, written as it took the new lock
        wait_for(lambda: not alive(refused), 30.0, what="the command's engine to exit")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert "submitted job 2" in out
    assert engine.pid == pid
    gate.touch()
    assert engine.wait_state(running, "succeeded").exit_code == 0
