"""`gpudesk select compare` end to end: a real engine, real pre-pass jobs, real torch training
jobs reading the real digits through shared loaders under each preset."""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, short_home

from gpudesk.paths import Home
from gpudesk.selection.cache import SelectionCache
from gpudesk.selection.fingerprint import fingerprint
from gpudesk.workloads.data import make_digits

PROFILE = """
name = "cmp"
[datasets.digits]
factory = "gpudesk.workloads.data:make_digits"
args = {{ split = "train", split_seed = 0 }}
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
    """conftest's `home` at a short path, for the loaders' sockets (conftest.short_home)."""
    with short_home("gd-cmp-", monkeypatch) as home:
        yield home


@pytest.mark.slow(100)
@pytest.mark.timeout(900)  # 6 training and 2 pre-pass jobs, then 2 training and 1 pre-pass
def test_compare_runs_each_preset_on_every_split_and_seed_and_pairs_it_with_random(
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
        "full,random-25,el2n-25",
        "--splits",
        "2",
        "--seeds",
        "1",
        "--out",
        str(out),
        "--plot",
        str(plot),
    )
    assert code == 0, err
    # the plot, after the table: a point per preset and the break-even (tests/plots/test_plots.py)
    drawn = plot.read_text()
    assert f"plot: wrote {plot}" in err and drawn.lstrip().startswith("<?xml")
    assert all(p in drawn for p in ("full", "random-25", "el2n-25", "break-even"))
    assert "wants at least 3 splits × 3 seeds" in err  # 2 × 1: said, not hidden
    report = json.loads(out.read_text())
    trials = report["trials"]
    # every preset on every split and seed, each its own engine jobs
    assert sorted((t["preset"], t["split"], t["seed"]) for t in trials) == sorted(
        (p, k, 0) for p in ("full", "random-25", "el2n-25") for k in (0, 1)
    )
    assert all(t["train_state"] == "succeeded" and t["quality"] is not None for t in trials)
    assert len({t["train_job"] for t in trials}) == 6
    full = [t for t in trials if t["preset"] == "full"]
    el2n = [t for t in trials if t["preset"] == "el2n-25"]
    assert all(t["train_samples"] == 1388 and t["prepass_job"] is None for t in full)
    assert all(t["train_samples"] == 347 and t["prepass_fresh"] is True for t in el2n)

    # split k reached the pre-pass and the loader (its factory's split_seed) and the job
    cache = SelectionCache(engine.home.selection_dir)
    for trial in el2n:
        entry = cache.load(trial["prepass_key"])
        assert entry is not None
        assert entry.fingerprint == fingerprint(make_digits("train", trial["split"]))
        assert entry.params["seed"] == trial["seed"]  # the dataset's seed 0 + the seed offset
        # the engine's measurement of the pre-pass job is in the cache entry
        assert entry.cost.job == trial["prepass_job"]
        assert entry.cost.job_wall_s == trial["prepass_wall_s"] > trial["prepass_compute_s"] > 0
        # USES: the one training job, not the pre-pass job too; amortized over it is the fresh
        assert trial["prepass_uses"] == 1
        assert 0 <= trial["reuse_s"] < trial["prepass_compute_s"]
        assert sum(trial["kept_per_class"].values()) == 347
        assert sum(trial["dataset_per_class"].values()) == 1388
        log = Path(engine.job(trial["train_job"]).log).read_text()
        assert f"split_seed {trial['split']} " in log, log
    assert len({t["prepass_key"] for t in el2n}) == 2

    rows = {r["preset"]: r for r in report["presets"]}
    assert rows["el2n-25"]["uses"] == 1
    assert rows["el2n-25"]["amortized_min"] == pytest.approx(rows["el2n-25"]["prepass_min"])
    # quality: mean and sd over the 2 runs; the paired differences against random-25
    values = sorted(t["quality"] for t in el2n)
    assert sorted(rows["el2n-25"]["quality_values"]) == values
    assert rows["el2n-25"]["quality_mean"] == pytest.approx(statistics.fmean(values))
    random = {(t["split"], t["seed"]): t["quality"] for t in trials if t["preset"] == "random-25"}
    differences = [t["quality"] - random[(t["split"], t["seed"])] for t in el2n]
    paired = rows["el2n-25"]["vs_random"]
    assert paired["baseline"] == "random-25" and paired["pairs"] == 2
    assert paired["mean_diff"] == pytest.approx(statistics.fmean(differences))
    assert paired["sd_diff"] == pytest.approx(statistics.stdev(differences))
    assert rows["el2n-25"]["verdict"] in (
        "better than random",
        "WORSE than random",
        "no different from random",
    )
    assert rows["random-25"]["verdict"] == "(the baseline)" and rows["full"]["verdict"] == "-"
    assert report["checks"]["verdicts"] == {"el2n-25": rows["el2n-25"]["verdict"]}
    assert report["checks"]["enough_runs"] is False

    for fragment in (
        "2 split(s) (split_seed 0..1) × 1 seed(s)",
        "VAL_ACC (MEAN ± SD)",
        "VS RANDOM, PAIRED",
        "VERDICT (95 %)",
        rows["el2n-25"]["verdict"],
        "100.0 %",
        "BREAK-EVEN",
        "USES",
        "el2n-25 ",
        "FEWER than the ≥ 3 × 3 a verdict wants",
    ):
        assert fragment in table, table
    if rows["el2n-25"]["break_even"].isdigit():
        assert f"el2n-25 pays its pre-pass back after {rows['el2n-25']['break_even']} run" in table
    else:
        assert "el2n-25 never pays its pre-pass back" in table

    # again, with a second seed: seed 0's pre-pass is found in the cache and its cost shared by
    # one more training job; seed 1's is made afresh, the seed offset reaching the pre-pass
    out = tmp_path / "again.json"
    code, _, err = gpudesk(
        "select",
        "compare",
        str(profile),
        "--presets",
        "el2n-25",
        "--splits",
        "1",
        "--seeds",
        "2",
        "--json",
        "--out",
        str(out),
    )
    assert code == 0, err
    again = {t["seed"]: t for t in json.loads(out.read_text())["trials"]}
    assert sorted(again) == [0, 1]
    first = next(t for t in el2n if (t["split"], t["seed"]) == (0, 0))
    assert again[0]["prepass_key"] == first["prepass_key"]
    assert again[0]["prepass_fresh"] is False and again[0]["prepass_uses"] == 2  # trainings only
    assert again[0]["prepass_wall_s"] == first["prepass_wall_s"]  # the fresh cost
    assert again[1]["prepass_fresh"] is True and again[1]["prepass_key"] != first["prepass_key"]
    seeded = cache.load(again[1]["prepass_key"])
    assert seeded is not None and seeded.params["seed"] == 1  # the dataset's seed 0 + offset 1
    (row,) = json.loads(out.read_text())["presets"]
    assert row["vs_random"]["verdict"] == "random-25 not run"


def test_compare_refuses_what_it_cannot_run(home: Path, gpudesk: Run, tmp_path: Path) -> None:
    profile = tmp_path / "cmp.toml"
    profile.write_text(PROFILE.format(python=json.dumps(sys.executable)))
    for args, message in [
        (("--presets", "full,nonsense-25"), "unknown selection method 'nonsense'"),
        (("--presets", "less-25"), "selection_target"),
        (("--presets", "full", "--job", "nope"), "no job 'nope'"),
        (("--presets", "full", "--seeds", "0"), "--seeds"),
        (("--presets", "full", "--splits", "21"), "--splits"),
    ]:
        code, out, err = gpudesk("select", "compare", str(profile), *args)
        assert code == 2 and message in err and "Traceback" not in out + err, err
    # several splits redraw the factory's split_seed: a profile without one is told to add it
    profile.write_text(profile.read_text().replace(", split_seed = 0", ""))
    code, out, err = gpudesk(
        "select", "compare", str(profile), "--presets", "full", "--splits", "2"
    )
    assert code == 2 and "Traceback" not in out + err
    assert "--splits 2: add split_seed = 0 to [datasets.digits] args" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_compare_says_the_engines_refusal_of_its_training_job_at_the_profiles_table(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    """The engine refuses the comparison's training job (a GPU on a CPU-only station), naming
    it as the comparison named its run: said at the profile's [[jobs]] table, not as the
    request's job; exit 2, as before, and nothing queued."""
    profile = tmp_path / "cmp.toml"
    text = PROFILE.format(python=json.dumps(sys.executable))
    profile.write_text(text.replace('dataset = "digits"', 'dataset = "digits"\ngpus = 1'))
    args = ("--presets", "full", "--splits", "1", "--seeds", "1")
    code, _, err = gpudesk("select", "compare", str(profile), *args)
    said = " ".join(err.split())
    assert code == 2, err
    assert (
        f"error: {profile}:9: jobs[0] ('mlp-full-p0s0'): asks for 1 GPU but this station has none"
    ) in said, said
    code, listed, _ = gpudesk("queue", "--all", "--json")
    assert code == 0 and json.loads(listed)["jobs"] == []


def test_compare_checks_its_out_file_before_it_runs_anything(
    home: Home, gpudesk: Run, tmp_path: Path
) -> None:
    """--out is written after a comparison of minutes to hours: a file it must not replace (the
    profile, gpudesk's database), a folder or a named pipe (written to, the command would block
    for ever) is refused before anything runs, as `run --report` is (exit 2, nothing
    submitted, no engine started)."""
    profile = tmp_path / "cmp.toml"
    profile.write_text(PROFILE.format(python=json.dumps(sys.executable)))
    kept = profile.read_text()
    home.root.mkdir(parents=True)
    database = home.root / "gpudesk.db"
    database.write_bytes(b"SQLite format 3\x00")
    pipe = tmp_path / "out.json"
    os.mkfifo(pipe)
    for out, message in [
        (profile, "is the profile being run"),
        (database, "is inside gpudesk's home"),
        (tmp_path, "is a folder"),
        (pipe, "is a named pipe"),
    ]:
        args = ("--presets", "full", "--splits", "1", "--seeds", "1", "--out", str(out))
        code, stdout, err = gpudesk("select", "compare", str(profile), *args)
        assert code == 2 and stdout == "", (out, stdout, err)
        assert err.startswith(f"error: --out {out}: {message}") and "Nothing was submitted" in err
    assert profile.read_text() == kept and database.read_bytes() == b"SQLite format 3\x00"
    assert not home.control_socket.exists()  # no engine was started for it


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
