"""`gpudesk history` on the real daemon watching a SIMULATED GPU: finished jobs with their
usage as a table within 80 columns, and as CSV and JSON in joules."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import EngineHandle

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.slow(7)
def test_history_reports_usage_and_energy_as_csv_json_and_a_table(
    sim_engine: EngineHandle,
) -> None:
    gpu_job, cpu_job = sim_engine.submit(
        {"name": "on-gpu", "command": ["sleep", "1.5"], "gpus": 1},
        {"name": "on-cpu", "command": ["sh", "-c", "exit 3"]},
    )
    assert gpudesk("wait", "-q", str(gpu_job), str(cpu_job)).returncode == 3

    table = gpudesk("history")
    assert table.returncode == 0, table.stderr
    assert all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
    assert "RAN ON" in table.stdout and "Wh" in table.stdout

    rows = {
        row["name"]: row
        for row in csv.DictReader(io.StringIO(gpudesk("history", "--format", "csv").stdout))
    }
    assert {"energy_j", "gpu_j", "cpu_j", "co2e_g", "gpu_s", "cpu_s", "placement"} <= set(
        rows["on-gpu"]
    )
    gpu_row, cpu_row = rows["on-gpu"], rows["on-cpu"]
    assert (gpu_row["state"], cpu_row["state"], cpu_row["exit_code"]) == (
        "succeeded",
        "failed",
        "3",
    )
    assert float(gpu_row["energy_j"]) > 0 and float(gpu_row["gpu_j"]) > 0
    assert float(gpu_row["co2e_g"]) > 0
    assert 1.4 <= float(gpu_row["gpu_s"]) <= 10  # 1.5 s on one GPU
    assert gpu_row["placement"].startswith("gpu:0") and cpu_row["placement"].startswith("cpu:")
    assert float(cpu_row["gpu_s"]) == 0.0

    # times for a spreadsheet: ISO 8601 in UTC with the offset, not epoch seconds
    ended = dt.datetime.fromisoformat(gpu_row["ended_at"])
    assert gpu_row["ended_at"].endswith("+00:00") and ended.utcoffset() == dt.timedelta(0)
    assert abs(ended.timestamp() - time.time()) < 600
    assert cpu_row["started_at"] and dt.datetime.fromisoformat(cpu_row["submitted_at"])

    # what the table leaves out at 80 columns it names; --wide shows it
    assert "CO2E, MAXRSS, GPU MEM with --wide, or in --format csv)" in table.stdout
    wide = gpudesk("history", "--wide").stdout.splitlines()
    assert wide[1].split()[2] == "USER"
    assert wide[1].split()[-6:] == ["CPU-S", "MAXRSS", "GPU", "MEM", "ENERGY", "CO2E"]

    # the station's GPUs are SIMULATED, and every form of the report says so: the table first,
    # as `queue` does; the JSON beside the jobs; the CSV in each GPU job's row; `show` first
    backend = "sim:dgx-station-a100"  # the fixture's
    banner = f"SIMULATED station ({backend}): its GPUs are not real"
    assert table.stdout.splitlines()[0] == banner == wide[0]
    assert (gpu_row["simulated"], cpu_row["simulated"]) == (backend, "")
    shown = gpudesk("show", str(gpu_job)).stdout.splitlines()
    assert shown[0] == banner and shown[1].startswith(f"job {gpu_job}: on-gpu")
    assert gpudesk("show", str(cpu_job)).stdout.startswith(f"job {cpu_job}: on-cpu")

    report = json.loads(gpudesk("history", "--format", "json").stdout)
    listed = report["jobs"]
    assert report["simulated"] == backend
    assert [(job["name"], job["simulated"]) for job in listed] == [
        ("on-gpu", backend),
        ("on-cpu", ""),
    ]
    assert listed[0]["energy_j"] == float(gpu_row["energy_j"])

    assert (
        gpudesk("history", "--since", "1h", "--format", "json").stdout
        == gpudesk("history", "--format", "json").stdout
    )
    later = time.strftime("%Y-%m-%d", time.localtime(time.time() + 2 * 86400))
    assert gpudesk("history", "--since", later).stdout.strip() == f"no finished jobs since {later}"
    bad = gpudesk("history", "--since", "tomorrow")
    assert bad.returncode == 2 and "is not a time" in bad.stderr
    assert gpudesk("history", "--format", "xml").returncode == 2
    # a limit below 1 was taken as 1, silently
    none = gpudesk("history", "--limit", "0")
    assert none.returncode == 2 and "0 is not in the range x>=1" in none.stderr


@pytest.mark.parametrize("user", ["99999999999999999999", "4294967296", "²"])
def test_a_user_that_is_no_uid_is_said_to_be_no_user(sim_engine: EngineHandle, user: str) -> None:
    """`--user` takes a name or a uid: digits beyond any uid (which SQLite cannot even hold) or
    a digit that is not ASCII are no user of this station (exit 2), not an engine failure."""
    for command in (("history",), ("queue",)):
        refused = gpudesk(*command, "--user", user)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr == f"error: 'user': no user named {user!r} on this station\n"
