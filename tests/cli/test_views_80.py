"""The CLI's views at 80 columns on a real engine: a sweep's job names keep the part where
they differ, ids and states are never clipped, and `queue` says why each job waits."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import SWEEP_NAMES as SWEEP
from conftest import EngineHandle, Run
from conftest import lines_within as fits

from gpudesk.paths import Home


def test_queue_at_80_columns_keeps_sweep_names_apart_and_says_why_each_job_waits(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = tmp_path / "gate"
    blocker = engine.occupy_the_only_slot(gate)
    ids = engine.submit(*({"name": name, "command": ["true"]} for name in SWEEP))
    (after,) = engine.submit({"name": "after-sweep", "command": ["true"], "after": [ids[-1]]})
    (held,) = engine.submit({"name": "held-one", "command": ["true"]})
    assert gpudesk("hold", str(held))[0] == 0
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = gpudesk("queue")
    assert code == 0, err
    lines = fits(out)
    # TRY gives way (names would be clipped below 16 characters with it); the rest stays
    assert lines[0].split() == [
        "ID", "NAME", "USER", "STATE", "PRI", "GPUS", "TIME", "SUBMITTED", "SLOT(REASON)",
    ]  # fmt: skip
    rows = {int(line.split()[0]): line.split() for line in lines[1:]}
    names = [rows[i][1] for i in ids]
    assert len(set(names)) == len(SWEEP), names  # each job told apart
    for shown, name in zip(names, SWEEP, strict=True):
        head, _, tail = shown.partition("…")
        assert name.startswith(head) and name.endswith(tail) and len(tail) >= len("h512-1")
    assert rows[blocker][3] == "running" and rows[blocker][-1] == "cpu:0"
    assert rows[ids[0]][-1] == "(Resources)"  # next to start: it waits for room
    assert [rows[i][-1] for i in ids[1:]] == ["(Priority)"] * 3
    assert rows[after][-1] == "(Dependency)"
    assert rows[held][3] == "held" and rows[held][-1] == "(JobHeldUser)", out
    gate.touch()
    engine.wait_state(ids[-1], "succeeded")
    code, out, err = gpudesk("queue", "--all")  # with EXIT: PRI and SUBMITTED give way too
    lines = fits(out)
    assert lines[0].split() == [
        "ID", "NAME", "USER", "STATE", "GPUS", "TIME", "EXIT", "SLOT(REASON)",
    ]  # fmt: skip
    assert [line.split()[1] for line in lines[2:6]] == list(SWEEP)


def test_queue_says_a_per_user_gpu_limit_holds_a_job(home: Home, gpudesk: Run) -> None:
    engine = EngineHandle(home)
    engine.start(backend="sim:a100-40gbx2", sample_interval=0.2, max_running_gpus_per_user=1)
    light = {"gpus": 1, "memory_gb": 4, "sm_pct": 20, "command": ["sleep", "30"]}
    first, second = engine.submit({"name": "one", **light}, {"name": "two", **light})
    engine.wait_state(first, "running")
    listed = {j["id"]: j for j in engine.client.request("jobs", states=["queued"])["jobs"]}
    assert listed[second]["wait_reason"] == "QOSMaxGRESPerUser"  # a GPU is free: her limit
    code, out, err = gpudesk("queue")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[0] == str(second))
    assert row.split()[-1] == "(QOSMaxGRESPerUser)"
    engine.client.request("cancel", jobs=[first, second], grace=0)
    engine.client.close()


def test_piped_queue_keeps_whole_names_for_scripts(
    engine: EngineHandle, gpudesk_cmd: list[str], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    engine.occupy_the_only_slot(gate)
    # 42 characters: wider than 80 columns allow here, and than a fitted table ever shows
    long_name = "light-lr0.001-h512-wd0.01-seed42-warmup100"
    (job_id,) = engine.submit({"name": long_name, "command": ["true"]})
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run(
        [*gpudesk_cmd, "queue"], capture_output=True, text=True, timeout=60, env=env
    )
    assert piped.returncode == 0, piped.stderr
    row = next(line for line in piped.stdout.splitlines() if line.split()[0] == str(job_id))
    assert row.split()[1] == long_name and row.split()[-1] == "(Resources)"
    fitted = subprocess.run(
        [*gpudesk_cmd, "queue"], capture_output=True, text=True, timeout=60,
        env={**env, "COLUMNS": "72"},
    )  # fmt: skip
    assert all(len(line) <= 72 for line in fitted.stdout.splitlines()), fitted.stdout
    gate.touch()


def test_queue_of_a_suspended_job_has_no_exit_column(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EXIT is there where a listed job has ended: a suspended one has not (it had `EXIT -`)."""
    gate = tmp_path / "gate"
    job = engine.occupy_the_only_slot(gate)
    assert gpudesk("suspend", str(job))[0] == 0
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = gpudesk("queue")
    assert code == 0, err
    assert "EXIT" not in out.splitlines()[0].split() and " suspended " in out, out
    assert gpudesk("resume", str(job))[0] == 0
    gate.touch()
    engine.wait_state(job, "succeeded")
