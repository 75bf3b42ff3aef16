"""The CLI's views at 80 columns on a real engine: a sweep's job names keep the part where
they differ, ids and states are never clipped, and `queue` says why each job waits."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SWEEP_NAMES as SWEEP
from conftest import EngineHandle, Run
from conftest import lines_within as fits


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
    assert lines[0].split() == [
        "ID",
        "NAME",
        "USER",
        "STATE",
        "PRI",
        "TRY",
        "GPUS",
        "TIME",
        "SUBMITTED",
        "SLOT(REASON)",
    ]
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
