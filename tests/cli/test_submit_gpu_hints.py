"""`gpudesk submit --mem/--sm` without `--gpus`: the hints say how the job uses a GPU, and
--gpus is 0 unless given (as sbatch gives none unless asked), so such a job would start with no
GPU at all and its script fall back to the CPU or fail without a word about why. It is one
clear usage error (exit 2) before any engine is asked; with --gpus the same hints submit."""

from __future__ import annotations

import pytest
from test_cli import gpudesk


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--mem", "10"], "--mem describes"),
        (["--sm", "30"], "--sm describes"),
        (["--mem", "10", "--sm", "30"], "--mem and --sm describe"),
        (["--gpus", "0", "--mem", "10"], "--mem describes"),
    ],
)
def test_gpu_hints_without_gpus_are_a_usage_error(
    home: object, options: list[str], named: str
) -> None:
    result = gpudesk("submit", *options, "--", "true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert named in result.stderr and "add --gpus N" in result.stderr
    assert "Traceback" not in result.stderr
    assert "submitted" not in result.stdout + result.stderr
    listed = gpudesk("queue", "--all")
    assert " true " not in listed.stdout, listed.stdout  # nothing was queued


def test_gpu_hints_with_gpus_submit(home: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDESK_BACKEND", "sim:a100-40gb")
    result = gpudesk("submit", "--hold", "--gpus", "1", "--mem", "10", "--sm", "30", "--", "true")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "submitted job" in result.stdout
    job_id = result.stdout.split()[2]
    # said in the unit --mem counts in (GiB), as the hint's own line says it
    assert "asks for   1 GPU(s), 10 GiB" in gpudesk("show", job_id).stdout
