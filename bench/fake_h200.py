"""The faithful fakes standing in for one H200, for the GPU scripts' CPU rehearsal (`--fakes`):
NVML through tests/fakes/nvml_shim with the scenario below, the `nvidia-smi` and MPS control
fakes on PATH. One home for both `bench/hardware_truth.py` and `bench/gpu_pairs.py`."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

FAKES = Path(__file__).resolve().parents[1] / "tests" / "fakes"

# One H200 as NVML names it, GPM supported, the energy counter running on the wall clock
# (tests/fakes/nvml_shim documents the scenario's keys).
FAKE_SCENARIO = {
    "clock": "wall",
    "gpus": [
        {
            "name": "NVIDIA H200",
            "uuid": "GPU-7c1b0f4e-0000-4000-8000-00000000h200",
            "memory_total_mib": 143771,
            "memory_used_mib": 0,
            "gpm_supported": True,
            "utilization_gpu": 60,
            "sm_util_pct": 45.0,
            "power_w": 350,
            "power_limit_w": 700,
            "temperature_c": 40,
        }
    ],
}


def reexec_on_fakes() -> None:
    """Run this script again with the fakes in its own environment (it reads NVML itself), once:
    a process already on them returns at once."""
    if os.environ.get("GPUDESK_FAKE_NVML"):
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as scenario:
        json.dump(FAKE_SCENARIO, scenario)
    env = dict(os.environ, GPUDESK_FAKE_NVML=scenario.name)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(FAKES / "nvml_shim"), env.get("PYTHONPATH", "")) if p
    )
    env["PATH"] = f"{FAKES}{os.pathsep}{env.get('PATH', '')}"
    env["GPUDESK_MPS_CONTROL"] = str(FAKES / "nvidia-cuda-mps-control")
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
