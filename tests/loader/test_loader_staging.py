"""A dataset's `device`: batches staged once for every consumer (gpudesk/loader/staging.py).

On a GPU the producer mirrors its ring on the GPU and consumers open the mirror through CUDA
IPC; that path is measured on a lent GPU (docs/hardware-validation.md). Here, without one, the
same protocol runs with the mirror in host shared memory (`GPUDESK_LOADER_STAGING=shm`): real
producer and consumers, the mirror opened by handle in another process, its generations as the
ring grows, the per-consumer choice and the reasons given when a batch is not staged. Every
sample is checked by its id and its bytes, and that it was read from the mirror.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from conftest import wait_for
from test_loader import FACTORY, Loaders, assert_exactly_once

from gpudesk.api.models import LoaderStatus
from gpudesk.loader import SharedLoader
from gpudesk.loader.staging import AUTO_MIN_BATCH_BYTES
from gpudesk.paths import Home

SHM = {"GPUDESK_LOADER_STAGING": "shm"}
GPUDESK_SERVE = [sys.executable, "-m", "gpudesk", "loader", "serve"]


@pytest.fixture
def loaders(home: Home, tmp_path: Path) -> Iterator[Loaders]:
    launcher = Loaders(home, tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def path_of_first_consumer(producer: Any) -> str | None:
    consumers = list(producer.consumers().values())
    return consumers[0]["data_path"] if consumers else None


def read_epoch(loader: SharedLoader) -> tuple[list[int], int]:
    """An epoch's ids, checking every sample's bytes; and how many batches came from the
    mirror (features and labels in it, ids in the host ring)."""
    seen: list[int] = []
    from_mirror = 0
    for (features, labels), ids in loader:
        assert torch.equal(labels.cpu(), ids)
        assert bool((features.cpu() == ids.float().view(-1, 1)).all())
        mirror = loader._mirror
        if mirror is not None:
            base = mirror.untyped_storage().data_ptr()
            if all(t.untyped_storage().data_ptr() == base for t in (features, labels)):
                from_mirror += 1
        ring = loader.ring
        assert ring is not None and ring.holds(ids)  # ids stay on the host
        seen.extend(ids.tolist())
    return seen, from_mirror


def test_consumers_read_a_staged_mirror_and_it_grows_in_generations(
    loaders: Loaders,
) -> None:
    size = 96
    # The smallest ring: each consumer that joins makes it grow, and the mirror with it.
    producer = loaders.serve(size=size, batch=8, slots=4, extra=("--device", "cuda"), env=SHM)
    first = SharedLoader("syn", with_ids=True, fallback=False)
    assert first.data_path == "staged"
    seen, staged = read_epoch(first)
    assert_exactly_once(seen, size)
    assert staged == len(first) == 12
    # A second consumer makes the ring grow (room for its share): the mirror follows it in a
    # new generation, handed to both with their next batch.
    second = SharedLoader("syn", with_ids=True, fallback=False)
    both = [read_epoch(loader) for loader in (first, second)]
    for ids, staged_batches in both:
        assert_exactly_once(ids, size)
        assert staged_batches == 12
    status = producer.status()
    assert status["staging"]["kind"] == "shm"
    assert status["staging"]["generation"] >= 3, status["staging"]
    assert status["staging"]["batches_staged"] >= 24
    assert {c["data_path"] for c in status["consumers"]} == {"staged"}
    # What the engine's loader view and `Client` decode it as (unknown fields are refused).
    assert msgspec.convert(status, LoaderStatus).staging.generation >= 3
    first.close()
    second.close()
    assert producer.stop() == 0


def test_a_consumer_may_ask_for_host_batches_from_a_staging_producer(loaders: Loaders) -> None:
    producer = loaders.serve(size=40, batch=8, extra=("--device", "cuda"), env=SHM)
    with SharedLoader("syn", with_ids=True, fallback=False, device="cpu") as loader:
        assert loader.data_path.startswith("host: ") and "device='cpu'" in loader.data_path
        seen, staged = read_epoch(loader)
        assert_exactly_once(seen, 40)
        assert staged == 0
        path = wait_for(
            lambda: path_of_first_consumer(producer),
            10,
            what="the consumer's data path in the producer's status",
        )
        assert "device='cpu'" in str(path)
    assert producer.stop() == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU torch can use")
def test_device_cuda_without_a_gpu_serves_host_batches_and_says_why(loaders: Loaders) -> None:
    producer = loaders.serve(size=40, batch=8, extra=("--device", "cuda"))
    with SharedLoader("syn", with_ids=True, fallback=False) as loader:
        assert loader.data_path == "host: the producer sees no CUDA device"
        seen, staged = read_epoch(loader)
        assert_exactly_once(seen, 40)
        assert staged == 0
    assert producer.status()["staging"] == {
        "device": "cuda",
        "kind": None,
        "why": "the producer sees no CUDA device",
    }
    assert producer.stop() == 0


def test_device_auto_stages_only_large_batches(loaders: Loaders) -> None:
    # Batches of 8 samples of 2 floats: far below the threshold, so nothing is staged.
    small = loaders.serve("small", size=40, batch=8, extra=("--device", "auto"), env=SHM)
    with SharedLoader("small", with_ids=True, fallback=False) as loader:
        assert "device = auto" in loader.data_path and "MiB" in loader.data_path
        assert read_epoch(loader)[1] == 0
    # One sample of 2**18 float32s is 1 MiB: batches of 4 are above it, and are staged.
    per_sample = AUTO_MIN_BATCH_BYTES // 4 // 4
    large = loaders.serve(
        "large", size=12, batch=4, shape=(per_sample,), extra=("--device", "auto"), env=SHM
    )
    with SharedLoader("large", with_ids=True, fallback=False) as loader:
        assert loader.data_path == "staged"
        seen = []
        for (features, _labels), ids in loader:
            assert bool((features == ids.float().view(-1, 1)).all())
            seen.extend(ids.tolist())
        assert_exactly_once(seen, 12)
    assert small.stop() == 0 and large.stop() == 0


def test_a_bad_device_is_refused_in_one_line(home: Home) -> None:
    done = subprocess.run(
        [*GPUDESK_SERVE, "x", "--dataset", FACTORY, "--device", "gpu"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "--device 'gpu': expected one of cpu, cuda, auto" in done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(Exception, match="device='tpu'"):
        SharedLoader("x", device="tpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU torch can use")
def test_on_a_gpu_consumers_get_views_of_the_producers_cuda_mirror(loaders: Loaders) -> None:
    producer = loaders.serve(size=64, batch=8, extra=("--device", "cuda"))
    with SharedLoader("syn", with_ids=True, fallback=False) as loader:
        assert loader.data_path == "staged"
        for (features, labels), ids in loader:
            assert features.is_cuda and labels.is_cuda and not ids.is_cuda
        seen, staged = read_epoch(loader)
        assert_exactly_once(seen, 64)
        assert staged == 8
    assert producer.status()["staging"]["kind"] == "cuda"
    assert producer.stop() == 0


def test_a_profiles_dataset_device_reaches_the_producer_or_is_refused_by_key() -> None:
    from gpudesk.core.datasets import DatasetSpec

    spec = DatasetSpec.from_dict({"name": "images", "factory": FACTORY, "device": "cuda"})
    argv = spec.argv()
    assert argv[argv.index("--device") + 1] == "cuda"
    assert "--device" not in DatasetSpec.from_dict({"name": "x", "factory": FACTORY}).argv()
    with pytest.raises(ValueError, match=r"^device: expected one of cpu, cuda, auto, found 'gpu'"):
        DatasetSpec.from_dict({"name": "x", "factory": FACTORY, "device": "gpu"})


def test_a_dataset_that_decodes_on_the_device_is_decoded_by_the_producer(
    loaders: Loaders, tmp_path: Path
) -> None:
    """`gpudesk.workloads.images` offers `encoded_view`/`decode_batch`: with `device = "cuda"`
    the producer's workers only read JPEG bytes and the producer decodes and augments each
    batch (here on the CPU, as the test staging does; on a GPU through nvJPEG). The samples are
    the dataset's: each id's label, the image size; the pixels are torch's arithmetic, close to
    Pillow's, so they are compared with the CPU path's within a bound, not for equality."""
    from gpudesk.workloads.images import make_dataset

    args = {"size": 48, "image_px": 32, "cache_dir": str(tmp_path)}
    dataset = make_dataset(**args)
    producer = loaders.serve(
        "img",
        batch=8,
        dataset=("gpudesk.workloads.images:make_dataset", args),
        extra=("--device", "cuda"),
        env=SHM,
    )
    with SharedLoader("img", with_ids=True, fallback=False) as loader:
        assert loader.data_path == "staged"
        seen = []
        for (images, labels), ids in loader:
            assert images.shape[1:] == (3, 32, 32) and images.dtype == torch.uint8
            assert labels.tolist() == [int(dataset.labels[i]) for i in ids.tolist()]
            dataset.set_epoch(0)
            cpu = torch.stack([dataset[int(i)][0] for i in ids[:2]])
            assert (images[:2].int() - cpu.int()).abs().float().mean() < 12
            seen.extend(ids.tolist())
        assert_exactly_once(seen, 48)
    status = producer.status()
    assert status["decoding"]["device"] == "cpu" and status["decoding"]["batches"] >= 6
    assert msgspec.convert(status, LoaderStatus).decoding is not None
    assert producer.stop() == 0
