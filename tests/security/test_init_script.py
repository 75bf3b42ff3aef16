"""packaging/sysvinit/gpudesk, the init script of a host without systemd, acts on the station
its settings name (STATE_DIR, SOCKET, GROUP, ADMIN_GROUP, from /etc/default/gpudesk), not only
on the default one: its paths were written into the script four times, so a station at another
socket had `status` say the engine was down and `start` try to start a second one. Found
installing a station by docs/shared-station.md as its sysadmin would (session 58). A real
system engine, the real script (root only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from station_fixture import Station

pytestmark = pytest.mark.xdist_group("test_init_script")

SCRIPT = Path(__file__).resolve().parents[2] / "packaging" / "sysvinit" / "gpudesk"


def init_script(station: Station, action: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDESK")}
    env |= {
        "COLUMNS": "300",
        "GPUDESK_BACKEND": "none",
        "GPUDESK_INIT_GPUDESK": str(Path(sys.executable).parent / "gpudesk"),
        "GPUDESK_INIT_STATE_DIR": str(station.state_dir),
        "GPUDESK_INIT_SOCKET": str(station.socket),
        "GPUDESK_INIT_GROUP": station.group,
        "GPUDESK_INIT_ADMIN_GROUP": station.admin_group,
    }
    return subprocess.run(
        ["sh", str(SCRIPT), action], capture_output=True, text=True, timeout=60, cwd="/", env=env
    )


def test_the_init_script_acts_on_the_station_its_settings_name(user_station: Station) -> None:
    station = user_station
    done = init_script(station, "status")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"state:   {station.state_dir}" in done.stdout
    done = init_script(station, "start")  # LSB: a start of the running service succeeds
    assert done.returncode == 0, done.stdout + done.stderr
    assert "already running" in done.stdout
    assert station.ok(None, "ping")  # the running engine was left as it was
