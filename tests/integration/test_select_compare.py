"""`gpudesk select compare` end to end: a real engine, real pre-pass jobs, real torch training
jobs reading the real digits through shared loaders under each preset."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, home_at

from gpudesk.paths import Home
from gpudesk.selection.cache import SelectionCache

PROFILE = """
name = "cmp"
[datasets.digits]
factory = "gpudesk.workloads.data:make_digits"
args = {{ split = "train" }}
batch_size = 64
workers = 0

[[jobs]]
name = "mlp"
dataset = "digits"
command = [{python}, "-m", "gpudesk.workloads.digits", "--loader", "shared", "--epochs", "2",
           "--hidden", "16", "--threads", "1"]
"""


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """conftest's `home` at a short path: the shared loaders' sockets lie under it
    (run/loaders/digits.s0.random-25.ctl), a Unix socket's path holds 107 bytes at most, and
    pytest-xdist's worker folder plus this test's name pass that (the loader then says so and
    exits)."""
    short = Path(tempfile.mkdtemp(prefix="gd-cmp-"))
    try:
        with home_at(short / "home", monkeypatch) as home:
            yield home
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.serial  # it reports what each preset's training cost: nothing else may run
def test_compare_trains_under_each_preset_and_amortizes_the_cached_prepass(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    profile = tmp_path / "cmp.toml"
    profile.write_text(PROFILE.format(python=json.dumps(sys.executable)))
    out = tmp_path / "first.json"
    plot = tmp_path / "compare.svg"
    code, table, err = gpudesk(
        "select",
        "compare",
        str(profile),
        "--presets",
        "full,random-25,dedup-25",
        "--seeds",
        "1",
        "--out",
        str(out),
        "--plot",
        str(plot),
    )
    assert code == 0, err
    # the plot, after the table: a point per preset and the break-even (tests/unit/test_plots.py)
    drawn = plot.read_text()
    assert f"plot: wrote {plot}" in err and drawn.lstrip().startswith("<?xml")
    assert all(p in drawn for p in ("full", "random-25", "dedup-25", "break-even"))
    assert "needs 3 or more" in err  # one seed: said, not hidden
    for fragment in (
        "PRESET",
        "full",
        "random-25",
        "dedup-25",
        "VAL_ACC",
        "100.0 %",
        "BREAK-EVEN",
        "best non-random preset at 25 %: dedup-25",
    ):
        assert fragment in table, table
    report = json.loads(out.read_text())
    trials = {t["preset"]: t for t in report["trials"]}
    assert set(trials) == {"full", "random-25", "dedup-25"}
    assert all(
        t["train_state"] == "succeeded" and t["quality"] is not None for t in trials.values()
    )
    assert trials["full"]["train_samples"] == 1388 and trials["full"]["prepass_job"] is None
    assert trials["dedup-25"]["train_samples"] == 347
    assert trials["dedup-25"]["prepass_fresh"] is True
    assert trials["dedup-25"]["prepass_wall_s"] > trials["dedup-25"]["prepass_compute_s"] > 0
    # the engine's measurement of the pre-pass job is in the cache entry
    cache = SelectionCache(engine.home.selection_dir)
    dedup = cache.load(trials["dedup-25"]["prepass_key"])
    assert dedup is not None and dedup.cost.job == trials["dedup-25"]["prepass_job"]
    assert dedup.cost.job_wall_s == trials["dedup-25"]["prepass_wall_s"]
    # the training job reused it through its loader, cheaply, and is counted
    assert trials["dedup-25"]["prepass_uses"] == 2
    assert 0 <= trials["dedup-25"]["reuse_s"] < trials["dedup-25"]["prepass_compute_s"]

    # again: the pre-pass is found in the cache, and its cost is shared by more jobs
    out = tmp_path / "again.json"
    code, _, err = gpudesk(
        "select",
        "compare",
        str(profile),
        "--presets",
        "dedup-25",
        "--seeds",
        "1",
        "--json",
        "--out",
        str(out),
    )
    assert code == 0, err
    (again,) = json.loads(out.read_text())["trials"]
    assert again["prepass_fresh"] is False and again["prepass_uses"] == 3  # trainings only
    assert again["prepass_wall_s"] == trials["dedup-25"]["prepass_wall_s"]  # the fresh cost
    (row,) = json.loads(out.read_text())["presets"]
    assert abs(row["amortized_min"] * 3 - row["prepass_min"]) < 1e-9


def test_compare_refuses_what_it_cannot_run(home: Path, gpudesk: Run, tmp_path: Path) -> None:
    profile = tmp_path / "cmp.toml"
    profile.write_text(PROFILE.format(python=json.dumps(sys.executable)))
    for args, message in [
        (("--presets", "full,nonsense-25"), "unknown selection method 'nonsense'"),
        (("--presets", "less-25"), "selection_target"),
        (("--job", "nope"), "no job 'nope'"),
        (("--seeds", "0"), "--seeds"),
    ]:
        code, out, err = gpudesk("select", "compare", str(profile), *args)
        assert code == 2 and message in err and "Traceback" not in out + err, err


def test_select_run_finds_a_dataset_the_engine_knows_by_name(
    engine: EngineHandle, gpudesk: Run
) -> None:
    engine.client.request(
        "datasets",
        datasets=[
            {
                "name": "digits",
                "factory": "gpudesk.workloads.data:make_digits",
                "args": {"split": "train"},
                "seed": 2,
            }
        ],
    )
    code, out, err = gpudesk("select", "run", "digits", "--preset", "stratified-25", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["kept"], result["of"], result["seed"]) == (347, 1388, 2)  # the loader's seed
    code, _, err = gpudesk("select", "run", "pictures", "--preset", "random-25")
    assert code == 2 and "knows no dataset 'pictures' (it knows: digits)" in err
