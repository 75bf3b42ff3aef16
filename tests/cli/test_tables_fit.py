"""Job tables fit the terminal they are written to, as squeue's and nvitop's do: at 40 columns
the least needed columns give way (never the id or the state) and names are clipped; at 200 a
name takes the room there is and is shown whole. A real engine on a SIMULATED station, the
commands run in-process with $COLUMNS set (a pipe without it keeps whole cells:
tests/cli/test_views_80.py)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest
from conftest import EngineHandle, Run, module_engine, wait_for

from gpudesk import render

LONG = "resnet50-imagenet-lr0.1-bs256-wd1e-4-cosine-warmup5-seed1234"  # 60 characters
NAMES = ("a", LONG, "medium-name-sweep-01", "bert-finetune-squad-v2-lr3e-5", "x1", "eval-42")
Station = tuple[EngineHandle, list[int]]


# the module's tests share one station (below): they stay on one worker, which makes it once
pytestmark = pytest.mark.xdist_group("test_tables_fit")


@pytest.fixture(scope="module")
def station(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Station]:
    """Six jobs of names 1 to 60 characters long on two SIMULATED GPUs, some running. One
    station for the module: its tests only read it (a view at a width), and an engine with
    its six jobs for each of them was ~0.5 CPU-s a test (docs/benchmarks.md)."""
    with module_engine(
        tmp_path_factory, "tables-fit", backend="sim:h100x2", sample_interval=0.2
    ) as engine:
        light = {"gpus": 1, "memory_gb": 4, "sm_pct": 20, "command": ["sleep", "600"]}
        ids = engine.submit(*({"name": name, **light} for name in NAMES))
        engine.wait_state(ids[1], "running")
        yield engine, ids
        engine.client.request("cancel", jobs=ids, grace=0)


def within(out: str, columns: int) -> list[str]:
    lines = out.splitlines()
    assert lines and all(render.cell_width(line) <= columns for line in lines), "\n" + out
    return lines


def printed(gpudesk: Run, monkeypatch: pytest.MonkeyPatch, columns: int, *args: str) -> str:
    """What `gpudesk ARGS` prints, succeeding, on a terminal $COLUMNS says is `columns` wide."""
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = gpudesk(*args)
    assert code == 0, err
    return out


@pytest.mark.parametrize("columns", [40, 80])
def test_queue_fits_the_terminal_keeping_each_id_and_state(
    station: Station, gpudesk: Run, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    _, ids = station
    out = printed(gpudesk, monkeypatch, columns, "queue")
    lines = within(out, columns)
    assert lines[0].startswith("SIMULATED station")  # folded, never dropped
    at = next(n for n, line in enumerate(lines) if line.startswith("ID  NAME"))
    header = lines[at].split()
    assert header[-1] == "SLOT(REASON)" and "…" not in lines[at]
    rows = {int(line.split()[0]): line.split() for line in lines[at + 1 :]}
    assert sorted(rows) == ids
    assert {rows[i][header.index("STATE")] for i in ids} <= {"running", "queued"}


def test_queue_on_a_wide_terminal_shows_a_long_name_whole(
    station: Station, gpudesk: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, ids = station
    out = printed(gpudesk, monkeypatch, 200, "queue")
    row = next(line for line in within(out, 200) if line.split()[:1] == [str(ids[1])])
    assert row.split()[1] == LONG
    # the column is as wide as its longest name, no wider
    header = next(line for line in out.splitlines() if line.startswith("ID"))
    assert header.index("USER") == row.index(LONG) + len(LONG) + 2


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_tops_jobs_table_fits_with_whole_columns(
    station: Station, gpudesk_cmd: list[str], columns: int
) -> None:
    # a process of its own: top writes to the sys.stdout it was imported with
    def top(*args: str) -> str:
        env = {**os.environ, "COLUMNS": str(columns)}
        done = subprocess.run([*gpudesk_cmd, "top", *args], capture_output=True, text=True,
                              timeout=60, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    _, ids = station
    wait_for(lambda: json.loads(top("--json"))["jobs"], 10.0, interval=0.2, what="the jobs")
    out = top("--once")
    lines = within(out, columns)
    assert "SIMULATED" in lines[0]
    at = next(n for n, line in enumerate(lines) if line.startswith("ID  USER  NAME"))
    # columns that do not fit are left out whole, not cut off mid-word at the window's edge
    assert "…" not in lines[at] and lines[at].split()[-1] in ("TIME", "ENERGY"), out
    row = next(line for line in lines[at:] if line.split()[:1] == [str(ids[1])])
    assert (LONG in row) == (columns == 200), row


def folded_within(out: str, columns: int) -> list[str]:
    """`within`, but for a word wider than the room (a path: never broken), alone on its line."""
    lines = out.splitlines()
    wide = [line for line in lines if render.cell_width(line) > columns]
    assert lines and all(len(line.split()) == 1 for line in wide), "\n" + out
    return lines


@pytest.mark.parametrize("columns", [40, 80])
def test_engine_status_folds_each_value_under_its_key(
    station: Station, gpudesk: Run, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    out = printed(gpudesk, monkeypatch, columns, "engine", "status")
    lines = folded_within(out, columns)
    # a key starts its line, its value continues under the value, never under the key
    keys = [line.split(":")[0] for line in lines if not line.startswith(" ")]
    assert {"engine", "station", "jobs", "loop"} <= set(keys), out
    assert all(line.startswith(" " * 9) for line in lines if line.startswith(" ")), out
    assert "(SIMULATED)" in " ".join(out.split())


@pytest.mark.parametrize("columns", [40, 80])
@pytest.mark.parametrize("command", [("mig", "profiles"), ("mig", "plan")])
def test_mig_views_fit_leaving_out_the_engine_counts(
    station: Station,
    gpudesk: Run,
    monkeypatch: pytest.MonkeyPatch,
    columns: int,
    command: tuple[str, ...],
) -> None:
    out = printed(gpudesk, monkeypatch, columns, *command)
    lines = within(out, columns)
    assert "[SIMULATED]" in " ".join(out.split())
    if command[1] == "profiles":  # each profile kept, by its id and name
        assert any(line.split()[:2] == ["19", "1g.10gb"] for line in lines), out
        assert "OFA with --json or a wider terminal)" in " ".join(out.split())


@pytest.mark.parametrize("columns", [40, 80])
def test_show_folds_its_fields_keeping_each_word_whole(
    station: Station, gpudesk: Run, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    engine, ids = station
    job = ids[1]  # the 60-character name, running on a GPU: an attempt, weighed slots, usage
    wait_for(lambda: (u := engine.show(job).usage) is not None and u.gpu_j is not None, 20.0,
             what="the job to be measured")  # fmt: skip
    out = printed(gpudesk, monkeypatch, columns, "show", str(job))
    # only a line holding one word longer than the room (a path, the name), and its label,
    # runs past: as test_show_truth has it at 80 columns
    long = [line for line in out.splitlines() if render.cell_width(line) > columns]
    assert all(len(line.split()) <= 2 for line in long), "\n" + out
    words = out.split()
    assert LONG in words and "running" in words and "SIMULATED" in words
    assert "[energy counter;" in " ".join(words)


@pytest.mark.parametrize("columns", [40, 80])
def test_model_show_fits_keeping_each_parameter_and_its_value(
    station: Station, gpudesk: Run, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    out = printed(gpudesk, monkeypatch, columns, "model", "show")
    lines = within(out, columns)
    assert "SIMULATED" in lines[0]
    at = next(n for n, line in enumerate(lines) if line.split()[:2] == ["PARAMETER", "VALUE"])
    assert lines[at + 1].split()[0] == "mps_tenant_cost" and len(lines[at + 1].split()) >= 2


@pytest.mark.parametrize("columns", [40, 80])
def test_select_presets_fits(gpudesk: Run, monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    out = printed(gpudesk, monkeypatch, columns, "select", "presets")
    assert "docs/selection.md" in within(out, columns)[-1]
