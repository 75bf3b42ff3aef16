"""MpsManager against the fake nvidia-cuda-mps-control: real daemons, sockets and processes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import EngineHandle, wait_for
from fakes.h200_records import extra_checks, raw_probe

from gpudesk.core.station import StationConfig
from gpudesk.engine.daemon import Engine
from gpudesk.engine.store.database import Store
from gpudesk.home_lock import EngineLock
from gpudesk.hw.mps import CONTROL_ENV, MpsError, MpsManager
from gpudesk.paths import Home

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "nvidia-cuda-mps-control"
FAKE_SERVER = FAKE.parent / "nvidia-cuda-mps-server"  # the program the fake daemon runs
GPU_A = "GPU-8f3a1c2e-5b7d-4e09-a1c3-0d9e8f7a6b5c"
GPU_B = "GPU-1b2c3d4e-6f70-4812-93a4-b5c6d7e8f901"
MIG_A = "MIG-4c5d6e7f-8091-5a2b-b3c4-d5e6f7a8b9c0"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def fake_processes(home_root: Path) -> list[psutil.Process]:
    """Fake daemons and servers whose log directory lies in `home_root` (found without
    MpsManager's help, so a bug there cannot hide a leak)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or ())
            if str(FAKE) not in cmdline and str(FAKE_SERVER) not in cmdline:
                continue
            logs = proc.environ().get("CUDA_MPS_LOG_DIRECTORY", "")
            if logs.startswith(str(home_root)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            pass
    return found


def run_fake(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FAKE), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=5,
        check=False,
    )


def start_server(manager: MpsManager, uuid: str) -> int:
    """What a first CUDA client makes the real daemon do: start a server for this user."""
    env = manager.client_env(uuid)
    done = run_fake(env, stdin=f"start_server -uid {os.getuid()}\n")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = run_fake(env, stdin="get_server_list\n").stdout.split()
    assert len(listed) == 1
    return int(listed[0])


def kill_leftovers(home_root: Path) -> None:
    leftovers = fake_processes(home_root)
    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    wait_for(lambda: not any(alive(p.pid) for p in leftovers), 5, what="fake daemons to die")


@pytest.fixture
def home_root() -> Iterator[Path]:
    """A home with a short path (pytest's tmp_path is too long for the in-home pipe folder);
    every fake daemon and server started in it is killed afterwards, whatever the test did."""
    root = Path(tempfile.mkdtemp(prefix="gdmps-")) / "home"
    try:
        yield root
    finally:
        kill_leftovers(root)
        shutil.rmtree(root.parent, ignore_errors=True)


@pytest.fixture
def manager(home_root: Path) -> MpsManager:
    return MpsManager(home_root, str(FAKE), command_timeout=3, start_timeout=3, stop_timeout=3)


def test_ensure_starts_a_daemon_with_its_own_pipe_and_log_dirs(
    manager: MpsManager, home_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10")  # the engine's, not the daemon's
    server = manager.ensure(GPU_A)

    assert not server.adopted
    assert server.pid is not None and alive(server.pid)
    assert server.pipe_dir == home_root / "mps" / server.key / "pipe"
    assert server.log_dir == home_root / "mps" / server.key / "log"
    assert server.control_socket == server.pipe_dir / "control"
    assert stat.S_ISSOCK(server.control_socket.stat().st_mode)
    assert stat.S_IMODE(server.pipe_dir.stat().st_mode) == 0o700
    assert (home_root / "mps" / server.key / "uuid").read_text().strip() == GPU_A
    log = (server.log_dir / "control.log").read_text()
    assert f"Starting control daemon using socket {server.pipe_dir / 'control'}" in log
    env = psutil.Process(server.pid).environ()
    assert env["CUDA_VISIBLE_DEVICES"] == GPU_A
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(server.pipe_dir)
    assert env["CUDA_MPS_LOG_DIRECTORY"] == str(server.log_dir)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env
    assert os.getsid(server.pid) != os.getsid(0)  # detached from the engine's session


def test_ensure_is_idempotent_and_a_new_manager_adopts_the_daemon(
    manager: MpsManager, home_root: Path
) -> None:
    first = manager.ensure(GPU_A)
    again = manager.ensure(GPU_A)
    later = MpsManager(home_root, str(FAKE), command_timeout=3).ensure(GPU_A)

    assert again.pid == first.pid and again.adopted
    assert later.pid == first.pid and later.adopted
    assert later.pipe_dir == first.pipe_dir
    assert [p.pid for p in fake_processes(home_root)] == [first.pid]


def test_each_device_gets_its_own_daemon(manager: MpsManager, home_root: Path) -> None:
    gpu = manager.ensure(GPU_A)
    mig = manager.ensure(MIG_A)

    assert gpu.pid != mig.pid
    assert gpu.pipe_dir != mig.pipe_dir
    assert gpu.key.startswith("gpu-") and mig.key.startswith("mig-")
    assert psutil.Process(mig.pid).environ()["CUDA_VISIBLE_DEVICES"] == MIG_A
    assert manager.known_uuids() == sorted([GPU_A, MIG_A])


def test_client_env(manager: MpsManager) -> None:
    server = manager.layout(GPU_A)

    assert manager.client_env(GPU_A, 50, 4096) == {
        "CUDA_VISIBLE_DEVICES": GPU_A,
        "CUDA_MPS_PIPE_DIRECTORY": str(server.pipe_dir),
        "CUDA_MPS_LOG_DIRECTORY": str(server.log_dir),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M",
    }
    plain = manager.client_env(GPU_A, None, None)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in plain
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in plain
    with pytest.raises(ValueError):
        manager.client_env(GPU_A, 0, None)
    with pytest.raises(ValueError):
        manager.client_env(GPU_A, None, 0)


def test_status_running_then_fault_then_running(manager: MpsManager) -> None:
    assert manager.status(GPU_A).state == "stopped"
    server = manager.ensure(GPU_A)

    idle = manager.status(GPU_A)
    assert (idle.state, idle.usable, idle.servers) == ("running", True, {})
    assert idle.daemon_pid == server.pid

    server_pid = start_server(manager, GPU_A)
    assert psutil.Process(server_pid).ppid() == server.pid
    active = manager.status(GPU_A)
    assert (active.state, active.usable, active.servers) == (
        "running",
        True,
        {server_pid: "ACTIVE"},
    )

    (server.pipe_dir / "fake-fault").touch()
    faulted = manager.status(GPU_A)
    assert (faulted.state, faulted.usable) == ("fault", False)
    assert faulted.servers == {server_pid: "FAULT"}
    assert "FAULT" in faulted.message and "time-slicing" in faulted.message

    (server.pipe_dir / "fake-fault").unlink()
    assert manager.status(GPU_A).usable


def test_stop_leaves_no_process_and_never_raises_when_stopped(
    manager: MpsManager, home_root: Path
) -> None:
    assert manager.stop(GPU_A) is False  # never started
    server = manager.ensure(GPU_A)
    server_pid = start_server(manager, GPU_A)
    assert server.pid is not None

    assert manager.stop(GPU_A) is True

    # stop() returns once the daemon no longer runs its binary: an exiting process has given
    # up its command line before the kernel has finished it off, so its last moment is
    # waited for here, as briefly as it lasts
    wait_for(lambda: not alive(server.pid) and not alive(server_pid), 5.0, what="their exit")
    assert fake_processes(home_root) == []
    # as the real daemon (an H200, driver 580.159.04): the pid file and the log fifo go, the
    # stale sockets and the lock stay
    assert sorted(p.name for p in server.pipe_dir.iterdir()) == [
        "control",
        "control_lock",
        "control_privileged",
    ]
    assert manager.status(GPU_A).state == "stopped"
    assert manager.stop(GPU_A) is False
    log = (server.log_dir / "control.log").read_text()
    assert f"Server {server_pid} exited with status 0" in log


def test_stop_idle_and_stop_all(manager: MpsManager, home_root: Path) -> None:
    pids = {uuid: manager.ensure(uuid).pid for uuid in (GPU_A, GPU_B, MIG_A)}

    assert manager.stop_idle([GPU_A]) == sorted([GPU_B, MIG_A])
    assert manager.status(GPU_A).state == "running"
    assert [p.pid for p in fake_processes(home_root)] == [pids[GPU_A]]

    # a manager of a later engine finds the daemon through the home
    assert MpsManager(home_root, str(FAKE), command_timeout=3).stop_all() == [GPU_A]
    assert fake_processes(home_root) == []
    assert manager.stop_all() == []


def test_a_killed_daemon_is_replaced(manager: MpsManager) -> None:
    first = manager.ensure(GPU_A)
    assert first.pid is not None
    os.kill(first.pid, signal.SIGKILL)
    wait_for(lambda: not alive(first.pid), 5, what="the daemon to die")

    assert manager.status(GPU_A).state == "stopped"  # its stale socket answers nobody
    second = manager.ensure(GPU_A)
    assert not second.adopted and second.pid not in (None, first.pid)


def test_fake_refuses_a_second_daemon_like_the_real_tool(manager: MpsManager) -> None:
    env = manager.client_env(GPU_A)
    nobody = run_fake(env, stdin="get_server_list\n")
    # on stderr, as the real tool (an H200, driver 580.159.04)
    assert (nobody.returncode, nobody.stdout, nobody.stderr) == (
        1,
        "",
        "Cannot find MPS control daemon process\n",
    )

    manager.ensure(GPU_A)
    second = run_fake(env, "-d")
    assert (second.returncode, second.stdout) == (
        1,
        "An instance of this daemon is already running\n",
    )
    assert run_fake(env, stdin="set_default_active_thread_percentage 40\n").stdout == "40.0\n"


# What the real tool answered on an H200 (driver 580.159.04, 2026-11-29), step by step.
H200_MPS = raw_probe()["mps"]
H200_STEPS = {step["key"]: step for step in H200_MPS["steps"]}


def _answered_as_the_h200(key: str, env: dict[str, str]) -> None:
    real = H200_STEPS[key]
    here = run_fake(env, *real["argv"][1:], stdin=real.get("stdin", ""))
    assert (here.returncode, here.stdout, here.stderr) == (
        real["rc"],
        real["stdout"],
        real["stderr"],
    ), key


def _folder(path: Path) -> list[tuple[str, str, str]]:
    kinds = {stat.S_IFSOCK: "socket", stat.S_IFIFO: "fifo", stat.S_IFREG: "file"}
    return sorted(
        (p.name, kinds.get(stat.S_IFMT(p.lstat().st_mode), "other"), oct(p.lstat().st_mode & 0o777))
        for p in path.iterdir()
    )


def _recorded(files: list[dict]) -> list[tuple[str, str, str]]:
    return sorted((f["name"], f["kind"], f["mode"]) for f in files)


def test_fake_answers_and_leaves_its_folders_as_the_h200_did(manager: MpsManager) -> None:
    """Every step of the recorded real session that needs no CUDA client, replayed: exit
    status, stdout and stderr apart, and the pipe and log folders while running and after
    quit (names, kinds, modes)."""
    env = manager.client_env(GPU_A)
    server = manager.layout(GPU_A)
    server.pipe_dir.mkdir(parents=True)
    server.log_dir.mkdir(parents=True)
    _answered_as_the_h200("get_server_list before the daemon", env)
    _answered_as_the_h200("-d", env)
    wait_for(lambda: run_fake(env, stdin="get_server_list\n").returncode == 0, 5, what="daemon")
    running = H200_STEPS["folders while running"]["files"]
    assert _folder(server.pipe_dir) == _recorded(running["pipe"])
    assert _folder(server.log_dir) == _recorded(running["log"])
    pid_file = (server.pipe_dir / "nvidia-cuda-mps-control.pid").read_text()
    assert pid_file.isdigit()  # "538": no newline
    for key in (
        "second -d",
        "get_server_list without clients",
        "get_default_active_thread_percentage",
        "get_server_status <unknown pid>",
        "unknown command",
        "quit",
        "get_server_list after quit",
    ):
        _answered_as_the_h200(key, env)
    assert _folder(server.pipe_dir) == _recorded(H200_MPS["files"]["pipe"])
    log = server.control_log.read_text()
    assert "Server 999999 not found" in log and 'Unknown command "no_such_command"' in log


def test_fake_answers_the_follow_up_checks_as_the_h200_did(manager: MpsManager) -> None:
    """The commands of the follow-up checks, in their order, with the server they started."""
    checks = {k[5:]: v for k, v in extra_checks().items() if k.startswith("mps: ")}
    env = manager.client_env(GPU_A)
    manager.ensure(GPU_A)
    real_server = checks["get_server_list"].stdout.strip()
    server = ""
    for command, real in checks.items():
        if command.startswith("start_server -uid "):
            command = f"start_server -uid {os.getuid()}"
        here = run_fake(env, stdin=command.replace(real_server, server) + "\n")
        if command == "get_server_list":
            server = here.stdout.strip()
            assert server.isdigit(), here
            real = real._replace(stdout=real.stdout.replace(real_server, server))
        assert (here.returncode, here.stdout, here.stderr) == real, command


def test_the_fake_server_is_a_program_of_its_own(manager: MpsManager) -> None:
    """The real server's command line is `nvidia-cuda-mps-server`, the daemon's
    `nvidia-cuda-mps-control -d`: a process list tells them apart, and so must the fake's."""
    assert H200_STEPS["server process"]["cmdline"] == "nvidia-cuda-mps-server"
    daemon = manager.ensure(GPU_A)
    server_pid = start_server(manager, GPU_A)
    assert server_pid != daemon.pid
    cmdline = psutil.Process(server_pid).cmdline()
    assert Path(cmdline[-1]).name == "nvidia-cuda-mps-server", cmdline
    assert not any("nvidia-cuda-mps-control" in word for word in cmdline)
    assert psutil.Process(server_pid).ppid() == daemon.pid
    assert manager.status(GPU_A).servers == {server_pid: "ACTIVE"}


def test_status_of_a_server_that_exits_between_list_and_status(manager: MpsManager) -> None:
    """The real daemon answers `get_server_status` of a server that is gone with "Server N not
    found": the server exited, which is no fault."""
    manager.ensure(GPU_A)
    server_pid = start_server(manager, GPU_A)
    (manager.layout(GPU_A).pipe_dir / "fake-exit-after-list").touch()
    status = manager.status(GPU_A)
    assert (status.state, status.usable, status.servers) == ("running", True, {}), status
    assert not alive(server_pid)


def test_long_home_falls_back_to_a_short_pipe_dir(tmp_path: Path) -> None:
    home_root = tmp_path / ("x" * 120) / "home"
    manager = MpsManager(home_root, str(FAKE), command_timeout=3, start_timeout=3)
    try:
        server = manager.ensure(GPU_A)
        assert len(str(server.pipe_dir / "control").encode()) < 100
        assert str(server.pipe_dir).startswith(f"/tmp/gpudesk-{os.getuid()}/")
        assert stat.S_IMODE(server.pipe_dir.stat().st_mode) == 0o700
        assert server.log_dir.is_relative_to(home_root)
        assert manager.status(GPU_A).state == "running"
        assert manager.stop(GPU_A)
    finally:
        kill_leftovers(home_root)
        shutil.rmtree(manager.layout(GPU_A).pipe_dir.parent, ignore_errors=True)


def test_a_wedged_daemon_times_out_with_a_clear_error(manager: MpsManager) -> None:
    server = manager.ensure(GPU_A)
    (server.pipe_dir / "fake-delay").write_text("30")  # hangs until the file is removed
    manager.command_timeout = 0.3

    started = time.monotonic()
    wedged = manager.status(GPU_A)
    assert time.monotonic() - started < 2
    assert (wedged.state, wedged.usable) == ("fault", False)
    assert "did not answer" in wedged.message
    with pytest.raises(MpsError, match="did not answer"):
        manager.ensure(GPU_A)

    (server.pipe_dir / "fake-delay").unlink()
    manager.command_timeout = 3
    assert manager.stop(GPU_A)


def test_missing_binary_names_the_env_var(
    home_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    explicit = MpsManager(home_root, str(tmp_path / "nvidia-cuda-mps-control"))
    assert not explicit.available
    with pytest.raises(MpsError, match=CONTROL_ENV):
        explicit.ensure(GPU_A)
    status = explicit.status(GPU_A)
    assert (status.state, status.usable) == ("unavailable", False)
    assert CONTROL_ENV in status.message
    assert explicit.stop(GPU_A) is False

    monkeypatch.setenv(CONTROL_ENV, "/nonexistent/nvidia-cuda-mps-control")
    with pytest.raises(MpsError, match=f"{CONTROL_ENV}=/nonexistent"):
        MpsManager(home_root).ensure(GPU_A)

    monkeypatch.delenv(CONTROL_ENV)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MpsError, match=f"not found on PATH.*{CONTROL_ENV}"):
        MpsManager(home_root).ensure(GPU_A)


def test_env_var_selects_the_binary(home_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONTROL_ENV, str(FAKE))
    manager = MpsManager(home_root, command_timeout=3, start_timeout=3)
    assert manager.available and manager.control == str(FAKE)
    assert manager.ensure(GPU_A).pid is not None
    assert manager.stop(GPU_A)


def _script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(mode)
    return path


def test_start_failures_become_mps_errors(home_root: Path, tmp_path: Path) -> None:
    silent = _script(
        tmp_path / "never-up",
        'if [ "$1" = -d ]; then exit 0; fi\n'
        'echo "Cannot find MPS control daemon process"; exit 1\n',
    )
    with pytest.raises(MpsError, match=r"did not come up within 0\.3s"):
        MpsManager(home_root, str(silent), start_timeout=0.3).ensure(GPU_A)

    denied = _script(
        tmp_path / "denied",
        'if [ "$1" = -d ]; then\n'
        '  echo "Failed to open /var/log/nvidia-mps: Permission denied"; exit 1\n'
        'fi\necho "Cannot find MPS control daemon process"; exit 1\n',
    )
    with pytest.raises(MpsError, match=r"exit status 1.*permission problem"):
        MpsManager(home_root, str(denied), start_timeout=1).ensure(GPU_A)

    not_executable = _script(tmp_path / "not-executable", "exit 0\n", mode=0o644)
    with pytest.raises(MpsError, match=f"permission denied.*{CONTROL_ENV}"):
        MpsManager(home_root, str(not_executable)).ensure(GPU_A)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_pipe_dir_is_a_permission_error(manager: MpsManager) -> None:
    pipe = manager.layout(GPU_A).pipe_dir
    pipe.mkdir(parents=True)
    pipe.chmod(0o500)
    try:
        with pytest.raises(MpsError, match="not writable"):
            manager.ensure(GPU_A)
    finally:
        pipe.chmod(0o700)


def test_the_engine_routes_new_jobs_around_a_faulted_mps_server(
    home_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's periodic MPS check: a server in FAULT takes no new clients (they are
    time-sliced), a drained GPU's daemon is stopped, and a stopped daemon is usable again."""
    monkeypatch.setenv(CONTROL_ENV, str(FAKE))
    home = Home(home_root)
    home.ensure()
    store = Store.open(home.db)
    engine = Engine(home, store, StationConfig(backend="none"), lock=EngineLock.take(home.lock))
    try:
        server = engine.mps_watch.manager.ensure(GPU_A)
        start_server(engine.mps_watch.manager, GPU_A)
        assert engine.mps_watch.usable(GPU_A)
        (server.pipe_dir / "fake-fault").touch()
        engine.mps_watch.checked_at = 0.0
        engine.check_mps()
        assert not engine.mps_watch.usable(GPU_A) and "FAULT" in engine.mps_watch.faults[GPU_A]
        assert (
            engine.mps_watch.manager.status(GPU_A).state == "stopped"
        )  # no job used it: quit as idle
        engine.mps_watch.checked_at = 0.0
        engine.check_mps()
        assert engine.mps_watch.usable(GPU_A)
        messages = [e.message for e in store.events() if e.kind == "mps"]
        assert "is in FAULT" in messages[0] and "usable again (stopped)" in messages[1]
    finally:
        engine.mps_watch.manager.stop_all()
        engine.close()
        store.close()
        engine.keeper.lock.close()  # last, as the daemon does


def mps_engine_on_the_fakes(
    home_root: Path, scenario: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Home, EngineHandle]:
    """A real engine with policy mps on the faithful NVML fake (`scenario`) and the MPS control
    fake, its home `home_root`."""
    monkeypatch.setenv("PYTHONPATH", str(FAKE.parent / "nvml_shim"))
    monkeypatch.setenv("GPUDESK_FAKE_NVML", str(scenario))
    monkeypatch.setenv(CONTROL_ENV, str(FAKE))
    home = Home(home_root)
    home.ensure()
    monkeypatch.setenv("GPUDESK_HOME", str(home_root))
    engine = EngineHandle(home)
    engine.start(backend="nvml", policy="mps", sample_interval=0.2)
    return home, engine


def test_the_status_reply_lists_an_mps_fault_by_gpu_index(
    home_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real engine on the faithful NVML and MPS fakes: MPS jobs run on GPU 1, its server goes
    into FAULT, and `status` reports it as {"gpu": index, "uuid", "message"} (the desk looks
    faults up by GPU index)."""
    scenario = tmp_path / "nvml.json"
    gpus = [{"uuid": uuid, "memory_total_mib": 40960} for uuid in (GPU_B, GPU_A)]
    scenario.write_text(json.dumps({"gpus": gpus}))
    home, engine = mps_engine_on_the_fakes(home_root, scenario, monkeypatch)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    try:
        ids = engine.submit(
            *(
                {"name": f"mps-{i}", "command": sleeper, "gpus": 1, "memory_gb": 4, "sm_pct": 20}
                for i in range(2)
            )
        )
        running = [engine.wait_state(job_id, "running") for job_id in ids]
        assert {j.mode for j in running} == {"mps"} and all(j.mig_slice is None for j in running)
        index = running[0].gpus[0]
        uuid = gpus[index]["uuid"]
        assert engine.api.status().station.mps.faults == []
        server = start_server(MpsManager(home.root), uuid)  # what the first CUDA client does
        assert server
        (MpsManager(home.root).layout(uuid).pipe_dir / "fake-fault").touch()
        faults = wait_for(
            lambda: engine.api.status().station.mps.faults,
            timeout=30.0,
            what="the engine to notice the FAULT",
        )
        assert isinstance(faults, list) and len(faults) == 1
        (fault,) = faults
        assert (fault.gpu, fault.uuid) == (index, uuid) and "FAULT" in fault.message
        engine.api.cancel(ids, grace=0)
        engine.wait_all_done(ids)
    finally:
        engine.stop()
        engine.cleanup_jobs()
        engine.client.close()
        MpsManager(home.root).stop_all()


def test_a_real_engine_names_the_mps_server_and_invents_no_per_client_figure(
    home_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two MPS jobs with NVML answering as the H200's driver did under MPS (the server and the
    clients listed, utilization samples for the server alone: tests/fakes/fake_pynvml.py). The
    engine's view names the server as such, not as a stranger's process; the clients' energy is
    split evenly, and neither gets an SM figure NVML never gave."""
    scenario = tmp_path / "nvml.json"
    gpu = {"uuid": GPU_A, "memory_total_mib": 143771, "power_w": 400}

    def list_processes(processes: list[dict]) -> None:
        staged = tmp_path / "nvml.json.new"  # whole or not at all, as the shim reads it
        staged.write_text(json.dumps({"live": True, "gpus": [{**gpu, "processes": processes}]}))
        staged.replace(scenario)

    list_processes([])
    home, engine = mps_engine_on_the_fakes(home_root, scenario, monkeypatch)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    job = {"command": sleeper, "gpus": 1, "memory_gb": 4, "sm_pct": 20}
    try:
        ids = engine.submit(*({**job, "name": f"mps-{i}"} for i in range(2)))
        assert {engine.wait_state(i, "running").mode for i in ids} == {"mps"}
        server = start_server(MpsManager(home.root), GPU_A)  # what the first CUDA client does
        a, b = (engine.show(i).attempts[0].pid for i in ids)
        list_processes(
            [
                {"pid": server, "used_memory_mib": 66, "name": "nvidia-cuda-mps-server"}
                | {"mps": "server"},
                {"pid": a, "used_memory_mib": 1448, "mps": "client", "sm_util": 70},
                {"pid": b, "used_memory_mib": 1448, "mps": "client", "sm_util": 20},
            ]
        )

        def view() -> dict | None:
            snapshot = engine.client.request("telemetry")["snapshot"]
            listed = {p["pid"]: p for g in snapshot["gpus"] for p in g["processes"]}
            return snapshot if listed.get(server, {}).get("sm_pct") is not None else None

        before = wait_for(view, timeout=15.0, what="the processes in the engine's view")
        assert isinstance(before, dict)
        (gpu_view,) = before["gpus"]
        roles = {p["pid"]: (p.get("mps"), p["job_id"]) for p in gpu_view["processes"]}
        assert roles == {server: ("server", None), a: ("client", ids[0]), b: ("client", ids[1])}

        def spent() -> dict[int, float] | None:
            now = view()
            assert now is not None
            energy = {j["id"]: j["energy"]["gpu_j"] for j in now["jobs"]}
            grown = {j["id"]: energy[j["id"]] - j["energy"]["gpu_j"] for j in before["jobs"]}
            return grown if sum(grown.values()) > 1200 else None  # 3 s at 400 W

        after = wait_for(spent, timeout=30.0, what="3 s of the GPU's energy")
        assert isinstance(after, dict)
        assert after[ids[0]] == pytest.approx(after[ids[1]], rel=0.01)
        now = view()
        assert now is not None
        assert [j["gpu_sm_pct"] for j in now["jobs"]] == [None, None]
        engine.api.cancel(ids, grace=0)
        engine.wait_all_done(ids)
        for job_id in ids:
            assert engine.show(job_id).usage.split == "even"
    finally:
        engine.stop()
        engine.cleanup_jobs()
        engine.client.close()
        MpsManager(home.root).stop_all()
