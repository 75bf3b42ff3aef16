"""A step of the wall clock (NTP, `date -s`, a VM resumed from a snapshot) moves /proc/stat's
`btime` (the wall clock less the uptime, proc(5)), and with it the start psutil gives every
process. The engine named a job's wrapper by that start: measured with a real `date -s +2s`, an
engine started again after the step took the running job for one that had ended while it was
down, settled it "failed" and killed it.

Here the step is the kernel's own mechanism confined to the second engine: it runs in a mount
namespace of its own where /proc/stat is a copy of the real one with `btime` two seconds later
(what every process reads after `date -s +2s`), bind-mounted over it. The machine's clock is not
touched, so the tests beside this one are not disturbed. Root only (unshare(1), mount(8))."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from clock_step import (
    STEP_S,
    after_the_step,
    btime_seen_by,
    needs_namespaces,
    real_btime,
    refused,
    stepped_proc_stat,
)
from conftest import EngineHandle, Home, wait_for

pytestmark = needs_namespaces


def start_engine_after_the_step(home: Home, fake_stat: Path) -> None:
    """`gpudesk engine start` in a mount namespace whose /proc/stat is `fake_stat`: the engine
    it starts is its child, and sees what it sees."""
    argv = [*after_the_step(fake_stat), sys.executable, "-m", "gpudesk", "engine", "start"]
    argv += ["--backend", "none", "--slots", "2"]
    done = subprocess.run(
        argv, env={**os.environ, "GPUDESK_HOME": str(home.root)}, capture_output=True, text=True
    )
    if refused(done):
        pytest.skip(f"this host refuses the namespace or the mount: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr


def test_an_engine_started_after_a_clock_step_adopts_the_running_job(
    home: Home, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    engine = EngineHandle(home)
    engine.start()
    [job_id] = engine.submit(
        {
            "name": "steady",
            "command": ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; done"],
        }
    )
    engine.wait_state(job_id, "running")
    wrapper = engine.show(job_id).attempts[-1].pid
    assert wrapper
    engine.kill9()

    start_engine_after_the_step(home, stepped_proc_stat(tmp_path))
    engine = EngineHandle(home)
    pid = engine.pid
    assert pid is not None
    # the engine that decides reads the stepped btime: the test is what it says it is
    assert " /proc/stat " in Path(f"/proc/{pid}/mountinfo").read_text()
    assert btime_seen_by(pid) in (None, real_btime() + STEP_S)

    # adopted: still running, its wrapper alive, not settled as ended while the engine was down
    assert engine.job(job_id).state == "running"
    assert Path(f"/proc/{wrapper}").exists()
    release.touch()
    done = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=30)
    assert (done.state, done.attempts) == ("succeeded", 1), engine.show(job_id)
    states = [e.state for e in engine.show(job_id).events if e.state]
    assert states == ["queued", "running", "succeeded"]
    wait_for(lambda: not Path(f"/proc/{wrapper}").exists(), 10.0, what="the wrapper to end")
