"""The fake pynvml answers the calls gpudesk makes as a real H200 did (driver 580.159.04,
MIG disabled): bench/results/h200-2026-11-29/run2/raw_probe.json, section `nvml`, idle phase."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.fake_pynvml import FakeGpu, FakeNvml, FakeProcess, real

RECORD = Path(__file__).resolve().parents[2] / "bench/results/h200-2026-11-29/run2/raw_probe.json"


def recorded() -> dict[str, dict[str, Any]]:
    calls = json.loads(RECORD.read_text())["nvml"]["calls"]
    return {call["key"]: call for call in calls}


@pytest.fixture
def h200() -> tuple[FakeNvml, Any]:
    fake = FakeNvml([FakeGpu(name="NVIDIA H200", memory_total_mib=143771.0)])
    fake.nvmlInit()
    return fake, fake.nvmlDeviceGetHandleByIndex(0)


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        value = call()
    except real.NVMLError as exc:
        return "error", type(exc).__name__
    return "ok", value


CALLS: dict[str, Callable[[FakeNvml, Any], Any]] = {
    "nvmlSystemGetDriverVersion": lambda nv, h: nv.nvmlSystemGetDriverVersion(),
    "nvmlSystemGetNVMLVersion": lambda nv, h: nv.nvmlSystemGetNVMLVersion(),
    "nvmlSystemGetCudaDriverVersion": lambda nv, h: nv.nvmlSystemGetCudaDriverVersion(),
    "nvmlSystemGetCudaDriverVersion_v2": lambda nv, h: nv.nvmlSystemGetCudaDriverVersion_v2(),
    "idle/gpu0 nvmlDeviceGetAttributes": lambda nv, h: nv.nvmlDeviceGetAttributes(h),
    "idle/gpu0 nvmlDeviceGetComputeRunningProcesses": (
        lambda nv, h: nv.nvmlDeviceGetComputeRunningProcesses(h)
    ),
    "idle/gpu0 nvmlDeviceGetGraphicsRunningProcesses": (
        lambda nv, h: nv.nvmlDeviceGetGraphicsRunningProcesses(h)
    ),
    "idle/gpu0 nvmlDeviceGetProcessUtilization(timeStamp=0)": (
        lambda nv, h: nv.nvmlDeviceGetProcessUtilization(h, 0)
    ),
    "idle/gpu0 nvmlDeviceGetGpuInstanceId": lambda nv, h: nv.nvmlDeviceGetGpuInstanceId(h),
    "idle/gpu0 nvmlDeviceGetComputeInstanceId": (
        lambda nv, h: nv.nvmlDeviceGetComputeInstanceId(h)
    ),
    "idle/gpu0 nvmlDeviceGetSerial": lambda nv, h: nv.nvmlDeviceGetSerial(h),
    "idle/gpu0 nvmlDeviceGetComputeMode": lambda nv, h: nv.nvmlDeviceGetComputeMode(h),
    "idle/gpu0 nvmlDeviceGetPersistenceMode": lambda nv, h: nv.nvmlDeviceGetPersistenceMode(h),
    "idle/gpu0 nvmlDeviceGetMigMode": lambda nv, h: nv.nvmlDeviceGetMigMode(h),
    "idle/gpu0 nvmlDeviceGetMaxMigDeviceCount": lambda nv, h: nv.nvmlDeviceGetMaxMigDeviceCount(h),
    "idle/gpu0 nvmlDeviceGetMigDeviceHandleByIndex(0)": (
        lambda nv, h: nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    ),
}


@pytest.mark.parametrize("key", sorted(CALLS))
def test_each_answer_is_the_h200s(key: str, h200: tuple[FakeNvml, Any]) -> None:
    fake, handle = h200
    real_call = recorded()[key]
    kind, value = outcome(lambda: CALLS[key](fake, handle))
    if not real_call["ok"]:
        assert (kind, value) == ("error", real_call["error"]["class"])
        return
    assert kind == "ok", f"the H200 answered {real_call['value']!r}, the fake raised {value}"
    if key.endswith("GetSerial"):
        assert isinstance(value, str) and value.isdigit()
    else:
        assert value == real_call["value"]


def test_a_process_on_a_full_gpu_has_no_instance_ids(h200: tuple[FakeNvml, Any]) -> None:
    fake, handle = h200
    fake.gpus[0].processes = [FakeProcess(620, 810.0)]
    (process,) = fake.nvmlDeviceGetComputeRunningProcesses(handle)
    listed = recorded()["load/gpu0 nvmlDeviceGetComputeRunningProcesses"]["value"][0]
    assert set(vars(process)) == set(listed)
    assert (process.gpuInstanceId, process.computeInstanceId) == (
        listed["gpuInstanceId"],
        listed["computeInstanceId"],
    )
    assert fake.nvmlSystemGetProcessName(620) == "/usr/bin/python3"  # a str, not bytes


def test_gpm_metrics_carry_their_metric_info(h200: tuple[FakeNvml, Any]) -> None:
    fake, handle = h200
    fake.gpus[0].sm_util_pct, fake.gpus[0].dram_bw_util_pct = 66.2, 1.9
    samples = [fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()]
    for sample in samples:
        fake.nvmlGpmSampleGet(handle, sample)
    request = real.c_nvmlGpmMetricsGet_t()
    request.version, request.numMetrics = real.NVML_GPM_METRICS_GET_VERSION, 2
    request.sample1, request.sample2 = samples
    request.metrics[0].metricId = real.NVML_GPM_METRIC_SM_UTIL
    request.metrics[1].metricId = real.NVML_GPM_METRIC_DRAM_BW_UTIL
    result = fake.nvmlGpmMetricsGet(request)
    key = "load/gpu0 nvmlGpmMetricsGet(SM_UTIL+DRAM_BW_UTIL)"
    for metric, seen in zip(result.metrics[:2], recorded()[key]["value"]["metrics"], strict=True):
        info = metric.metricInfo
        assert (metric.metricId, metric.nvmlReturn) == (seen["metricId"], seen["nvmlReturn"])
        assert {
            "shortName": info.shortName.decode(),
            "longName": info.longName.decode(),
            "unit": info.unit.decode(),
        } == seen["metricInfo"]
    assert [m.value for m in result.metrics[:2]] == [66.2, 1.9]
