"""The real daemon: submissions, outcomes, retries, priorities, protocol abuse, single instance."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, module_engine, wait_for

from gpudesk.api.connection import Connection
from gpudesk.api.errors import EngineError
from gpudesk.core import protocol
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home


def sh(script: str, name: str = "job", **extra: object) -> dict:
    return {"name": name, "command": ["sh", "-c", script], **extra}


def test_jobs_end_in_the_state_their_exit_code_says(engine: EngineHandle) -> None:
    ok, bad, signalled = engine.submit(
        sh("echo out; echo err >&2", "ok"),
        sh("exit 7", "bad"),
        sh("kill -9 $$", "signalled"),
    )
    jobs = {j.id: j for j in engine.wait_all_done([ok, bad, signalled])}
    assert (jobs[ok].state, jobs[ok].exit_code) == ("succeeded", 0)
    assert (jobs[bad].state, jobs[bad].exit_code) == ("failed", 7)
    assert (jobs[signalled].state, jobs[signalled].exit_code) == ("failed", 137)
    assert "SIGKILL" in jobs[signalled].reason
    with open(jobs[ok].log) as fh:
        assert fh.read() == "out\nerr\n"
    events = [(e.state, e.message) for e in engine.show(bad).events]
    assert [s for s, _ in events] == ["queued", "running", "failed"]


def test_job_environment_and_workdir(engine: EngineHandle, tmp_path) -> None:
    (job_id,) = engine.submit(
        sh(
            'echo "$GPUDESK_JOB_ID|$GPUDESK_HOME|$CUDA_VISIBLE_DEVICES|$FOO|$(pwd)"',
            env={"FOO": "bar"},
            workdir=str(tmp_path),
        ),
        env={"PATH": os.environ["PATH"], "FOO": "overridden"},
    )
    job = engine.wait_state(job_id, "succeeded")
    with open(job.log) as fh:
        assert fh.read().strip() == f"{job_id}|{engine.home.root}||bar|{tmp_path}"


def test_retry_until_max_attempts(engine: EngineHandle, tmp_path) -> None:
    marker = tmp_path / "tried"
    (flaky,) = engine.submit(
        sh(f"[ -e {marker} ] || {{ touch {marker}; exit 1; }}", "flaky", max_attempts=3)
    )
    (hopeless,) = engine.submit(sh("exit 2", "hopeless", max_attempts=2))
    jobs = {j.id: j for j in engine.wait_all_done([flaky, hopeless])}
    assert (jobs[flaky].state, jobs[flaky].attempts) == ("succeeded", 2)
    assert (jobs[hopeless].state, jobs[hopeless].attempts) == ("failed", 2)
    attempts = engine.show(hopeless).attempts
    assert [a.exit_code for a in attempts] == [2, 2]
    assert attempts[0].log != attempts[1].log


def test_impossible_jobs_fail_with_a_reason(engine: EngineHandle, tmp_path) -> None:
    # (a job asking for GPUs the station lacks is refused at submission: test_telemetry_e2e)
    (tmp_path / "a-file").touch()
    os.mkfifo(tmp_path / "a-fifo")
    missing, no_python, bad_dir, a_file, a_fifo = engine.submit(
        {"name": "missing", "command": ["no-such-program-xyz"]},
        {"name": "no-python", "command": ["python-no-such-xyz", "-c", "pass"]},
        {"name": "bad-dir", "command": ["true"], "workdir": str(tmp_path / "nope")},
        {"name": "file-dir", "command": ["true"], "workdir": str(tmp_path / "a-file")},
        {"name": "fifo-dir", "command": ["true"], "workdir": str(tmp_path / "a-fifo")},
    )
    jobs = {j.id: j for j in engine.wait_all_done([missing, no_python, bad_dir, a_file, a_fifo])}
    assert jobs[missing].exit_code == jobs[no_python].exit_code == 127, jobs
    # a bare name: looked up on the PATH the job was submitted with, which its log gives
    where = "not on the job's PATH, the submitting shell's"
    assert jobs[missing].reason == f"command not found: no-such-program-xyz ({where})", jobs
    log = Path(jobs[missing].log or "").read_text()
    assert f"gpudesk: the job's PATH: {os.environ['PATH']}\n" in log, log
    # the usual miss: `python` from a shell whose virtual environment was not active
    assert jobs[no_python].reason.endswith("; was its virtual environment active?)"), jobs
    assert "does not exist" in jobs[bad_dir].reason
    assert f"{tmp_path / 'a-file'} is not a directory: it is a regular file" in jobs[a_file].reason
    assert f"{tmp_path / 'a-fifo'} is not a directory: it is a named pipe" in jobs[a_fifo].reason
    assert all(j.state == "failed" for j in jobs.values())


def test_jobs_that_fail_to_launch_free_their_places_for_the_queue(
    engine: EngineHandle, tmp_path
) -> None:
    """Two jobs whose working directory is missing take the station's 2 slots and fail at
    launch, in the same placement pass: the jobs queued behind them start at once. Before, the
    slots they freed asked for no new pass, and the jobs behind waited for the next event."""
    missing = str(tmp_path / "nope")
    ids = engine.submit(
        *({"name": f"bad-{k}", "command": ["true"], "workdir": missing} for k in range(2)),
        *({"name": f"good-{k}", "command": ["true"]} for k in range(2)),
    )
    jobs = engine.wait_all_done(ids, timeout=20.0)
    assert [j.state for j in jobs] == ["failed", "failed", "succeeded", "succeeded"], jobs


def test_priority_and_first_come_order(engine: EngineHandle, tmp_path) -> None:
    engine.client.request("configure", station={"backend": "none", "slots": 1})
    order = tmp_path / "order"
    gate = tmp_path / "gate"
    (blocker,) = engine.submit(sh(f"while [ ! -e {gate} ]; do sleep 0.02; done", "blocker"))
    engine.wait_state(blocker, "running")
    ids = engine.submit(
        sh(f"echo low1 >> {order}", "low1"),
        sh(f"echo low2 >> {order}", "low2"),
        sh(f"echo high >> {order}", "high", priority=5),
    )
    waiting = engine.show(ids[1]).waiting
    assert waiting == "waiting for a free CPU slot (1/1 busy, 2 queued ahead of it)"
    gate.touch()
    engine.wait_all_done([blocker, *ids])
    assert order.read_text().split() == ["high", "low1", "low2"]


def test_slots_bound_concurrency(engine: EngineHandle, tmp_path) -> None:
    engine.client.request("configure", station={"backend": "none", "slots": 2})
    log = tmp_path / "concurrency"
    script = f"echo start >> {log}; sleep 0.3; echo end >> {log}"
    ids = engine.submit(*(sh(script, f"j{i}") for i in range(5)))
    engine.wait_all_done(ids)
    running = peak = 0
    for line in log.read_text().split():
        running += 1 if line == "start" else -1
        peak = max(peak, running)
    assert peak == 2


def test_unknown_jobs_and_bad_arguments_get_error_replies(engine: EngineHandle) -> None:
    with pytest.raises(EngineError) as info:
        engine.client.request("show", job=999)
    assert info.value.code == "unknown_job"
    with pytest.raises(EngineError) as info:
        engine.client.request("submit", jobs=[{"name": "x", "command": []}])
    assert info.value.code == "invalid_args"
    assert "jobs[0].command" in str(info.value)
    with pytest.raises(EngineError) as info:
        engine.client.request("cancel", jobs=[1], grace=-1)
    assert info.value.code == "invalid_args"
    with pytest.raises(EngineError) as info:
        engine.client.request("jobs", states=["sleeping"])
    assert info.value.code == "invalid_args"
    with pytest.raises(EngineError) as info:
        engine.client.request("configure", station={"slots": 0})
    assert "station.slots" in str(info.value)


@pytest.fixture(scope="module")
def abused_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    """One engine for the hostile requests, each refused (none queues a job): each shows that
    the engine answers after its own, the same engine, so each need not start one of its own."""
    with module_engine(tmp_path_factory, "abused") as handle:
        yield handle


@pytest.mark.parametrize(
    "raw, code",
    [
        (b"not json", "bad_request"),
        (b"\xff\xfe", "bad_request"),
        (b"[1, 2]", "bad_request"),
        (json.dumps({"v": 99, "op": "ping"}).encode(), "unsupported_version"),
        (json.dumps({"v": 1}).encode(), "bad_request"),
        (json.dumps({"v": 1, "op": "explode"}).encode(), "unknown_op"),
        (json.dumps({"v": 1, "op": "ping", "args": [1]}).encode(), "bad_request"),
        # An explicit id: the default one (the 200,000 bytes) goes into PYTEST_CURRENT_TEST,
        # and the engine's start then fails on an environment string over the kernel's limit.
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "bad_request", id="deeply-nested-json"),
        (
            json.dumps({"v": 1, "op": "submit", "args": {"jobs": "x" * 1000}}).encode(),
            "invalid_args",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "op": "submit",
                    "args": {"jobs": [{"name": "a", "command": ["x"], "gpus": "all"}]},
                }
            ).encode(),
            "invalid_args",
        ),
        (json.dumps({"v": 1, "op": "show", "args": {"job": {"$ne": 1}}}).encode(), "invalid_args"),
    ],
)
# one after another on one worker (--dist loadgroup), so `abused_engine` is made once: spread
# over the workers, each would make it again
@pytest.mark.xdist_group("test_daemon_hostile")
@pytest.mark.slow(2)
def test_hostile_requests_never_crash_the_engine(
    abused_engine: EngineHandle, raw: bytes, code: str
) -> None:
    engine = abused_engine
    pid = engine.pid
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5.0)
    sock.connect(str(engine.home.control_socket))
    try:
        sock.sendall(protocol.frame(raw))
        with sock.makefile("rb") as replies:
            (length,) = protocol.FRAME_HEADER.unpack(replies.read(protocol.FRAME_HEADER.size))
            reply = json.loads(replies.read(length))
    finally:
        sock.close()
    assert reply["ok"] is False
    assert reply["error"]["code"] == code
    assert engine.client.request("ping")["pid"] == engine.pid == pid


def test_broken_frames_and_stalled_clients_never_stall_the_engine(engine: EngineHandle) -> None:
    """Half a header, half a frame, a header announcing more than a message may hold, and a
    client that never reads its replies: the engine answers everyone else meanwhile."""
    socks = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(4)]
    try:
        for sock in socks:
            sock.connect(str(engine.home.control_socket))
        socks[0].sendall(b"\x00\x00")  # half a header
        socks[1].sendall(protocol.FRAME_HEADER.pack(100) + b"{")  # half a frame
        socks[2].sendall(protocol.FRAME_HEADER.pack(protocol.MAX_MESSAGE_BYTES + 1))
        ping = protocol.frame(protocol.Request("jobs", {}, 1).encode())
        socks[3].setblocking(False)
        with contextlib.suppress(BlockingIOError):
            for _ in range(20_000):  # never read: its replies pile up in the engine
                socks[3].send(ping)
        assert engine.client.request("ping")["pid"] == engine.pid
        socks[2].settimeout(5.0)
        with socks[2].makefile("rb") as said:  # why, then the end of the connection
            (length,) = protocol.FRAME_HEADER.unpack(said.read(protocol.FRAME_HEADER.size))
            assert json.loads(said.read(length))["error"]["code"] == "too_large"
            assert said.read(1) == b"", "the oversized frame's connection stays open"
    finally:
        for sock in socks:
            sock.close()
    assert engine.client.request("ping")["pid"] == engine.pid


def test_one_engine_per_home(engine: EngineHandle) -> None:
    first = engine.pid
    result = subprocess.run(
        [sys.executable, "-m", "gpudesk.engine.daemon", "--home", str(engine.home.root)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 3
    assert "already running" in result.stderr
    assert engine.pid == first
    assert engine.client.request("ping")["pid"] == first


def test_engine_restarts_on_an_existing_store_and_keeps_history(engine: EngineHandle) -> None:
    (job_id,) = engine.submit(sh("true", "kept"))
    engine.wait_state(job_id, "succeeded")
    engine.stop()
    engine.start()
    assert engine.job(job_id).state == "succeeded"
    (next_id,) = engine.submit(sh("true", "after"))
    assert next_id == job_id + 1
    engine.wait_state(next_id, "succeeded")


def test_the_store_is_wal_and_versioned(engine: EngineHandle) -> None:
    store = Store.open(engine.home.db)
    try:
        assert store.schema_version >= 1
        mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
    finally:
        store.close()


def test_socket_folder_is_private_even_for_long_homes(tmp_path, monkeypatch) -> None:
    from gpudesk.api.connection import start_engine
    from gpudesk.core.station import StationConfig
    from gpudesk.paths import Home

    home = Home(tmp_path / ("very-long-folder-name-" * 5) / "home")
    assert len(str(home.root / "run" / "control.sock")) > 100
    start_engine(home, StationConfig(backend="none"))
    client = Connection(home)
    try:
        assert client.request("ping")
        assert (home.socket_dir.stat().st_mode & 0o777) == 0o700
    finally:
        client.request("shutdown")
        client.close()
        wait_for(lambda: not os.path.exists(home.socket_dir / "control.sock"), 5)


def test_an_unwritable_job_folder_fails_the_job_not_the_engine(engine: EngineHandle) -> None:
    jobs_dir = engine.home.jobs_dir
    jobs_dir.rmdir()
    jobs_dir.write_text("not a folder")  # what a full or broken disk looks like to mkdir
    (job_id,) = engine.submit(sh("true", "doomed"))
    job = engine.wait_state(job_id, "failed")
    assert "cannot create the attempt folder" in job.reason
    jobs_dir.unlink()
    jobs_dir.mkdir()
    (next_id,) = engine.submit(sh("true", "fine"))
    assert engine.wait_state(next_id, "succeeded").exit_code == 0


def test_a_running_job_says_where_it_runs(engine: EngineHandle) -> None:
    """`gpus`, `mode` and `mig_slice` next to the `slot` label: set while an attempt runs."""
    (job_id,) = engine.submit(
        {"name": "cpu", "command": [sys.executable, "-c", "import time; time.sleep(30)"]}
    )
    running = engine.wait_state(job_id, "running")
    assert (running.gpus, running.mode, running.mig_slice) == ([], "cpu", None)
    assert running.slot
    listed = engine.client.request("jobs", ids=[job_id])["jobs"][0]
    assert (listed["gpus"], listed["mode"]) == ([], "cpu")
    engine.client.request("cancel", jobs=[job_id], grace=0)
    done = engine.wait_all_done([job_id])[0]
    assert (done.slot, done.gpus, done.mode, done.mig_slice) == (None, [], None, None)


def test_a_job_on_a_mig_slice_names_its_gpu_and_slice(mig_engine: EngineHandle) -> None:
    (job_id,) = mig_engine.submit(
        {
            "name": "sliced",
            "command": [sys.executable, "-c", "import time; time.sleep(30)"],
            "gpus": 1,
            "memory_gb": 4,
            "sm_pct": 20,
        }
    )
    job = mig_engine.wait_state(job_id, "running")
    placement = mig_engine.show(job_id).attempts[0].placement
    assert (job.mode, job.gpus) == ("mig", placement.gpus)
    assert job.mig_slice == placement.mig_slice and job.mig_slice.startswith("MIG-")
    mig_engine.client.request("cancel", jobs=[job_id], grace=0)
    mig_engine.wait_all_done([job_id])


def test_an_engine_of_an_older_gpudesk_is_named_not_waited_for(tmp_path) -> None:
    """After an upgrade, the engine still running speaks zmq on the same socket path: the client
    says what it is and how to stop it, at once."""
    import zmq

    home = Home(tmp_path / "home")
    home.ensure()
    old = zmq.Context.instance().socket(zmq.ROUTER)
    old.setsockopt(zmq.LINGER, 0)
    old.bind(f"ipc://{home.control_socket}")
    started = time.monotonic()
    try:
        with pytest.raises(EngineError) as info:
            Connection(home, timeout=10.0).request("ping")
    finally:
        old.close()
    assert time.monotonic() - started < 5.0
    assert info.value.code == "unsupported_version"
    assert "an engine of an older gpudesk" in str(info.value)
    assert "pkill -f gpudesk.engine.daemon" in str(info.value)
