"""Whoever talks to a SIMULATED station is told so where she acts on it: `gpudesk submit` and
`gpudesk queue` say the station's GPUs are not real (and `--json` names the simulated backend),
so that a job meant for real GPUs is not quietly "placed" on simulated ones. On a real (here
CPU-only) station they say nothing of the kind."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import EngineHandle

GPUDESK = [sys.executable, "-m", "gpudesk"]


def submit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUDESK, "submit", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_submit_on_a_simulated_station_says_so(sim_engine: EngineHandle) -> None:
    done = submit("--gpus", "1", "--", "true")
    assert done.returncode == 0, done.stderr
    assert "on a SIMULATED station (sim:dgx-station-a100: its GPUs are not real)" in done.stdout
    as_json = submit("--json", "--", "true")
    assert json.loads(as_json.stdout)["simulated"] == "sim:dgx-station-a100"


def test_submit_on_a_real_station_says_nothing_of_it(engine: EngineHandle) -> None:
    done = submit("--", "true")
    assert done.returncode == 0, done.stderr
    assert "SIMULATED" not in done.stdout and done.stdout.startswith("submitted job ")
    assert json.loads(submit("--json", "--", "true").stdout)["simulated"] is None


def queue(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUDESK, "queue", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_queue_on_a_simulated_station_says_so(sim_engine: EngineHandle) -> None:
    sim_engine.submit({"name": "waits", "command": ["sleep", "30"], "gpus": 1})
    for listing in (queue(), queue("--all"), queue("--state", "succeeded")):
        assert listing.returncode == 0, listing.stderr
        first = listing.stdout.splitlines()[0]
        assert first == "SIMULATED station (sim:dgx-station-a100): its GPUs are not real"
    assert json.loads(queue("--json").stdout)["simulated"] == "sim:dgx-station-a100"


def test_queue_on_a_real_station_says_nothing_of_it(engine: EngineHandle) -> None:
    listing = queue()
    assert listing.returncode == 0 and "SIMULATED" not in listing.stdout
    assert json.loads(queue("--json").stdout)["simulated"] is None
