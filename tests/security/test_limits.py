"""No member can out-queue, out-rank or outlast the others (issue 36, findings 6, 7, 8, 10).

6: `[station] max_queued_per_user` holds on every path into the queue, a requeue included.
7: only an admin raises a job's priority above 0; a member may lower hers.
8: each job's cgroup has pids.max and memory.max ([station] job_pids_max, job_memory_max_gb).
10: a job's time limit runs on CLOCK_BOOTTIME: a stepped wall clock neither ends it early nor
lets it run over.
The station tests run a real system engine with real users (root only; station_fixture says
why it skips). The clock test steps the wall clock of the engine's process tree alone, through
wallclock_shim.c (LD_PRELOAD, built here with the C compiler; it skips without one): the shim
adds an offset, read from a file at every call, to what the C library's wall-clock calls
return, which is what a step of the system clock does to them, while CLOCK_MONOTONIC and
CLOCK_BOOTTIME go on untouched, as they do in a real step. The system clock is never stepped
(other tests run beside this one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineHandle, Home
from station_fixture import Station, make_station

from gpudesk.hw import containment


@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


@pytest.fixture
def sim_station() -> Iterator[Station]:
    yield from make_station("sim:a100-40gbx1")


def _queued(station: Station, role: str) -> list[int]:
    uid = station.users[role].uid
    jobs = station.ok(None, "jobs", states=["queued"])["jobs"]
    return [job["id"] for job in jobs if job["uid"] == uid]


def test_a_requeue_obeys_max_queued_per_user_as_a_submit_does(station: Station) -> None:
    station.ok("admin", "configure", station={"max_queued_per_user": 2})
    quick = {"command": ["true"], "gpus": 0, "workdir": "/"}
    done = [station.submit("ada", {"name": f"done-{i}", **quick}) for i in range(3)]
    for job_id in done:
        assert station.wait_state(job_id, "succeeded", "failed")["state"] == "succeeded"
    # two of hers wait (on a job that runs for a while): she is at her limit of 2
    long = station.submit("ada", {"name": "long", "command": ["sleep", "60"], "gpus": 0})
    station.wait_state(long, "running")
    waiting = [
        station.submit("ada", {"name": f"after-{i}", **quick, "after": [long]}) for i in range(2)
    ]
    refused = station.call("ada", "submit", jobs=[{"name": "third", **quick}])
    assert refused["ok"] is False and "max_queued_per_user" in refused["error"]["message"]
    # requeueing her finished jobs would put her past it: refused, each naming the limit
    results = station.ok("ada", "requeue", jobs=done)["results"]
    assert [r["ok"] for r in results] == [False, False, False], results
    for result in results:
        assert "max_queued_per_user" in result["outcome"], result
        assert "allows 2 per user" in result["outcome"], result
        assert "was not requeued" in result["outcome"], result
    # the limit is the owner's, whoever asks
    by_admin = station.ok("admin", "requeue", jobs=[done[0]])["results"][0]
    assert by_admin["ok"] is False and "max_queued_per_user" in by_admin["outcome"]
    assert sorted(_queued(station, "ada")) == sorted(waiting)
    # held jobs count already: holding and releasing one changes nothing
    assert station.ok("ada", "hold", jobs=[waiting[0]])["results"][0]["ok"]
    assert station.ok("ada", "release", jobs=[waiting[0]])["results"][0]["outcome"] == "released"
    # once one leaves the queue, one requeue fits again, and only one
    assert station.ok("ada", "cancel", jobs=[waiting[1]], grace=0)["results"][0]["ok"]
    results = station.ok("ada", "requeue", jobs=done[:2])["results"]
    assert [r["ok"] for r in results] == [True, False], results
    assert len(_queued(station, "ada")) <= 2
    station.ok("ada", "cancel", jobs=[long, *waiting, done[0]], grace=0)


def test_only_an_admin_raises_a_priority_and_fair_share_then_holds(sim_station: Station) -> None:
    st = sim_station
    whole_gpu = {"gpus": 1, "memory_gb": 30, "sm_pct": 90, "workdir": "/"}  # one at a time
    # ada's first job holds the GPU until both users' next jobs wait (a flag file, not a sleep:
    # on a loaded machine the steps below can take longer than any fixed run)
    release = Path(tempfile.gettempdir()) / f"gdst-release-{os.getpid()}-{time.monotonic_ns()}"
    hold = f"while [ ! -e {release} ]; do sleep 0.05; done"
    warm = st.submit("ada", {"name": "ada-warm", "command": ["sh", "-c", hold], **whole_gpu})
    st.wait_state(warm, "running")
    # ada, the heavier user, may not put her jobs first by priority: not at submit...
    jump = {"name": "ada-jump", "command": ["sleep", "1"], "priority": 1000, **whole_gpu}
    refused = st.call("ada", "submit", jobs=[jump])
    assert refused["ok"] is False, refused
    message = refused["error"]["message"]
    assert st.admin_group in message and "priority" in message
    assert "Nothing was submitted" in message
    ada_next = st.submit("ada", {"name": "ada-next", "command": ["sleep", "1"], **whole_gpu})
    # ...nor afterwards, by a value or by a step up past 0
    for args in ({"priority": 1000}, {"priority": 1}, {"delta": 5}):
        result = st.ok("ada", "priority", jobs=[ada_next], **args)["results"][0]
        assert result["ok"] is False and st.admin_group in result["outcome"], (args, result)
    assert st.job(ada_next)["spec"]["priority"] == 0
    # lowering is hers to do, and so is raising it back to 0
    assert st.ok("ada", "priority", jobs=[ada_next], priority=-5)["results"][0]["ok"]
    assert st.ok("ada", "priority", jobs=[ada_next], delta=5)["results"][0]["ok"]
    assert st.job(ada_next)["spec"]["priority"] == 0
    bob_first = st.submit("bob", {"name": "bob-first", "command": ["sleep", "1"], **whole_gpu})
    # an admin may raise one (here bob's own job, raised and put back)
    raised = st.ok("admin", "priority", jobs=[bob_first], priority=10)["results"][0]
    assert raised["ok"] and st.job(bob_first)["spec"]["priority"] == 10
    assert st.ok("admin", "priority", jobs=[bob_first], priority=0)["results"][0]["ok"]
    release.touch()
    try:
        bob = st.wait_state(bob_first, "succeeded", timeout=60)
    finally:
        release.unlink()
    ada = st.wait_state(ada_next, "succeeded", timeout=60)
    # at equal priority fair share decides: bob, who had used less, went first
    assert bob["started_at"] < ada["started_at"]


@pytest.fixture
def wallclock_shim() -> Iterator[Path]:
    """wallclock_shim.c built into a shared object (removed afterwards)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build tests/security/wallclock_shim.c with")
    folder = Path(tempfile.mkdtemp(prefix="gdclock-"))
    try:
        shim = folder / "wallclock_shim.so"
        source = Path(__file__).with_name("wallclock_shim.c")
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(shim), str(source), "-ldl"],
            check=True,
            capture_output=True,
        )
        yield shim
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def clock_offset(home: Home, wallclock_shim: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file of the wall clock's offset in seconds, "0" to begin with: the processes
    started from here on (the engine, and what it starts) have the shim preloaded, and read
    a wall clock that many seconds off the real one. A test that wants real time again in its
    own subprocesses deletes LD_PRELOAD."""
    offset = home.root.parent / "wall-clock-offset"
    home.root.parent.mkdir(parents=True, exist_ok=True)
    offset.write_text("0")
    monkeypatch.setenv("LD_PRELOAD", str(wallclock_shim))
    monkeypatch.setenv("WALLCLOCK_SHIM_OFFSET_FILE", str(offset))
    return offset


def _ended_across_a_step(
    engine: EngineHandle, clock_offset: Path, job: dict[str, Any], offset_s: int
) -> dict[str, Any]:
    """`job` submitted; once it runs, the wall clock steps to `offset_s` off the real one; the
    job as it ended."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    [job_id] = engine.submit(job, env=env)
    engine.wait_state(job_id, "running")
    clock_offset.write_text(str(offset_s))
    return engine.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=30)


def test_a_stepped_wall_clock_neither_ends_a_job_early_nor_lets_it_overrun(
    home: Home, clock_offset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = EngineHandle(home)
    engine.start()
    monkeypatch.delenv("LD_PRELOAD")  # the test's own subprocesses from here on: real time
    # +2 h while a job with a minute's limit runs for 3 s: it is not "timed out"
    short = {"name": "step-forward", "command": ["sleep", "3"], "time_limit_s": 60}
    done = _ended_across_a_step(engine, clock_offset, short, 7200)
    assert done.state == "succeeded", done
    # -2 h while a job with a 3 s limit runs: it is stopped at its limit all the same
    long = {"name": "step-back", "command": ["sleep", "120"], "time_limit_s": 3}
    done = _ended_across_a_step(engine, clock_offset, long, 0)
    assert done.state == "failed", done
    assert done.reason.startswith("timed out: ran past its time limit of 3 s"), done


def test_a_start_from_another_boot_is_never_compared_with_this_ones_clock() -> None:
    from gpudesk.hw import boottime

    here = boottime.stamp()
    assert here is not None  # Linux says its boot id in /proc
    assert boottime.start_in_this_boot(here.boot_id, here.at) == here.at
    assert boottime.start_in_this_boot("another-boot", here.at) is None
    assert boottime.start_in_this_boot(None, None) is None


FORKER = """
import os, signal, sys, time
children = []
try:
    for _ in range(500):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    print("forked all 500", flush=True)
except BlockingIOError as exc:
    print(f"fork refused after {len(children)}: {exc.strerror}", flush=True)
for pid in children:
    os.kill(pid, signal.SIGKILL)
"""


@pytest.fixture
def limited_engine(home: Home) -> Iterator[EngineHandle]:
    """An engine whose attempts get cgroups with pids.max 64 and memory.max 1 GiB; skips where
    this host's cgroup v2 hierarchy cannot hold them."""
    probe = containment.Containment.probe(home.root)
    if probe.base is None:
        pytest.skip(f"no writable cgroup v2 here: {probe.reason}")
    offered = (probe.base / "cgroup.controllers").read_text().split()
    probe.close()
    if not {"pids", "memory"} <= set(offered):
        pytest.skip(
            "this host's cgroup v2 hierarchy does not offer the pids and memory controllers "
            f"(it offers {offered or 'none'}: a hybrid host keeps them in cgroup v1)"
        )
    engine = EngineHandle(home)
    engine.start(job_pids_max=64, job_memory_max_gb=1)
    yield engine  # `home` stops it and removes what is left of its cgroups
    engine.client.close()


def test_a_job_that_forks_without_end_is_stopped_at_pids_max(limited_engine: EngineHandle) -> None:
    engine = limited_engine
    [job_id] = engine.submit(
        {"name": "forker", "command": [sys.executable, "-c", FORKER + "time.sleep(30)"]}
    )
    engine.wait_state(job_id, "running")
    attempt = engine.show(job_id).attempts[0]
    assert "pids.max 64, memory.max 1.0 GiB" in (attempt.containment or ""), attempt
    cgroup = containment.home_folder(containment.v2_mount() or "", engine.home.root)
    cgroup = cgroup / f"job-{job_id}-1"
    assert (cgroup / "pids.max").read_text().strip() == "64"
    assert (cgroup / "memory.max").read_text().strip() == str(2**30)
    engine.client.request("cancel", jobs=[job_id], grace=0)
    done = engine.wait_state(job_id, {"cancelled", "failed", "succeeded"}, timeout=30)
    log = Path(done.log).read_text()
    assert "fork refused after" in log and "forked all" not in log, log
    refused_after = int(log.split("fork refused after ")[1].split(":")[0])
    assert refused_after < 64, log


def test_show_says_when_the_cgroup_cannot_hold_the_limits(home: Home) -> None:
    """Where attempts get a cgroup whose hierarchy lacks the controllers (a hybrid host), the
    containment line says which limit is missing and why, instead of implying one."""
    probe = containment.Containment.probe(home.root)
    if probe.base is None:
        pytest.skip(f"no writable cgroup v2 here: {probe.reason}")
    offered = set((probe.base / "cgroup.controllers").read_text().split())
    probe.close()
    engine = EngineHandle(home)
    engine.start(job_pids_max=64, job_memory_max_gb=1)
    try:
        [job_id] = engine.submit({"name": "plain", "command": ["true"]})
        engine.wait_state(job_id, "succeeded")
        line = engine.show(job_id).attempts[0].containment
        for limit, controller, value in (
            ("pids.max", "pids", "64"),
            ("memory.max", "memory", "1.0 GiB"),
        ):
            if controller in offered:
                assert f"{limit} {value}" in line, line
            else:
                assert f"no {limit}: the {controller} controller is not enabled" in line, line
    finally:
        engine.client.close()


def test_a_time_limit_survives_an_engine_restart_across_a_clock_step(
    home: Home, clock_offset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt's start on CLOCK_BOOTTIME is in the store: an engine restarted after a +2 h
    step of the wall clock re-adopts the job and lets it finish within its limit."""
    engine = EngineHandle(home)
    engine.start()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    [job_id] = engine.submit(
        {"name": "outlives-engine", "command": ["sleep", "4"], "time_limit_s": 60}, env=env
    )
    engine.wait_state(job_id, "running")
    engine.kill9()
    clock_offset.write_text("7200")
    engine = EngineHandle(home)
    engine.start()  # the shim still preloaded: this engine reads the stepped wall clock
    monkeypatch.delenv("LD_PRELOAD")
    done = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=30)
    assert done.state == "succeeded", done
