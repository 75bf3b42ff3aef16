"""A job's processes cannot escape it: a daemon it starts (setsid, a double fork) dies with the
job's end and with a cancel, where cgroup v2 is writable; elsewhere `gpudesk show` says that only
the process group holds the job."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import EngineHandle, Run, wait_for

from gpudesk.hw import containment
from gpudesk.paths import Home


def home_cgroups(home: Home) -> Path | None:
    mount = containment.v2_mount()
    return containment.home_folder(mount, home.root) if mount else None


@pytest.fixture
def cgroup_engine(home: Home) -> Iterator[EngineHandle]:
    """An engine whose attempts get cgroups; skips where this host cannot give them."""
    probe = containment.Containment.probe(home.root)
    probe.close()  # it holds the home's folder: the engine's to hold
    if probe.base is None:
        pytest.skip(f"no writable cgroup v2 here: {probe.reason}")
    engine = EngineHandle(home)
    engine.start()
    yield engine  # `home` stops it and removes what is left of its cgroups
    engine.client.close()


def escaping_script(pids: Path, then: str) -> str:
    """Start a setsid'd daemon and a double-forked one, write their pids, then `then`."""
    return (
        f"setsid sh -c 'echo $$ >> {pids}; exec sleep 300' < /dev/null > /dev/null 2>&1 & "
        f"( sh -c 'echo $$ >> {pids}; exec sleep 300' < /dev/null > /dev/null 2>&1 & ) ; "
        # `cat`, not `wc -l < file`: before the file exists the redirection fails, `[ "" -lt 2 ]`
        # is an error, and the loop would end with the daemons not yet started
        f'while [ "$(cat {pids} 2>/dev/null | wc -l)" -lt 2 ]; do sleep 0.02; done; '
        f"{then}"
    )


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def daemon_pids(tmp_path: Path) -> Iterator[Path]:
    """Where the daemons write their pids; whatever survives a failed test is killed after."""
    pids = tmp_path / "daemons"
    yield pids
    if pids.exists():
        for pid in (int(p) for p in pids.read_text().split()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def read_pids(pids: Path) -> list[int]:
    return [int(p) for p in pids.read_text().split()]


def test_daemons_of_a_job_die_with_its_end(
    cgroup_engine: EngineHandle, daemon_pids: Path, gpudesk: Run
) -> None:
    engine = cgroup_engine
    (job_id,) = engine.submit(
        {"name": "daemonizes", "command": ["sh", "-c", escaping_script(daemon_pids, "exit 0")]}
    )
    job = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"})
    assert (job.state, job.exit_code) == ("succeeded", 0)
    daemons = read_pids(daemon_pids)
    assert len(daemons) == 2
    # one left the job's session (setsid), the other its parent (double fork): both are gone
    wait_for(lambda: not any(alive(p) for p in daemons), 5.0, what="the job's daemons to be killed")
    cgroup = home_cgroups(engine.home) / f"job-{job_id}-1"
    assert not cgroup.exists(), "the attempt's cgroup outlived it"
    code, out, _ = gpudesk("show", str(job_id))
    assert code == 0
    assert f"in  cgroup {cgroup}" in out
    messages = [e.message for e in engine.show(job_id).events]
    assert "killed 2 leftover process(es) of attempt 1" in messages


def test_cancel_reaches_a_daemonized_grandchild(
    cgroup_engine: EngineHandle, daemon_pids: Path
) -> None:
    engine = cgroup_engine
    script = escaping_script(daemon_pids, "exec sleep 300")
    (job_id,) = engine.submit({"name": "cancelled", "command": ["sh", "-c", script]})
    wait_for(
        lambda: daemon_pids.exists() and len(read_pids(daemon_pids)) == 2,
        what="the daemons to start",
    )
    daemons = read_pids(daemon_pids)
    assert engine.client.request("cancel", jobs=[job_id], grace=2)["results"][0]["outcome"] == (
        "stopping"
    )
    job = engine.wait_state(job_id, "cancelled")
    assert job.attempts == 1
    wait_for(lambda: not any(alive(p) for p in daemons), 5.0, what="the job's daemons to be killed")
    assert not (home_cgroups(engine.home) / f"job-{job_id}-1").exists()


def test_daemons_of_a_job_that_ended_while_no_engine_ran_die_at_the_restart(
    cgroup_engine: EngineHandle, daemon_pids: Path, tmp_path: Path
) -> None:
    engine = cgroup_engine
    gate = tmp_path / "gate"
    then = f"while [ ! -e {gate} ]; do sleep 0.02; done; exit 0"
    (job_id,) = engine.submit(
        {"name": "outlived", "command": ["sh", "-c", escaping_script(daemon_pids, then)]}
    )
    wait_for(
        lambda: daemon_pids.exists() and len(read_pids(daemon_pids)) == 2,
        what="the daemons to start",
    )
    daemons = read_pids(daemon_pids)
    engine.kill9()
    gate.touch()
    wait_for(
        lambda: (engine.home.attempt_dir(job_id, 1) / "exit.json").exists(),
        what="the job to end while no engine runs",
    )
    assert all(alive(p) for p in daemons)
    engine.start()
    job = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"})
    assert (job.state, job.exit_code) == ("succeeded", 0)
    wait_for(lambda: not any(alive(p) for p in daemons), 5.0, what="the job's daemons to be killed")
    assert not (home_cgroups(engine.home) / f"job-{job_id}-1").exists()


def test_without_cgroups_show_says_process_group_only(
    home: Home, monkeypatch: pytest.MonkeyPatch, gpudesk: Run
) -> None:
    monkeypatch.setenv(containment.SWITCH_ENV, "off")
    engine = EngineHandle(home)
    engine.start()
    try:
        (job_id,) = engine.submit({"name": "plain", "command": ["true"]})
        engine.wait_state(job_id, "succeeded")
        code, out, _ = gpudesk("show", str(job_id))
        assert code == 0
        assert "in  process group only: cgroups turned off by GPUDESK_CGROUP=off" in out
        attempt = engine.show(job_id).attempts[0]
        assert attempt.containment.startswith("process group only:")
    finally:
        engine.client.close()
