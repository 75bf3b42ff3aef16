"""A process is named by its pid and its start on the boot's own clock (gpudesk.hw.process_start):
no clock step, and no move of /proc/stat's `btime`, makes a live process look gone, and a pid
that another process took is not the one recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psutil
import psutil._pslinux
import pytest

from gpudesk.hw import boottime, process_start, runner
from gpudesk.loader.protocol import (
    PID_MAX_LIMIT,
    ProducerInfo,
    gone,
    process_alive,
    read_info,
    recorded_pid,
    recorded_runs,
    this_process,
)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def test_the_start_is_the_kernels_tick_from_boot_and_does_not_move(
    child: subprocess.Popen[bytes],
) -> None:
    start = process_start.started(child.pid)
    assert start is not None
    # field 22 of /proc/PID/stat, in clock ticks (proc(5)); psutil reads the same tick
    with open(f"/proc/{child.pid}/stat", "rb") as fh:
        ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])
    assert start == ticks / os.sysconf("SC_CLK_TCK")
    assert start == pytest.approx(
        psutil.Process(child.pid).create_time() - psutil.boot_time(), abs=0.02
    )
    assert 0 < start <= boottime.now()
    assert process_start.started(child.pid) == start
    assert process_start.runs(child.pid, start)


def test_a_move_of_btime_does_not_make_a_live_process_look_gone(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a wall-clock step (NTP, `date -s`, a resumed VM) does to a reader of `btime` after
    it: psutil's create_time() moves with it, so a start recorded as create_time() before the
    step and compared after it said a live producer had exited, and an engine restarted after it
    settled its running jobs."""
    recorded = process_start.started(child.pid)
    legacy = psutil.Process(child.pid).create_time()
    stepped = psutil._pslinux.boot_time() + 2.0
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: stepped)
    assert abs(psutil.Process(child.pid).create_time() - legacy) == pytest.approx(2.0)
    assert process_start.runs(child.pid, recorded)
    assert runner.is_alive(child.pid, recorded)
    assert process_alive(child.pid, recorded)


def test_a_pid_with_another_start_is_another_process(child: subprocess.Popen[bytes]) -> None:
    start = process_start.started(child.pid)
    assert start is not None
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    assert not process_start.runs(child.pid, start + tick)
    assert not process_start.runs(child.pid, start - tick)
    assert not runner.is_alive(child.pid, start + 1.0)
    # a start not known (None, or the 0.0 a launch records when it could not read one) is any
    assert runner.is_alive(child.pid, None) and runner.is_alive(child.pid, 0.0)


def test_a_zombie_and_a_reaped_process_do_not_run() -> None:
    proc = subprocess.Popen(["true"])
    start = process_start.started(proc.pid)
    # not reaped yet: a zombie once it exits
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
    assert not process_start.runs(proc.pid) and not process_start.runs(proc.pid, start)
    proc.wait()
    assert not process_start.runs(proc.pid, start)
    assert process_start.started(proc.pid) is None
    assert not process_start.runs(0) and not process_start.runs(-1)
    assert process_start.started(0) is None


def test_a_command_name_with_spaces_and_parentheses_is_read_past(tmp_path: Path) -> None:
    """/proc/PID/stat's second field is the command's name in parentheses, as it is: the
    fields after it are found from the last ')'."""
    odd = tmp_path / "a) b (c) 9 9"
    shutil.copy("/bin/sleep", odd)
    proc = subprocess.Popen([str(odd), "60"])
    try:
        with open(f"/proc/{proc.pid}/stat", "rb") as fh:
            assert b"(a) b (c) 9 9)" in fh.read()
        start = process_start.started(proc.pid)
        assert start == pytest.approx(
            psutil.Process(proc.pid).create_time() - psutil.boot_time(), abs=0.02
        )
        assert process_start.runs(proc.pid, start)
    finally:
        proc.kill()
        proc.wait()


def test_a_start_recorded_by_an_earlier_gpudesk_as_create_time_is_still_read(
    child: subprocess.Popen[bytes],
) -> None:
    """Stores and info files written before the boot's tick was kept hold create_time(), in
    seconds since the epoch: still running processes recorded so are still recognised."""
    legacy = psutil.Process(child.pid).create_time()
    assert legacy > 1e9
    assert process_start.runs(child.pid, legacy)
    assert not process_start.runs(child.pid, legacy + 1.0)
    assert recorded_runs(ProducerInfo(pid=child.pid, create_time=legacy))


def test_an_info_file_names_its_process_with_its_boot() -> None:
    me = this_process()
    assert me.pid == os.getpid()
    assert me.started is not None and me.started == process_start.started(os.getpid())
    assert me.boot_id == boottime.boot_id()
    assert recorded_runs(me)
    # recorded in another boot: whatever runs with that pid and tick now, it is not the one
    other_boot = "00000000-0000-0000-0000-000000000000"
    assert not recorded_runs(msgspec.structs.replace(me, boot_id=other_boot))
    assert not recorded_runs(msgspec.structs.replace(me, started=me.started + 1.0))


def test_another_process_reads_the_same_start() -> None:
    """The start is recorded by one process (a producer writing its info file, the engine
    launching a wrapper) and compared by another: both read the same tick."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        code = (
            f"from gpudesk.hw import process_start; print(repr(process_start.started({proc.pid})))"
        )
        there = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert float(there.stdout) == process_start.started(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_a_start_that_is_no_number_names_no_process(
    child: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """A member's info file says what she likes: root's engine reads its start and must not
    fail on it (on its loop), nor take the pid it names for her producer. A start of another
    type makes the file no info at all; a number that is no start names no process."""
    path = tmp_path / "d.json"
    for start in ("soon", [1.0], {"at": 1.0}, True):
        assert not process_start.runs(child.pid, start), start
        path.write_text(json.dumps({"pid": child.pid, "started": start}))
        assert read_info(path) is None, start
    for number in (float("nan"), float("inf"), -1.0):
        assert not process_start.runs(child.pid, number), number
        assert not recorded_runs(ProducerInfo(pid=child.pid, started=number)), number


def test_a_pid_that_is_no_number_names_no_process(tmp_path: Path) -> None:
    """A damaged info file, or one a member wrote as she liked: no process, and no traceback
    in whoever reads it (her job's consumer, the engine's loop). A pid of another type makes
    the file no info at all; a number that is no pid names no process."""
    path = tmp_path / "d.json"
    for pid in ("12", "abc", 3.5, True, None, [1], 2**70, PID_MAX_LIMIT + 1, -4):
        path.write_text(json.dumps({"pid": pid, "started": 1.0}))
        assert read_info(path) is None, pid
    path.write_text(json.dumps({"pid": 0, "started": 1.0}))
    info = read_info(path)
    assert info is not None and recorded_pid(info) == 0 and not recorded_runs(info)
    assert gone(info, tmp_path / "none.json") == "it has exited"
