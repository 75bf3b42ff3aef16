"""Tests for `gpudesk.workloads.images` (the JPEG-crop dataset) and its training job."""

from __future__ import annotations

import inspect
import json
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpudesk.workloads import images

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_images_workload")

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULT_KEYS = {
    "train_acc",
    "final_loss",
    "epochs",
    "steps",
    "samples",
    "samples_per_s",
    "wall_s",
    "loader",
    "data_wait_s",
}
# What a spawned DataLoader worker does with the dataset: unpickle it in a fresh interpreter,
# where the class is found by name (the module publishes it lazily, as it needs torch).
UNPICKLE_CHECK = """
import pickle, sys
import gpudesk.workloads.images

assert "torch" not in sys.modules
with open(sys.argv[1], "rb") as handle:
    dataset, image = pickle.load(handle)
assert type(dataset).__name__ == "ImageCropDataset" and len(dataset) == 12
assert bool((dataset[7][0] == image).all())
print("unpickled ok")
"""


@pytest.fixture
def gpudesk_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUDESK_HOME", str(home))
    return home


def subprocess_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", GPUDESK_HOME=str(home))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module", autouse=True)
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The subprocesses, started together as the module begins: each spends ~2 s importing
    torch, which then overlaps with the in-process tests."""
    home = tmp_path_factory.mktemp("images-home")
    env = subprocess_env(home)

    def start(*args: str, **kwargs: object) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO_ROOT,
            **kwargs,
        )

    train = (
        "-m",
        "gpudesk.workloads.images_train",
        "--loader",
        "local",
        "--size",
        "128",
        "--workers",
        "1",
        "--threads",
        "1",
    )
    procs = {
        "train": start(*train, "--epochs", "1", "--max-steps", "3"),
        # Its own process group, as gpudesk runs a job: cancel signals the whole group.
        "sigterm": start(*train, "--epochs", "1000", start_new_session=True),
    }
    dataset = images.make_dataset(size=12, image_px=32, seed=2, cache_dir=str(home / "pickle"))
    pickled = home / "dataset.pickle"
    pickled.write_bytes(pickle.dumps((dataset, dataset[7][0])))
    procs["unpickle"] = start("-c", UNPICKLE_CHECK, str(pickled))
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# --- the training job (first: the SIGTERM run trains until it is stopped) -----------------


@pytest.mark.slow(11)
def test_train_job_sigterm_to_group_exits_143(runs: dict[str, subprocess.Popen[str]]) -> None:
    proc = runs["sigterm"]
    assert proc.stdout is not None
    line = proc.stdout.readline()
    while line and not line.startswith("epoch 1/"):
        line = proc.stdout.readline()
    assert line, "the job ended before its first epoch"
    os.killpg(proc.pid, signal.SIGTERM)  # the job and its DataLoader workers, as gpudesk does
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    assert "interrupted at epoch " in stderr
    assert "Traceback" not in stderr


def test_train_job_runs_and_reports(runs: dict[str, subprocess.Popen[str]]) -> None:
    stdout, stderr = runs["train"].communicate(timeout=60)
    assert runs["train"].returncode == 0, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("config ")
    assert lines[1].startswith("epoch 1/1 loss=") and " acc=" in lines[1]
    assert lines[-1].startswith("result ")
    result = json.loads(lines[-1].removeprefix("result "))
    assert result.keys() >= RESULT_KEYS
    assert result["loader"] == "local"
    assert result["steps"] == 2 and result["samples"] == 128  # 128 samples, 64 a batch
    assert result["epochs"] == 1 and 0.0 <= result["train_acc"] <= 1.0


# --- the dataset ---------------------------------------------------------------------------


def test_import_is_cheap(tmp_path: Path) -> None:
    code = (
        "import sys, gpudesk.workloads.images, gpudesk.workloads.images_train; "
        "print(sorted(m for m in ('torch', 'PIL', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
        env=subprocess_env(tmp_path),
    )
    assert out.stdout.strip() == "[]"


def test_factory_signature_has_defaults() -> None:
    signature = inspect.signature(images.make_dataset)
    assert list(signature.parameters) == ["size", "image_px", "seed", "cache_dir"]
    assert all(p.default is not inspect.Parameter.empty for p in signature.parameters.values())


def test_length_shape_dtype_and_labels(gpudesk_home: Path) -> None:
    import torch

    dataset = images.make_dataset(size=40, image_px=48, seed=1)
    assert isinstance(dataset, torch.utils.data.Dataset)
    assert len(dataset) == 40
    labels = []
    for index in range(len(dataset)):
        image, label = dataset[index]
        assert image.shape == (3, 48, 48) and image.dtype == torch.uint8
        assert label.shape == () and label.dtype == torch.int64
        labels.append(int(label))
    assert set(labels) <= set(range(images.NUM_CLASSES)) and len(set(labels)) > 5
    assert torch.equal(dataset[-1][0], dataset[39][0])
    with pytest.raises(IndexError):
        dataset[40]
    # Compact: one uint8 array and offsets, not a list of bytes objects.
    assert dataset.data.dtype == np.uint8 and dataset.data.ndim == 1
    assert dataset.offsets.shape == (41,) and dataset.offsets[-1] == dataset.data.size
    cached = list((gpudesk_home / "datasets").glob("images-*/images-*.npz"))
    assert len(cached) == 1 and cached[0].parent.name == cached[0].stem


def test_same_seed_same_samples_other_seed_other_samples(tmp_path: Path) -> None:
    import torch

    first = images.make_dataset(size=8, image_px=32, seed=5, cache_dir=str(tmp_path / "a"))
    again = images.make_dataset(size=8, image_px=32, seed=5, cache_dir=str(tmp_path / "b"))
    other = images.make_dataset(size=8, image_px=32, seed=6, cache_dir=str(tmp_path / "c"))
    assert not again.cache_hit  # built a second time from the photos, not read back
    assert np.array_equal(first.data, again.data)
    for index in range(8):
        assert torch.equal(first[index][0], again[index][0])
        assert torch.equal(first[index][1], again[index][1])
    assert not all(torch.equal(first[i][0], other[i][0]) for i in range(8))
    # Augmentations are drawn per (seed, epoch, index): repeatable, and new each epoch.
    assert torch.equal(first[3][0], first[3][0])
    epoch0 = first[3][0]
    first.set_epoch(1)
    assert not torch.equal(first[3][0], epoch0)
    first.set_epoch(0)
    assert torch.equal(first[3][0], epoch0)


def test_cache_is_reused_not_rebuilt(tmp_path: Path) -> None:
    built = images.builds()
    dataset = images.make_dataset(size=16, image_px=32, cache_dir=str(tmp_path))
    assert not dataset.cache_hit and images.builds() == built + 1
    (cache,) = tmp_path.iterdir()
    stamp = cache.stat().st_mtime_ns
    again = images.make_dataset(size=16, image_px=64, cache_dir=str(tmp_path))
    assert again.cache_hit and images.builds() == built + 1
    assert cache.stat().st_mtime_ns == stamp
    assert np.array_equal(again.data, dataset.data)
    assert list(tmp_path.iterdir()) == [cache]  # no temporary files left behind
    other = images.make_dataset(size=8, image_px=32, cache_dir=str(tmp_path))
    assert not other.cache_hit and len(list(tmp_path.iterdir())) == 2  # its own file


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "checksum", "other_params"])
def test_corrupt_cache_is_rebuilt(tmp_path: Path, damage: str) -> None:
    good = images.make_dataset(size=16, image_px=32, cache_dir=str(tmp_path))
    (cache,) = tmp_path.iterdir()
    raw = bytearray(cache.read_bytes())
    if damage == "flip_byte":
        raw[len(raw) // 2] ^= 0xFF
        cache.write_bytes(bytes(raw))
    elif damage == "truncate":
        cache.write_bytes(bytes(raw[: len(raw) // 2]))
    else:  # a well-formed file whose content does not match its checksum or parameters
        with np.load(cache) as archive:
            arrays = {name: archive[name].copy() for name in archive.files}
        if damage == "checksum":
            arrays["data"][100] ^= 0xFF
        else:
            meta = json.loads(arrays["meta"].tobytes())
            meta["params"]["seed"] = 99
            arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        with cache.open("wb") as handle:
            np.savez(handle, **arrays)
    with pytest.raises(images.CorruptCache):
        images.read_cache(
            cache,
            {
                "version": images.CACHE_VERSION,
                "size": 16,
                "seed": 0,
                "stored_px": images.STORED_PX,
                "quality": images.JPEG_QUALITY,
            },
        )
    built = images.builds()
    rebuilt = images.make_dataset(size=16, image_px=32, cache_dir=str(tmp_path))
    assert not rebuilt.cache_hit and images.builds() == built + 1
    assert np.array_equal(rebuilt.data, good.data)
    assert images.make_dataset(size=16, image_px=32, cache_dir=str(tmp_path)).cache_hit


def test_pickles_and_loads_in_fork_workers(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    dataset = images.make_dataset(size=12, image_px=32, seed=2, cache_dir=str(tmp_path))
    copy = pickle.loads(pickle.dumps(dataset))
    assert type(copy).__name__ == "ImageCropDataset" and len(copy) == 12
    assert torch.equal(copy[7][0], dataset[7][0])
    loader = DataLoader(dataset, batch_size=6, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    assert [tuple(b[0].shape) for b in batches] == [(6, 3, 32, 32)] * 2
    assert torch.equal(batches[1][0][1], dataset[7][0])


def test_unpickles_in_a_fresh_interpreter(runs: dict[str, subprocess.Popen[str]]) -> None:
    stdout, stderr = runs["unpickle"].communicate(timeout=60)
    assert runs["unpickle"].returncode == 0, stderr
    assert "unpickled ok" in stdout
