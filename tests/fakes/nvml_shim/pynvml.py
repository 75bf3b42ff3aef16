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

Every key is optional. "live": true makes each GPU's "processes" follow the scenario file:
read again whenever it changes, so a test can list the processes of jobs it started (their pids,
MPS roles, steady "sm_util") while the engine runs; and "xids", a list of [GPU index, XID],
happen as they are added to it (`FakeNvml.inject_xid`: each reaches the event sets registered
for it by then; those listed when the fake loads happened before anything could register).
"follow_nvidia_smi": true makes the two fakes one driver: each GPU whose
UUID the nvidia-smi fake's state (GPUDESK_FAKE_NVIDIA_SMI_STATE) lists takes its MIG mode and its
MIG devices from there, read again whenever that file changes, so what `nvidia-smi mig -cgi`
creates is what NVML lists next, as on a real GPU. "init_error" (default none) is an NVML error
name that nvmlInit raises ("LibraryNotFound", "DriverNotLoaded", "LibRmVersionMismatch", ...).
"clock" is "wall" (the default here: the energy counter grows at power_w in real time) or
"manual". A GPU takes any `FakeGpu` field: "unsupported" lists pynvml functions that raise
NotSupported; "errors" maps a function to an error name raised on every call, or to a list of
per-call outcomes (null: answer); a null MIG slot is empty.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for the fakes package

from fakes.fake_pynvml import FakeGpu, FakeMig, FakeNvml

SMI_STATE_ENV = "GPUDESK_FAKE_NVIDIA_SMI_STATE"
FAKE_SMI = Path(__file__).resolve().parents[1] / "nvidia-smi"
# nvmlDeviceGetMaxMigDeviceCount on an A100: one slot per compute slice, filled or not.
MIG_SLOTS = 7
# -lgip prints an instance's memory in GiB with two decimals (19.62 for a 3g.20gb); NVML reports
# MiB in 64 MiB steps, and rounding to those gives the memory of every A100 40GB profile
# (4864, 9984, 20096, 40448 MiB). Assumption: no fixture shows NVML's MIG memory.
MIG_MEMORY_STEP_MIB = 64


_xids_seen = 0  # how many of the scenario's "xids" have happened


def _load() -> tuple[FakeNvml, bool, bool]:
    path = os.environ.get("GPUDESK_FAKE_NVML")
    if not path:
        raise ImportError("the fake pynvml needs GPUDESK_FAKE_NVML=<scenario.json>")
    with open(path, encoding="utf-8") as file:
        scenario = json.load(file)
    follow = bool(scenario.pop("follow_nvidia_smi", False))
    live = bool(scenario.pop("live", False))
    global _xids_seen
    _xids_seen = len(scenario.pop("xids", []))
    return FakeNvml.from_scenario(scenario, clock="wall"), follow, live


def _smi_module() -> ModuleType:
    """The nvidia-smi fake (a script without .py) as a module: its profile table, and how it
    lists and names instances."""
    loader = importlib.machinery.SourceFileLoader("fake_nvidia_smi", str(FAKE_SMI))
    spec = importlib.util.spec_from_loader("fake_nvidia_smi", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


FAKE, FOLLOW, LIVE = _load()
SMI = _smi_module() if FOLLOW else None
_smi_seen: tuple[float, int] | None = None  # the state file's (mtime, size) last read
_scenario_seen: tuple[int, int] | None = None  # the scenario file's (mtime_ns, size) last read


def _follow_scenario() -> None:
    """Where the scenario is live, each GPU's processes as the scenario file lists them now."""
    global _scenario_seen
    if not LIVE:
        return
    path = os.environ["GPUDESK_FAKE_NVML"]
    stat = os.stat(path)
    if _scenario_seen == (stat.st_mtime_ns, stat.st_size):
        return
    try:
        with open(path, encoding="utf-8") as file:
            scenario = json.load(file)
    except json.JSONDecodeError:
        return  # caught half-written: read at the next call
    _scenario_seen = (stat.st_mtime_ns, stat.st_size)
    for gpu, listed in zip(FAKE.gpus, scenario.get("gpus", []), strict=False):
        gpu.processes = FakeGpu.from_dict({"processes": listed.get("processes", [])}).processes
    global _xids_seen
    xids = scenario.get("xids", [])
    for index, xid in xids[_xids_seen:]:
        FAKE.inject_xid(index, xid)
    _xids_seen = max(_xids_seen, len(xids))


def _follow_nvidia_smi() -> None:
    """Where the scenario says so, the MIG mode and devices of each GPU come from the
    nvidia-smi fake's state: one driver behind both tools."""
    global _smi_seen
    path = os.environ.get(SMI_STATE_ENV)
    if SMI is None or not path:
        return
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return
    if _smi_seen == (stat.st_mtime, stat.st_size):
        return
    with open(path, encoding="utf-8") as file:
        state = json.load(file)
    _smi_seen = (stat.st_mtime, stat.st_size)
    by_uuid = {g["uuid"]: g for g in state.get("gpus", [])}
    for gpu in FAKE.gpus:
        smi_gpu = by_uuid.get(gpu.uuid)
        if smi_gpu is None:
            continue
        mode = smi_gpu.get("mig_mode", "disabled")
        # "pending" is not yet enabled: the GPU needs a reset first
        gpu.mig_enabled = None if mode == "unsupported" else mode == "enabled"
        gpu.mig_pending = None if mode == "unsupported" else mode in ("enabled", "pending")
        devices: list[FakeMig | None] = []
        # in the order `nvidia-smi -L` lists them (by GPU instance, then compute instance), named
        # as it names them ("1c.3g.20gb": a compute instance smaller than its GPU instance)
        for gi in sorted(SMI.gpu_instances(smi_gpu), key=lambda g: g["id"]):
            profile = SMI.profile_by_id(smi_gpu, gi["profile_id"])
            memory = round(float(profile["memory"]) * 1024 / MIG_MEMORY_STEP_MIB)
            for ci in sorted(gi.get("compute_instances", []), key=lambda c: c["id"]):
                devices.append(
                    FakeMig(
                        uuid=ci["uuid"],
                        name=f"{gpu.name} MIG {SMI.ci_name(profile, ci['size'])}",
                        gpu_instance_id=gi["id"],
                        compute_instance_id=ci["id"],
                        memory_total_mib=memory * MIG_MEMORY_STEP_MIB,
                        # a compute instance gets its compute slices' share of the SMs
                        sm_count=profile["sm"] * ci["size"] // SMI.compute_slices(profile),
                    )
                )
        gpu.mig_devices = [*devices, *([None] * max(0, MIG_SLOTS - len(devices)))]


def __getattr__(name: str) -> Any:
    _follow_nvidia_smi()
    _follow_scenario()
    return getattr(FAKE, name)
