"""Recognising a job that died because the GPU ran out of memory.

The exit status alone says little (an uncaught exception exits 1), so the tail of the job's log
is read for the messages CUDA, PyTorch, cuBLAS/cuDNN, JAX/XLA and TensorFlow print when an
allocation fails; an MPS client over its CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gets the same CUDA
errors. Host-memory deaths (the kernel's OOM killer) are not GPU OOMs and are not matched.
"""

from __future__ import annotations

import os
import re

from gpudesk import joblog
from gpudesk.text import printable

LOG_TAIL_BYTES = 64 * 1024

# Matched case-insensitively against the last lines of the log.
GPU_OOM_PATTERNS = (
    r"CUDA out of memory",  # torch: "torch.OutOfMemoryError: CUDA out of memory. Tried to ..."
    r"OutOfMemoryError",  # torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
    r"CUDA error: out of memory",
    r"cudaErrorMemoryAllocation",
    r"CUBLAS_STATUS_ALLOC_FAILED",
    r"CUDNN_STATUS_ALLOC_FAILED",
    r"CUDA_ERROR_OUT_OF_MEMORY",
    r"RESOURCE_EXHAUSTED: Out of memory",  # JAX / XLA
    r"OOM when allocating tensor",  # TensorFlow
)
_PATTERN = re.compile("|".join(GPU_OOM_PATTERNS), re.IGNORECASE)


def gpu_oom_line(
    log_path: str | os.PathLike[str], exit_code: int | None, owner_uid: int | None = None
) -> str | None:
    """The log line that shows a GPU out-of-memory death, or None. A job that exited 0 did
    not die of it, whatever it printed (it may have caught and retried). `owner_uid`: whose
    files the log and its parts must be (gpudesk.hw.runner.log_owner_uid; None: anyone's):
    anything else at their names is refused, as in the `log` request, and there is no OOM
    line."""
    if exit_code == 0:
        return None
    try:
        # across a rotation (gpudesk.joblog): the engine may just have rotated the log; on the
        # loop, so never waiting on a lock the job (or what it left running) holds on it
        data = joblog.tail(log_path, LOG_TAIL_BYTES, owner_uid, wait=False)
    except OSError:
        return None
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        if _PATTERN.search(line):
            # it becomes the job's reason, shown to every member: its control characters
            # spelled out (gpudesk.text), never a sequence for their terminals
            return printable(line.strip())[:300]
    return None
