"""Tests for `gpudesk.workloads`: the digits loader, the split and real runs of the MLP job."""

from __future__ import annotations

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
from gpudesk.workloads import digits
from gpudesk.workloads.common import EXIT_NO_DATA
from gpudesk.workloads.data import DatasetUnavailable, load_digits, train_val_split

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_workloads")

REPO_ROOT = Path(__file__).resolve().parents[2]
EPOCH_LINE = re.compile(
    r"^epoch (\d+)/(\d+) loss (\d+\.\d{4}) train_acc ([01]\.\d{4}) val_acc ([01]\.\d{4}) "
    r"samples/s (\d+) time (\d+\.\d{2})s$"
)
RESULT_KEYS = {
    "val_acc",
    "best_val_acc",
    "final_loss",
    "epochs",
    "samples_per_s",
    "params",
    "device",
    "wall_s",
}


def workload_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def start_digits(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpudesk.workloads.digits", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=workload_env(),
        cwd=REPO_ROOT,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    stdout, stderr = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def slow_runs() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The runs that train, started together: each spends ~2 s just importing torch."""
    runs = {
        "short": start_digits("--epochs", "3", "--threads", "1"),
        "diverge": start_digits("--lr", "1e6", "--optimizer", "sgd", "--threads", "1"),
    }
    yield runs
    for proc in runs.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# --- data ---------------------------------------------------------------------------------


def test_load_digits_shape_dtype_and_range() -> None:
    images, labels = load_digits()
    assert images.shape == (1797, 64) and images.dtype == np.float32
    assert labels.shape == (1797,) and labels.dtype == np.int64
    assert images.min() == 0.0 and images.max() == 1.0
    assert set(labels.tolist()) == set(range(10))


def test_load_digits_equals_sklearn_loader() -> None:
    from sklearn.datasets import load_digits as sklearn_load_digits

    expected_images, expected_labels = sklearn_load_digits(return_X_y=True)
    images, labels = load_digits()
    np.testing.assert_array_equal(images, (expected_images / 16.0).astype(np.float32))
    np.testing.assert_array_equal(labels, expected_labels)


def test_importing_and_loading_stays_free_of_torch_and_sklearn() -> None:
    probe = (
        "import sys\n"
        "import gpudesk.workloads.digits\n"
        "from gpudesk.workloads.data import load_digits\n"
        "load_digits()\n"
        "print(sorted(m for m in ('torch', 'sklearn') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env=workload_env(),
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_load_digits_falls_back_to_sklearn_when_file_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected_images, expected_labels = load_digits()
    real_find_spec = importlib.util.find_spec
    empty = ModuleSpec("sklearn", None, is_package=True)
    empty.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: empty if name == "sklearn" else real_find_spec(name, *args),
    )
    images, labels = data_module.load_digits()
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(labels, expected_labels)


def test_load_digits_without_sklearn_explains_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(RuntimeError, match="pip install scikit-learn"):
        data_module.load_digits()


def test_missing_sklearn_is_a_one_line_error_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unavailable() -> tuple[np.ndarray, np.ndarray]:
        raise DatasetUnavailable("install it with `pip install scikit-learn`")

    monkeypatch.setattr(digits, "load_digits", unavailable)
    assert digits.main(["--threads", "1", "--device", "cpu"]) == EXIT_NO_DATA
    assert capsys.readouterr().err == "error: install it with `pip install scikit-learn`\n"


def test_split_is_deterministic_disjoint_and_complete() -> None:
    train, val = train_val_split(1797, 0.2, seed=7)
    again_train, again_val = train_val_split(1797, 0.2, seed=7)
    np.testing.assert_array_equal(train, again_train)
    np.testing.assert_array_equal(val, again_val)
    assert len(val) == 359 and len(train) == 1797 - 359
    assert not set(train.tolist()) & set(val.tolist())
    np.testing.assert_array_equal(np.sort(np.concatenate([train, val])), np.arange(1797))


def test_split_depends_on_seed_and_keeps_both_sides_non_empty() -> None:
    _, val_a = train_val_split(1797, 0.2, seed=0)
    _, val_b = train_val_split(1797, 0.2, seed=1)
    assert not np.array_equal(val_a, val_b)
    train, val = train_val_split(2, 0.01, seed=0)
    assert len(train) == 1 and len(val) == 1


@pytest.mark.parametrize(("n", "fraction"), [(1, 0.2), (10, 0.0), (10, 1.0), (10, -0.5)])
def test_split_rejects_bad_arguments(n: int, fraction: float) -> None:
    with pytest.raises(ValueError):
        train_val_split(n, fraction, seed=0)


# --- digits workload ----------------------------------------------------------------------


@pytest.mark.slow(18)
def test_short_run_learns_and_reports(slow_runs: dict[str, subprocess.Popen[str]]) -> None:
    done = finish(slow_runs["short"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("config params ") and "threads 1" in lines[0]
    assert "samples 1797 train 1438 val 359" in lines[0]
    epochs = [EPOCH_LINE.match(line) for line in lines[1:4]]
    assert all(epochs), lines[1:4]
    assert [m.group(1, 2) for m in epochs if m] == [("1", "3"), ("2", "3"), ("3", "3")]
    assert lines[4].startswith("result ") and len(lines) == 5
    result = json.loads(lines[4].removeprefix("result "))
    assert set(result) == RESULT_KEYS
    assert result["epochs"] == 3 and result["val_acc"] > 0.8
    assert result["best_val_acc"] >= result["val_acc"]
    # progress lines for the engine (docs/interference.md), on stderr: every 10 steps, of
    # 3 epochs of 23 batches (1438 samples in batches of 64)
    progress = [line for line in done.stderr.splitlines() if line.startswith("progress ")]
    assert progress[:2] == ["progress 10/69", "progress 20/69"], done.stderr
    assert result["params"] == (64 * 64 + 64) + (64 * 64 + 64) + (64 * 10 + 10)
    assert result["device"] in {"cpu", "cuda"} and result["samples_per_s"] > 0
    assert result["final_loss"] < 1.0 and result["wall_s"] > 0


def test_bad_argument_exits_2_without_traceback() -> None:
    done = finish(start_digits("--lr", "-1"))
    assert done.returncode == 2
    assert "--lr must be a positive number" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hidden", "0"], "--hidden must be a positive integer"),
        (["--layers", "-2"], "--layers must be a positive integer"),
        (["--batch-size", "0"], "--batch-size must be a positive integer"),
        (["--epochs", "0"], "--epochs must be a positive integer"),
        (["--threads", "0"], "--threads must be a positive integer"),
        (["--lr", "0"], "--lr must be a positive number"),
        (["--lr", "nan"], "--lr must be a positive number"),
        (["--seed", "-1"], "--seed must be >= 0"),
        (["--optimizer", "rmsprop"], "invalid choice"),
        (["--hidden", "wide"], "invalid int value"),
    ],
)
def test_argument_validation(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        digits.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_divergence_exits_3_with_advice(slow_runs: dict[str, subprocess.Popen[str]]) -> None:
    done = finish(slow_runs["diverge"])
    assert done.returncode == 3, done.stdout + done.stderr
    assert "error: training diverged at epoch 1 (loss nan); try a smaller --lr" in done.stderr
    assert "Traceback" not in done.stderr
    assert "result " not in done.stdout


@pytest.mark.slow(9)
def test_sigterm_reports_epoch_and_exits_143() -> None:
    proc = start_digits("--epochs", "100000", "--threads", "1")
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


def test_the_digits_splits_partition_the_data() -> None:
    from gpudesk.workloads.data import DIGITS_TARGET_SIZE, digits_split_indices

    parts = {
        name: set(digits_split_indices(name, 3).tolist()) for name in ("train", "val", "target")
    }
    assert len(parts["target"]) == DIGITS_TARGET_SIZE
    assert not (
        parts["train"] & parts["val"]
        or parts["train"] & parts["target"]
        or parts["val"] & parts["target"]
    )
    assert set().union(*parts.values()) == set(range(1797))
    assert set(digits_split_indices("val", 3).tolist()) == set(
        train_val_split(1797, 0.2, 3)[1].tolist()
    )  # what the local job evaluates on


def test_shared_mode_without_a_producer_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUDESK_HOME", str(tmp_path))
    code = digits.main(["--loader", "shared", "--threads", "1", "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == EXIT_NO_DATA and "no shared loader 'digits'" in err
    assert "Traceback" not in err
