"""GPU processes outside gpudesk's jobs: whose they are and what they run, read from /proc as
nvitop reads them, carried in the telemetry view and shown by `gpudesk top` and the desk's
process table (docs/tui.md). On a shared server the first question about a busy GPU is whose
process is on it; before, `top` said `pid 4242`."""

from __future__ import annotations

import contextlib
import getpass
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest
from conftest import wait_for
from local_users import LocalUser
from local_users import other_user as other_user  # the fixture (tests/local_users.py)

from gpudesk.cli.top_view import foreign_label
from gpudesk.hw.telemetry.foreign import MAX_COMMAND, ForeignProcesses, proc_hides_processes
from gpudesk.hw.telemetry.model import (
    BackendReading,
    GpuInfo,
    GpuProcess,
    GpuReading,
    JobLoad,
)
from gpudesk.hw.telemetry.monitor import Monitor, TrackedAttempt

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def outsider() -> Iterator[subprocess.Popen[bytes]]:
    """A process gpudesk did not start, whose command line carries an escape sequence."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEP, "\x1b[31mred", "x" * 300], start_new_session=True
    )
    # Popen returns once the exec has closed its error pipe, which the kernel does before it
    # writes the new program's arguments: /proc/PID/cmdline can still read empty then (seen on
    # a loaded CI run). A process on a GPU has long since exec'd; this one is waited for.
    wait_for(lambda: psutil.Process(proc.pid).cmdline(), what="the outsider's command line")
    yield proc
    proc.kill()
    proc.wait()


def test_its_owner_and_command_are_read_once_and_made_safe(
    outsider: subprocess.Popen[bytes],
) -> None:
    names = ForeignProcesses(hidden=False)
    (seen,) = names.describe([outsider.pid, 2**22 + 77]).values()  # a pid no process has
    assert seen.user == getpass.getuser()
    assert seen.command is not None and seen.command.startswith(sys.executable)
    assert "\x1b" not in seen.command and "\\x1b[31mred" in seen.command
    assert len(seen.command) == MAX_COMMAND and seen.command.endswith("…")
    assert names.describe([outsider.pid])[outsider.pid] is seen  # kept, not read again
    outsider.kill()
    outsider.wait()
    assert names.describe([outsider.pid]) == {}  # gone: forgotten


class OneGpu:
    """A GPU with the given processes on it (a stand-in for NVML at the hardware boundary)."""

    name = "fake"
    simulated = False

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = pids

    def open(self) -> None:
        pass

    def inventory(self) -> list[GpuInfo]:
        return [GpuInfo(0, "GPU-0", "NVIDIA H100 80GB HBM3", 81559.0)]

    def read(self) -> BackendReading:
        processes = tuple(GpuProcess(pid, 3276.8, 40.0) for pid in self.pids)
        gpu = GpuReading(0, "GPU-0", "NVIDIA H100 80GB HBM3", processes=processes)
        return BackendReading(0.0, 0.0, (gpu,))

    def set_load(self, loads: Sequence[JobLoad]) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_view_names_a_foreign_process_and_leaves_a_jobs_alone(
    outsider: subprocess.Popen[bytes],
) -> None:
    if proc_hides_processes():
        pytest.skip("this host's /proc is mounted hidepid: the engine looks nothing up")
    mine = os.getpid()  # this test's own process stands for a gpudesk job's
    job = TrackedAttempt(1, 10, "train", os.getpgid(mine), "gpu:0", (0,), 4.0, 50.0, 0.0)
    monitor = Monitor(OneGpu([mine, outsider.pid]))  # type: ignore[arg-type]
    view = monitor.ingest(monitor.collect([job]))
    procs = {p.pid: p for p in view.gpus[0].processes}
    assert procs[mine].job_id == 10 and procs[mine].user is None
    other = procs[outsider.pid]
    assert other.job_id is None and other.user == getpass.getuser()
    label = foreign_label(other)
    assert label.startswith(f"pid {outsider.pid} {getpass.getuser()} 3.2 GiB SM 40% ")
    assert sys.executable in label


def test_where_proc_hides_users_processes_nothing_is_looked_up(
    outsider: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw,nosuid,nodev,noexec,relatime,hidepid=invisible 0 0\n")
    assert proc_hides_processes(str(mounts))
    mounts.write_text("proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n")
    assert not proc_hides_processes(str(mounts))
    assert not proc_hides_processes(str(tmp_path / "missing"))
    assert ForeignProcesses(hidden=True).describe([outsider.pid]) == {}


def test_a_root_engine_names_another_users_process_and_believes_nothing_it_says(
    other_user: LocalUser,
) -> None:
    """As a system engine does (root), with a real second user: her process's owner is read from
    /proc (the kernel's, not anything she wrote), and her command line, which she chose, is only
    text: control characters spelled out, cut, never run or followed."""
    evil = "\x1b]0;pwned\x07\x1b[2J" + "$(touch /tmp/nope)" * 3
    proc = subprocess.Popen(
        ["runuser", "-u", other_user.name, "--", "/usr/bin/python3", "-c", SLEEP, evil, "y" * 300],
        start_new_session=True,
    )
    try:

        def hers() -> int | None:
            # her python, once it has exec'd (runuser's child is hers from its setuid on, and
            # its command line reads empty while it execs)
            family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            for member in family:
                with contextlib.suppress(psutil.Error):
                    if member.uids().real == other_user.uid and "-c" in member.cmdline():
                        return member.pid
            return None

        pid = wait_for(hers, 10.0, 0.05, "her process to start as her")
        assert isinstance(pid, int)
        (seen,) = ForeignProcesses(hidden=False).describe([pid]).values()
        assert seen.user == other_user.name
        assert seen.command is not None and len(seen.command) <= MAX_COMMAND
        assert "\x1b" not in seen.command and "\x07" not in seen.command
        assert "\\x1b]0;pwned\\x07" in seen.command
        assert not os.path.exists("/tmp/nope")
        # where the site hides users' processes from each other, root shows nothing of hers
        assert ForeignProcesses(hidden=True).describe([pid]) == {}
    finally:
        proc.kill()
        proc.wait()
