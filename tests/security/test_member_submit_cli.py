"""`gpudesk submit` as a member of a shared station: what the engine refuses of a job's field
is said as the option that gave it (`--priority: …`, not the request's `jobs[0] ('x').priority`),
exit 1 for a refusal (exit 2 for bad input), nothing queued. Real users, a real system engine
and the real CLI, run by each user as `gpudesk` is (root only)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from user_python import user_python_folder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))
from station_fixture import Station, make_station


@pytest.fixture
def setup() -> Iterator[tuple[Station, str]]:
    with user_python_folder() as python:
        for station in make_station(python=python):
            yield station, python


def submit_as(station: Station, python: str, role: str, *args: str) -> subprocess.CompletedProcess:
    argv = [python, "-P", "-m", "gpudesk", "submit", *args]
    env = ["env", f"GPUDESK_SOCKET={station.socket}", "COLUMNS=300"]
    return subprocess.run(
        ["runuser", "-u", station.users[role].name, "--", *env, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )


def test_a_members_raised_priority_is_refused_as_the_option(setup: tuple[Station, str]) -> None:
    station, python = setup
    done = submit_as(station, python, "ada", "--name", "jump", "--priority", "5", "--", "true")
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stderr
    assert said.startswith("error: --priority: refused: only "), said
    assert station.admin_group in said and "Nothing was submitted" in said
    assert "jobs[" not in said and "Traceback" not in said
    assert len(said.strip().splitlines()) == 1, said
    assert station.ok("ada", "jobs")["jobs"] == []
    # an admin may: the same command queues it
    done = submit_as(station, python, "admin", "--name", "jump", "--priority", "5", "--", "true")
    assert done.returncode == 0, done.stderr
