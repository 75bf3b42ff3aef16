"""A job of a station calls `gpudesk` (a job that chains jobs, a sweep's driver): it must talk
to that station. Real users, a real system engine and the real CLI run as each user (root only).

The engine gave its jobs GPUDESK_HOME=<its state folder> and no GPUDESK_SOCKET, so `gpudesk` in
a job took root's state folder for a personal home of someone else's and failed, telling the
member to `sudo chown -R` the station's state to herself. A job of a station now gets the
station's socket and no GPUDESK_HOME of root's; a member who names the state folder as her home
is told it is the station's, never to take it."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from station_fixture import Station

# one station (and user Python) for the module (the module stays on one worker, --dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_station_job_env")


def test_gpudesk_in_a_station_job_submits_to_the_station(user_station: Station) -> None:
    """Her shell sent no GPUDESK_SOCKET (a station at its default socket: members set none)."""
    station = user_station
    inner = f"{shlex.quote(station.python)} -P -m gpudesk submit --name chained -- true"
    script = f'echo "home=${{GPUDESK_HOME-unset}} socket=${{GPUDESK_SOCKET-unset}}"; {inner}'
    job = {"name": "chain", "command": ["sh", "-c", script], "workdir": "/", "gpus": 0}
    job_id = station.submit("ada", job, env={"PATH": "/usr/bin:/bin"})
    done = station.wait_state(job_id, "succeeded", "failed", timeout=120)
    said = Path(done["log"]).read_text()
    assert done["state"] == "succeeded", said
    assert said.splitlines()[0] == f"home=unset socket={station.socket}", said
    assert "chown" not in said, said
    [chained] = [j for j in station.ok(None, "jobs")["jobs"] if j["name"] == "chained"]
    assert chained["user"] == station.users["ada"].name, chained
    station.wait_state(chained["id"], "succeeded", "failed")


@pytest.mark.parametrize("command", [["submit", "--", "true"], ["queue"]])
def test_the_station_state_named_as_a_home_is_said_to_be_the_stations(
    user_station: Station, command: list[str]
) -> None:
    station = user_station
    env = ["env", "-u", "GPUDESK_SOCKET", f"GPUDESK_HOME={station.state_dir}"]
    done = station.run_as("ada", *env, station.python, "-P", "-m", "gpudesk", *command)
    assert done.returncode != 0, done.stdout
    said = done.stderr
    assert f"{station.state_dir} is the state folder of a shared station's engine" in said, said
    assert "GPUDESK_SOCKET" in said and "chown" not in said, said
    assert "Traceback" not in said, said
