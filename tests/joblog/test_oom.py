"""Recognising GPU out-of-memory deaths from a job's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk.joblog.oom import gpu_oom_line

TORCH = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
    "total capacity of 39.39 GiB of which 3.06 MiB is free."
)


@pytest.mark.parametrize(
    "line",
    [
        TORCH,
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
        "allocate 4294967296 bytes.",
        "ResourceExhaustedError: OOM when allocating tensor with shape[1024,1024]",
    ],
)
def test_gpu_oom_messages_are_recognised(tmp_path: Path, line: str) -> None:
    log = tmp_path / "output.log"
    log.write_text("epoch 1/10\n" + line + "\nTraceback tail\n")
    assert gpu_oom_line(log, 1) == line.strip()[:300]


def test_other_deaths_are_not_gpu_ooms(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("Killed\nMemoryError\nValueError: bad shape\n")  # host OOM, Python errors
    assert gpu_oom_line(log, 137) is None
    log.write_text(TORCH + "\nretrying with a smaller batch\n")
    assert gpu_oom_line(log, 0) is None  # it caught the error and finished
    assert gpu_oom_line(tmp_path / "missing.log", 1) is None


def test_only_the_tail_is_read(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text(TORCH + "\n" + "x" * 200_000 + "\n")
    assert gpu_oom_line(log, 1) is None
