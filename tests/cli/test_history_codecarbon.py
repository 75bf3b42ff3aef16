"""Emissions on the real daemon watching a SIMULATED DGX Station: `[station] grid_intensity` set
by a code (shown with its source by `engine status`), and `gpudesk history --format codecarbon`
writing codecarbon's emissions.csv rows whose figures are the jobs' own usage, in codecarbon's
units, appended to a file as codecarbon does."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle
from pytest import approx

from gpudesk.cli.emissions import COLUMNS

GPUDESK = [sys.executable, "-m", "gpudesk"]
J_PER_KWH = 3.6e6
CALIFORNIA = "179.064 g CO2e/kWh (US-CA, EPA eGRID2023 via codecarbon 3.3.2)"


def gpudesk(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env)


def codecarbon_rows(text: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    lines = list(csv.reader(io.StringIO(text)))
    header, body = lines[0], lines[1:]
    return header, {
        row[header.index("run_id")]: dict(zip(header, row, strict=True)) for row in body
    }


@pytest.mark.slow(9)
def test_codecarbon_rows_carry_the_jobs_usage_at_the_stations_grid_code(
    sim_engine: EngineHandle, tmp_path: Path
) -> None:
    configured = sim_engine.client.request("configure", station={"grid_intensity": "us-ca"})
    assert configured["station"]["grid_region"] == "US-CA"
    gpu_job, cpu_job = sim_engine.submit(
        {"name": "on-gpu", "command": ["sleep", "1.5"], "gpus": 1},
        {"name": "on-cpu", "command": ["sleep", "0.3"]},
    )
    assert gpudesk("wait", "-q", str(gpu_job), str(cpu_job)).returncode == 0

    status = gpudesk("engine", "status")
    assert f"grid:    {CALIFORNIA}" in status.stdout, status.stdout

    used = {j["name"]: j for j in json.loads(gpudesk("history", "--format", "json").stdout)["jobs"]}
    exported = gpudesk("history", "--format", "codecarbon")
    assert exported.returncode == 0, exported.stderr
    assert "SIMULATED" in exported.stderr  # the note; each simulated row says it too
    header, rows = codecarbon_rows(exported.stdout)
    assert header == list(COLUMNS) and len(header) == 38  # pinned in tests/cli/test_emissions.py
    # a CPU job's energy is its share of RAPL's: where RAPL is not readable it has none, and
    # no row (codecarbon's dashboard would total an empty cell as NaN); stderr says so
    cpu_measured = used["on-cpu"]["energy_j"] is not None
    assert len(rows) == 1 + cpu_measured
    assert ("1 job(s) that ran have no row" in exported.stderr) is not cpu_measured
    by_count = {row["gpu_count"]: row for row in rows.values()}
    gpu = by_count["1"]
    job = used["on-gpu"]
    assert float(gpu["duration"]) == job["wall_s"]
    assert float(gpu["gpu_energy"]) == job["gpu_j"] / J_PER_KWH > 0  # kWh from J
    assert float(gpu["energy_consumed"]) == job["energy_j"] / J_PER_KWH
    # kg from g: the engine's grams are rounded to a milligram, the row's are not
    assert abs(float(gpu["emissions"]) - job["co2e_g"] / 1000) <= 5e-7
    assert float(gpu["emissions"]) == approx(float(gpu["energy_consumed"]) * 179.064 / 1000)
    assert float(gpu["gpu_power"]) == approx(job["gpu_j"] / job["wall_s"])  # W: mean over its run
    if job["cpu_j"] is None:  # RAPL not readable here: not measured, so empty (never 0)
        assert gpu["cpu_energy"] == gpu["cpu_power"] == ""
    else:
        assert float(gpu["cpu_energy"]) == job["cpu_j"] / J_PER_KWH
    assert gpu["ram_energy"] == gpu["ram_power"] == ""  # gpudesk does not measure RAM
    assert gpu["gpu_model"] == "1 x SIMULATED NVIDIA A100-SXM4-40GB"
    assert (gpu["country_name"], gpu["country_iso_code"], gpu["region"]) == (
        "United States",
        "USA",
        "california",
    )
    assert (gpu["project_name"], gpu["tracking_mode"], gpu["on_cloud"], gpu["pue"]) == (
        "gpudesk",
        "process",
        "N",
        "1.0",
    )
    assert gpu["codecarbon_version"].startswith("gpudesk-")
    if cpu_measured:
        cpu = by_count["0"]
        assert (cpu["gpu_model"], cpu["gpu_energy"]) == ("", "")
        assert cpu["experiment_id"] == gpu["experiment_id"]  # both submitted alone: "gpudesk"

    # -o appends as codecarbon does: the header once, and each job's row once
    path = tmp_path / "emissions.csv"
    first = gpudesk("history", "-f", "codecarbon", "-o", str(path))
    assert first.returncode == 0 and f"{path}: {len(rows)} row(s) appended" in first.stderr
    assert codecarbon_rows(path.read_text())[1] == rows  # the ids are the job's for good
    [later] = sim_engine.submit({"name": "later", "command": ["sleep", "0.5"], "gpus": 1})
    assert gpudesk("wait", "-q", str(later)).returncode == 0
    again = gpudesk("history", "-f", "codecarbon", "-o", str(path))
    there = f"{len(rows)} already there (same run_id)"
    assert f"{path}: 1 row(s) appended, {there}" in again.stderr
    text = path.read_text()
    assert text.count("timestamp,project_name") == 1
    assert len(codecarbon_rows(text)[1]) == len(rows) + 1

    path.write_text("timestamp,emissions\n2026-01-01T00:00:00,0.1\n")
    refused = gpudesk("history", "-f", "codecarbon", "-o", str(path))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "does not have the columns of codecarbon 3.3.2's emissions.csv" in refused.stderr
    assert gpudesk("history", "-f", "csv", "-o", str(path)).returncode == 2


def test_an_output_whose_folder_cannot_hold_it_is_refused_before_the_history_is_read(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """As --plot's: a folder that is missing, a file or a link loop is said at once (exit 2),
    not after the history was read and its rows made."""
    (tmp_path / "file").write_text("")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for folder, says in (
        ("missing", "does not exist; make it first (mkdir -p)"),
        ("file", "is a regular file, not a folder"),
        ("loop", "a loop"),
    ):
        target = tmp_path / folder / "emissions.csv"
        done = gpudesk("history", "--format", "codecarbon", "--output", str(target))
        assert done.returncode == 2 and done.stdout == "", (folder, done.stderr)
        assert done.stderr.startswith("error: --output: ") and says in done.stderr, done.stderr
        assert not target.exists()
