"""A stand-in `pynvml` for end-to-end tests. With this folder first on PYTHONPATH, `import pynvml`
answers from a `FakeNvml` (tests/fakes/fake_pynvml.py) built from the JSON scenario file that the
GPUDESK_FAKE_NVML environment variable names; the real nvidia-ml-py module is loaded under another
name for the fake's constants, structures and error classes.

The scenario:

    {
      "init_error": "LibRmVersionMismatch",
      "clock": "wall",
      "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5e3c...",
         "memory_total_mib": 81559, "memory_used_mib": 2048, "memory_reserved_mib": 512,
         "utilization_gpu": 40, "sm_util_pct": 35.0, "gpm_supported": true,
         "power_w": 310, "power_limit_w": 700, "energy_mj": 1000000, "temperature_c": 51,
         "sm_clock_mhz": 1980, "memory_clock_mhz": 2619,
         "processes": [{"pid": 4242, "used_memory_mib": 2000}],
         "unsupported": ["nvmlDeviceGetTotalEnergyConsumption"],
         "errors": {"nvmlGpmQueryDeviceSupport": "FunctionNotFound",
                    "nvmlDeviceGetPowerUsage": ["Unknown", null]},
         "mig_enabled": true,
         "mig_devices": [{"uuid": "MIG-1...", "gpu_instance_id": 1, "compute_instance_id": 0,
                          "memory_total_mib": 19968, "processes": []}, null],
         "lost": false}
      ]
    }

Every key is optional. "init_error" (default none) is an NVML error name that nvmlInit raises
("LibraryNotFound", "DriverNotLoaded", "LibRmVersionMismatch", ...). "clock" is "wall" (the
default here: the energy counter grows at power_w in real time) or "manual". A GPU takes any
`FakeGpu` field: "unsupported" lists pynvml functions that raise NotSupported; "errors" maps a
function to an error name raised on every call, or to a list of per-call outcomes (null: answer);
a null MIG slot is empty.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for the fakes package

from fakes.fake_pynvml import FakeNvml


def _load() -> FakeNvml:
    path = os.environ.get("GPUDESK_FAKE_NVML")
    if not path:
        raise ImportError("the fake pynvml needs GPUDESK_FAKE_NVML=<scenario.json>")
    with open(path, encoding="utf-8") as file:
        return FakeNvml.from_scenario(json.load(file), clock="wall")


FAKE = _load()


def __getattr__(name: str) -> Any:
    return getattr(FAKE, name)
