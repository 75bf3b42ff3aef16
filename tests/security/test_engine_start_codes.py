"""`gpudesk engine start --system` exits as the daemon does (docs/shared-station.md: 2 bad
arguments, 3 another engine, 4 an unusable state folder), with the daemon's words; where the
station's engine already runs, a start asking for another state folder or group is told the
running engine keeps its own (exit 3), and a member's `gpudesk engine start` is told it runs.
Real users, a real system engine, the real CLI (root only)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from station_fixture import Station

pytestmark = pytest.mark.xdist_group("test_engine_start_codes")


def start_as_root(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-P", "-m", "gpudesk", "engine", "start", "--system", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDESK_")}
    env |= {"COLUMNS": "300", "GPUDESK_BACKEND": "none"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", env=env)


def test_a_start_of_the_running_station_succeeds_and_one_asking_for_another_is_exit_3(
    user_station: Station,
) -> None:
    station = user_station
    same = ("--state-dir", str(station.state_dir), "--socket", str(station.socket))
    done = start_as_root(*same, "--group", station.group)
    assert done.returncode == 0, done.stderr
    assert "is already running (pid" in done.stdout
    for other in (
        ("--state-dir", str(station.state_dir.parent / "other"), "--group", station.group),
        ("--state-dir", str(station.state_dir), "--group", station.admin_group),
    ):
        args = (*other[:2], "--socket", str(station.socket), *other[2:])
        done = start_as_root(*args)
        assert done.returncode == 3, (other, done.stdout, done.stderr)
        assert "keeps its own settings" in done.stderr and "Traceback" not in done.stderr
    assert not (station.state_dir.parent / "other").exists()
    done = start_as_root(*same, "--group", "nosuchgrp-gd")
    assert done.returncode == 2, done.stderr
    assert "--group nosuchgrp-gd: there is no such group" in done.stderr
    assert station.ok(None, "ping")  # the running engine was left as it was


def test_a_state_folder_of_a_member_is_exit_4(user_station: Station) -> None:
    station = user_station
    ada = station.users["ada"]
    top = Path(tempfile.mkdtemp(prefix="gd-codes-", dir="/tmp"))
    try:
        (top / "hers").mkdir()
        os.chown(top / "hers", ada.uid, ada.gid)
        args = ("--state-dir", str(top / "hers"), "--socket", str(top / "run" / "c.sock"))
        done = start_as_root(*args, "--group", station.group)
        assert done.returncode == 4, done.stdout + done.stderr
        assert f"belongs to {ada.name}" in done.stderr and "Traceback" not in done.stderr
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)


def test_a_members_start_is_told_the_stations_engine_runs(user_station: Station) -> None:
    station = user_station
    done = station.gpudesk_as("ada", "engine", "start")
    assert done.returncode == 0, done.stdout + done.stderr
    pid = station.process.pid if station.process else None
    assert done.stdout.strip() == (
        f"the station's engine at {station.socket} is already running (pid {pid})"
    )
