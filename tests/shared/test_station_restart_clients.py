"""A station member's `wait`, `logs -f` and `top` while an admin stops the system engine and
starts it again (an upgrade does so; the members' jobs run on): the real CLI, run by a real
member with GPUDESK_SOCKET set, against a real system engine (root only; station_fixture)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import IO

import psutil
import pytest
from conftest import kill_running
from station_fixture import Station

# one station (and user Python) for the module's tests: each leaves the engine running
pytestmark = pytest.mark.xdist_group("test_station_restart_clients")


def as_member(station: Station, *args: str) -> list[str]:
    """The command line of `gpudesk ARGS` run by bob, a member, as `gpudesk` is run there."""
    argv = station.gpudesk_argv(*args, env=("COLUMNS=100", "GPUDESK_BACKEND=none"))
    return ["runuser", "-u", station.users["bob"].name, "--", *argv]


def member(station: Station, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        as_member(station, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )


def end_member(process: subprocess.Popen[str] | None) -> None:
    """Kill a `member` process and what runuser started (killing runuser alone leaves it)."""
    if process is not None and process.poll() is None:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
    kill_running(process)


def gated_job(station: Station, name: str, exit_code: int) -> tuple[int, Path]:
    """A job of bob's that prints `started`, and `ended` then exits `exit_code` once the file
    it returns exists (root makes it: the folder is the station's, 0755)."""
    gate = station.state_dir.parent / f"gate-{name}"
    script = f"echo started; while [ ! -e {gate} ]; do sleep 0.05; done; echo ended; "
    job = {"name": name, "command": ["sh", "-c", script + f"exit {exit_code}"]}
    job_id = station.submit("bob", job)
    station.wait_state(job_id, "running")
    return job_id, gate


def line_with(stream: IO[str], words: str, timeout: float = 30.0) -> str:
    """The first line of `stream` that holds `words` (lines before it are skipped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            raise AssertionError(f"the stream ended before a line with {words!r}")
        if words in line:
            return line
    raise AssertionError(f"no line with {words!r} in {timeout} s")


def test_a_members_wait_and_logs_f_go_on_across_an_engine_restart(
    user_station: Station,
) -> None:
    """Both ended with exit 3 ("the engine stopped answering … set GPUDESK_HOME") when the
    admin restarted the engine, the same status as a job's own exit 3. Now each says once
    that the station's engine is away, without the personal-engine advice, waits for it,
    and ends with the job's real status (5), the job having ended while no engine ran."""
    station = user_station
    first, first_gate = gated_job(station, "first", 0)
    job_id, gate = gated_job(station, "longw", 5)
    wait = member(station, "wait", str(first), str(job_id))
    follow = member(station, "logs", "-f", str(job_id))
    try:
        assert wait.stdout is not None and follow.stdout is not None
        assert wait.stderr is not None and follow.stderr is not None
        assert follow.stdout.readline() == "started\n"
        first_gate.touch()  # its end printed: `wait` is waiting, on the job that goes on
        assert wait.stdout.readline().startswith(f"job {first} (first) succeeded")
        station.stop()
        for process in (wait, follow):
            said = process.stderr.readline()
            assert said.startswith(
                f"gpudesk: the station's engine at {station.socket} is not answering"
            ), said
            assert "an admin starts it" in said and "GPUDESK_HOME" not in said
            assert process.poll() is None  # still waiting
        gate.touch()  # the job ends while no engine runs
        time.sleep(1.5)
        assert wait.poll() is None and follow.poll() is None
        station.start()
        for process in (wait, follow):
            out, err = process.communicate(timeout=60)
            assert process.returncode == 5, out + err
            assert err.startswith("gpudesk: the engine answers again"), err
            assert "error" not in err and "Traceback" not in err
        assert out == "ended\n"
    finally:
        kill_running(wait, follow)
        if station.process is None:
            station.start()
    assert station.job(job_id)["exit_code"] == 5


def test_top_with_the_station_engine_down_says_so_and_claims_no_jobs(
    user_station: Station,
) -> None:
    """`top --once` said "engine not running … no running jobs", exit 0, while bob's job ran
    on. Now `--once` and `--json` give the paragraph `queue` gives, exit 3, and no frame; the
    live top says the engine is not running, that the jobs are unknown, and shows the engine's
    view, with bob's job, once it is back."""
    station = user_station
    job_id, gate = gated_job(station, "topjob", 0)
    station.stop()
    live = None
    try:
        queue = subprocess.run(as_member(station, "queue"), capture_output=True, text=True)
        paragraph = queue.stderr.strip()
        assert paragraph.startswith("error: the station's engine at "), queue.stderr
        for args in (["--once"], ["--json"]):
            done = subprocess.run(as_member(station, "top", *args), capture_output=True, text=True)
            assert done.returncode == 3, done.stdout + done.stderr
            assert done.stderr.strip() == paragraph and done.stdout == ""
        live = member(station, "top", "--interval", "0.3")
        assert live.stdout is not None
        line_with(live.stdout, "engine not running")  # the header; the note says who starts it
        assert line_with(live.stdout, "running jobs").startswith("running jobs: unknown")
        station.start()
        frame = line_with(live.stdout, "topjob")  # its row in the engine's view
        assert str(job_id) in frame
        end_member(live)
        shown = json.loads(
            subprocess.run(
                as_member(station, "top", "--json"), capture_output=True, text=True
            ).stdout
        )
        assert [job["id"] for job in shown["jobs"]] == [job_id]
    finally:
        end_member(live)
        if station.process is None:
            station.start()
        gate.touch()
    station.wait_state(job_id, "succeeded")
