"""The NVML backend against a fake pynvml built on the real nvidia-ml-py module."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.fake_pynvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

from gpudesk.hw.telemetry.model import BackendUnavailable, GpuHealth, GpuReading
from gpudesk.hw.telemetry.nvml import NvmlBackend, probe_nvml

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def opened(fake: FakeNvml) -> NvmlBackend:
    backend = NvmlBackend(module=fake)
    backend.open()
    return backend


def two_gpus() -> FakeNvml:
    """GPU 0 has everything; GPU 1 has no energy counter and a driver without GPM."""
    return FakeNvml(
        [
            FakeGpu(power_w=250.0, energy_mj=5_000_000, sm_util_pct=40.0, utilization_gpu=90),
            FakeGpu(
                name="NVIDIA A100-SXM4-40GB",
                power_w=100.0,
                unsupported={"nvmlDeviceGetTotalEnergyConsumption"},
                errors={"nvmlGpmQueryDeviceSupport": "FunctionNotFound"},
            ),
        ]
    )


def test_unsupported_metrics_are_none_listed_and_asked_once(caplog: pytest.LogCaptureFixture):
    fake = two_gpus()
    backend = opened(fake)
    with caplog.at_level(logging.INFO, logger="gpudesk.telemetry"):
        first = backend.read()
        fake.advance(2.0)
        second = backend.read()
        for _ in range(5):
            fake.advance(1.0)
            backend.read()

    g0, g1 = first.gpus
    assert g0.sm_activity_pct is None  # no previous GPM sample yet
    assert g0.energy_counter_j == 5000.0
    assert g0.power_w == 250.0 and g0.kernel_active_pct == 90.0
    assert g0.unavailable == ()
    assert g1.energy_counter_j is None and g1.sm_activity_pct is None
    assert g1.unavailable == (
        "sm_activity",
        "graphics_activity",
        "tensor_activity",
        "energy_counter",
    )
    assert g1.power_w == 100.0

    g0, g1 = second.gpus
    assert g0.sm_activity_pct == 40.0
    assert g0.energy_counter_j == pytest.approx(5000.0 + 250.0 * 2)
    assert g1.energy_counter_j is None and g1.unavailable == (
        "sm_activity",
        "graphics_activity",
        "tensor_activity",
        "energy_counter",
    )

    assert fake.count("nvmlDeviceGetTotalEnergyConsumption", gpu=1) == 1
    assert fake.count("nvmlGpmQueryDeviceSupport", gpu=1) == 1
    assert fake.count("nvmlDeviceGetTotalEnergyConsumption", gpu=0) == 7
    assert fake.count("nvmlGpmQueryDeviceSupport", gpu=0) == 1
    assert fake.count("nvmlGpmSampleGet", gpu=0) == 7
    notes = [r for r in caplog.records if r.name == "gpudesk.telemetry"]
    assert [r.levelno for r in notes] == [logging.INFO, logging.INFO]
    assert all(r.getMessage().startswith("GPU 1:") for r in notes)


def test_a_gpu_without_gpm_support_is_asked_once():
    fake = FakeNvml([FakeGpu(name="NVIDIA A100-SXM4-80GB", gpm_supported=False)])
    backend = opened(fake)
    for _ in range(3):
        reading = backend.read().gpus[0]
    assert reading.sm_activity_pct is None and reading.unavailable == (
        "sm_activity",
        "graphics_activity",
        "tensor_activity",
    )
    assert fake.count("nvmlGpmQueryDeviceSupport") == 1
    assert fake.count("nvmlGpmSampleAlloc") == 0


def test_gpm_gives_graphics_and_tensor_activity_and_one_it_lacks_is_left_out():
    """GRAPHICS_UTIL and ANY_TENSOR_UTIL come in the same nvmlGpmMetricsGet as SM_UTIL; a
    metric the GPU answers NotSupported for (its nvmlReturn) is None, listed and not asked
    again, the others still read."""
    hopper = FakeGpu(sm_util_pct=40.0, graphics_util_pct=97.5, tensor_util_pct=31.25)
    partial = FakeGpu(
        sm_util_pct=20.0,
        graphics_util_pct=60.0,
        gpm_unsupported={"NVML_GPM_METRIC_ANY_TENSOR_UTIL"},
    )
    fake = FakeNvml([hopper, partial])
    backend = opened(fake)
    backend.read()
    for _ in range(2):
        fake.advance(1.0)
        g0, g1 = backend.read().gpus
    assert (g0.sm_activity_pct, g0.graphics_active_pct, g0.tensor_active_pct) == (
        40.0, 97.5, 31.25,
    )  # fmt: skip
    assert g0.unavailable == ()
    assert (g1.sm_activity_pct, g1.graphics_active_pct, g1.tensor_active_pct) == (20.0, 60.0, None)
    assert g1.unavailable == ("tensor_activity",)
    assert fake.last_args is not None and fake.count("nvmlGpmMetricsGet", gpu=1) == 2


def test_memory_health_ecc_remapped_rows_and_retired_pages_where_the_gpu_gives_them():
    hopper = FakeGpu(
        ecc_corrected=7, ecc_uncorrected=1, remapped_rows=(3, 1, 0, 1),
        unsupported={"nvmlDeviceGetRetiredPages"},  # it remaps rows instead
    )  # fmt: skip
    volta = FakeGpu(
        name="Tesla V100-SXM2-32GB", retired_sbe=[0x1000, 0x2000], retired_dbe=[0x3000],
        unsupported={"nvmlDeviceGetRemappedRows"},
    )  # fmt: skip
    ecc_off = FakeGpu(
        unsupported={
            "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPages"
        }
    )  # fmt: skip
    fake = FakeNvml([hopper, volta, ecc_off])
    backend = opened(fake)
    for _ in range(3):
        h, v, off = backend.read().gpus
    assert h.health == GpuHealth(7, 1, 3, 1, True, None, None)
    assert v.health == GpuHealth(0, 0, None, None, None, 2, 1)
    assert off.health is None
    assert "retired_pages" in h.unavailable and "remapped_rows" in v.unavailable
    assert {"ecc", "remapped_rows", "retired_pages"} <= set(off.unavailable)
    assert fake.count("nvmlDeviceGetRetiredPages", gpu=0) == 1  # asked once, then not again


def test_process_utilization_not_found_is_no_samples_yet():
    fake = FakeNvml([FakeGpu(processes=[FakeProcess(100, 2048.0), FakeProcess(101, None)])])
    backend = opened(fake)

    reading = backend.read().gpus[0]
    assert [(p.pid, p.used_memory_mib, p.sm_pct) for p in reading.processes] == [
        (100, 2048.0, None),
        (101, None, None),
    ]
    assert "process_utilization" not in reading.unavailable

    fake.advance(0.5)
    fake.add_sample(0, 100, sm_util=30)
    fake.advance(0.5)
    newest = fake.add_sample(0, 100, sm_util=55)
    fake.add_sample(0, 999, sm_util=10)  # a process that already ended
    reading = backend.read().gpus[0]
    assert {p.pid: p.sm_pct for p in reading.processes} == {100: 55.0, 101: None}

    reading = backend.read().gpus[0]  # nothing new since the newest sample
    assert fake.last_args["nvmlDeviceGetProcessUtilization"] == (newest.timestamp_us,)
    assert {p.pid: p.sm_pct for p in reading.processes} == {100: None, 101: None}
    assert "process_utilization" not in reading.unavailable
    assert fake.count("nvmlDeviceGetProcessUtilization") == 3


def test_a_gpu_lost_mid_run(caplog: pytest.LogCaptureFixture):
    fake = two_gpus()
    backend = opened(fake)
    backend.read()
    fake.lose(1)
    with caplog.at_level(logging.WARNING, logger="gpudesk.telemetry"):
        readings = [backend.read() for _ in range(3)]
    for reading in readings:
        g0, g1 = reading.gpus
        assert g0.power_w == 250.0 and not g0.lost
        # a lost GPU keeps its last XID (0: none came before it was lost)
        assert g1 == GpuReading(
            1, fake.gpus[1].uuid, "NVIDIA A100-SXM4-40GB", lost=True, last_xid=0
        )
    asked = sum(n for (_, index), n in fake.device_calls.items() if index == 1)
    backend.read()
    assert sum(n for (_, index), n in fake.device_calls.items() if index == 1) == asked
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "is lost" in caplog.records[0].getMessage() and len(caplog.records) == 1
    assert [info.index for info in backend.inventory()] == [0]


def test_a_gpu_lost_before_open_is_reported_lost():
    fake = two_gpus()
    fake.lose(0)
    backend = opened(fake)
    assert backend.read().gpus[0].lost
    assert backend.read().gpus[1].power_w == 100.0


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("LibraryNotFound", "no NVIDIA driver answers (libnvidia-ml.so.1"),
        ("DriverNotLoaded", "no NVIDIA driver answers (the nvidia kernel module is not loaded)"),
        (
            "LibRmVersionMismatch",
            "the NVIDIA kernel module and libnvidia-ml are different versions",
        ),
        ("Unknown", "NVML could not start: Unknown Error"),
    ],
)
def test_init_failure(error: str, message: str):
    fake = FakeNvml([FakeGpu()], init_error=error)
    with pytest.raises(BackendUnavailable) as raised:
        NvmlBackend(module=fake).open()
    assert str(raised.value).startswith(message)
    if error == "LibRmVersionMismatch":
        assert "reboot" in str(raised.value)
    assert probe_nvml(fake) is False


def test_probe_nvml_needs_a_gpu_and_shuts_down():
    with_gpu = FakeNvml([FakeGpu()])
    assert probe_nvml(with_gpu) is True
    assert with_gpu.initialized == 0
    assert probe_nvml(FakeNvml([])) is False


@pytest.mark.parametrize("error", ["FunctionNotFound", "NotSupported", "ArgumentVersionMismatch"])
def test_memory_v2_falls_back_to_v1(error: str):
    fake = FakeNvml(
        [
            FakeGpu(
                memory_total_mib=1000.0,
                memory_used_mib=300.0,
                memory_reserved_mib=50.0,
                errors={"nvmlDeviceGetMemoryInfo_v2": error},
            )
        ]
    )
    backend = opened(fake)
    for _ in range(3):
        reading = backend.read().gpus[0]
    assert (reading.memory_used_mib, reading.memory_total_mib) == (350.0, 1000.0)  # v1: +reserved
    assert "memory" not in reading.unavailable
    assert fake.count("nvmlDeviceGetMemoryInfo_v2") == 1
    assert backend.inventory()[0].memory_total_mib == 1000.0


def test_memory_v2_reports_reserved_apart():
    fake = FakeNvml(
        [FakeGpu(memory_total_mib=1000.0, memory_used_mib=300.0, memory_reserved_mib=50.0)]
    )
    reading = opened(fake).read().gpus[0]
    assert (reading.memory_used_mib, reading.memory_total_mib) == (300.0, 1000.0)
    assert fake.count("nvmlDeviceGetMemoryInfo") == 0


def test_mig_devices_with_an_empty_slot():
    fake = FakeNvml(
        [
            FakeGpu(
                name="NVIDIA A100-SXM4-40GB",
                mig_enabled=True,
                processes=[FakeProcess(5, 10.0)],
                mig_devices=[
                    FakeMig(
                        "MIG-a",
                        gpu_instance_id=1,
                        compute_instance_id=0,
                        memory_total_mib=19968.0,
                        memory_used_mib=1024.0,
                        sm_count=42,
                        processes=[FakeProcess(7, 1000.0)],
                    ),
                    None,
                    FakeMig(
                        "MIG-b",
                        name="NVIDIA A100-SXM4-40GB MIG 2g.10gb",
                        gpu_instance_id=5,
                        compute_instance_id=0,
                        memory_total_mib=9856.0,
                        sm_count=28,
                        processes=[FakeProcess(8, None)],
                    ),
                ],
            ),
            FakeGpu(name="NVIDIA A100-SXM4-40GB", mig_enabled=False),
            FakeGpu(name="NVIDIA RTX 6000 Ada Generation", mig_enabled=None),
        ]
    )
    backend = opened(fake)
    mig_gpu, disabled, no_mig = backend.read().gpus

    assert mig_gpu.mig_enabled is True
    a, b = mig_gpu.mig_devices
    assert (a.index, a.uuid, a.gpu_instance_id, a.compute_instance_id, a.sm_count) == (
        0,
        "MIG-a",
        1,
        0,
        42,
    )
    assert (a.memory_used_mib, a.memory_total_mib) == (1024.0, 19968.0)
    assert [(p.pid, p.used_memory_mib, p.mig_device) for p in a.processes] == [(7, 1000.0, 0)]
    assert (b.index, b.name, b.gpu_instance_id, b.sm_count) == (
        2,
        "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
        5,
        28,
    )
    assert [(p.pid, p.used_memory_mib, p.mig_device) for p in b.processes] == [(8, None, 2)]
    assert [(p.pid, p.mig_device) for p in mig_gpu.processes] == [(5, None), (7, 0), (8, 2)]
    assert "mig" not in mig_gpu.unavailable

    assert disabled.mig_enabled is False and disabled.mig_devices == ()
    assert no_mig.mig_enabled is None and "mig" in no_mig.unavailable
    assert [info.mig_capable for info in backend.inventory()] == [True, True, False]


def test_an_unexpected_error_is_none_for_one_read(caplog: pytest.LogCaptureFixture):
    fake = FakeNvml(
        [FakeGpu(power_w=250.0, errors={"nvmlDeviceGetPowerUsage": ["Unknown", None, "Unknown"]})]
    )
    backend = opened(fake)
    with caplog.at_level(logging.WARNING, logger="gpudesk.telemetry"):
        powers = [backend.read().gpus[0].power_w for _ in range(4)]
    assert powers == [None, 250.0, None, 250.0]
    assert backend.read().gpus[0].unavailable == ()
    assert len(caplog.records) == 1  # once per (device, metric, error class)
    assert "power" in caplog.records[0].getMessage()


def test_a_non_nvml_exception_does_not_escape(caplog: pytest.LogCaptureFixture):
    fake = FakeNvml(
        [FakeGpu(temperature_c=60, errors={"nvmlDeviceGetTemperature": RuntimeError("boom")})]
    )
    backend = opened(fake)
    with caplog.at_level(logging.WARNING, logger="gpudesk.telemetry"):
        readings = [backend.read().gpus[0] for _ in range(3)]
    assert [r.temperature_c for r in readings] == [None, None, None]
    assert readings[-1].power_w == 70.0
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None


@pytest.mark.parametrize(
    ("break_it", "banner"),
    [
        (lambda fake: setattr(fake, "library_error", "LibRmVersionMismatch"), "reboot"),
        (lambda fake: fake.nvmlShutdown(), "NVML stopped answering (Uninitialized)"),
    ],
)
def test_nvml_going_away_during_a_read_gives_a_banner(break_it, banner: str):
    fake = two_gpus()
    backend = opened(fake)
    assert backend.read().banner is None
    break_it(fake)
    reading = backend.read()
    assert banner in (reading.banner or "")
    assert [(g.index, g.uuid, g.power_w) for g in reading.gpus] == [
        (0, fake.gpus[0].uuid, None),
        (1, fake.gpus[1].uuid, None),
    ]


def test_close_frees_gpm_samples_and_never_raises():
    fake = two_gpus()
    backend = opened(fake)
    backend.read()
    backend.read()
    assert fake.gpm_allocated == 2  # GPU 0 only
    backend.close()
    assert fake.gpm_freed == 2 and fake.initialized == 0
    backend.close()
    broken = opened(two_gpus())
    broken.read()
    broken._nv.library_error = "Unknown"  # every call, nvmlShutdown included, now fails
    broken._nv.nvmlShutdown = None
    broken.close()
    assert broken.read().banner == "the NVML backend is not open"


def _nvml_library_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_through_the_shim_in_a_subprocess(tmp_path: Path):
    scenario = tmp_path / "station.json"
    scenario.write_text(
        json.dumps(
            {
                "gpus": [
                    {
                        "name": "NVIDIA H100 80GB HBM3",
                        "uuid": "GPU-shim-0",
                        "memory_total_mib": 81559,
                        "memory_used_mib": 2048,
                        "power_w": 310,
                        "energy_mj": 1000000,
                        "sm_util_pct": 35.0,
                        "processes": [{"pid": 4242, "used_memory_mib": 2000}],
                    },
                    {
                        "name": "NVIDIA A100-SXM4-40GB",
                        "uuid": "GPU-shim-1",
                        "unsupported": ["nvmlDeviceGetTotalEnergyConsumption"],
                        "errors": {"nvmlGpmQueryDeviceSupport": "FunctionNotFound"},
                    },
                ]
            }
        )
    )
    code = (
        "import json, pynvml\n"
        "from gpudesk.hw.telemetry.nvml import NvmlBackend, probe_nvml\n"
        "b = NvmlBackend(); b.open(); b.read(); r = b.read(); b.close()\n"
        "print(json.dumps({'probe': probe_nvml(), 'shim': pynvml.__file__,\n"
        "                  'gpus': [g.to_dict() for g in r.gpus]}))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "tests" / "fakes" / "nvml_shim"),
        "GPUDESK_FAKE_NVML": str(scenario),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["probe"] is True and result["shim"].endswith("nvml_shim/pynvml.py")
    g0, g1 = result["gpus"]
    assert (g0["uuid"], g0["power_w"], g0["memory_used_mib"]) == ("GPU-shim-0", 310.0, 2048.0)
    assert g0["energy_counter_j"] >= 1000.0 and g0["sm_activity_pct"] == 35.0
    assert g0["processes"][0]["pid"] == 4242
    assert g1["unavailable"] == [
        "sm_activity",
        "graphics_activity",
        "tensor_activity",
        "energy_counter",
    ]

    scenario.write_text(json.dumps({"init_error": "LibRmVersionMismatch", "gpus": [{}]}))
    code = (
        "from gpudesk.hw.telemetry.nvml import NvmlBackend\n"
        "try:\n    NvmlBackend().open()\nexcept Exception as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "reboot" in done.stdout


@pytest.mark.skipif(_nvml_library_loads(), reason="this machine has an NVIDIA driver")
def test_probe_nvml_with_the_real_module_and_no_driver():
    assert probe_nvml() is False
    with pytest.raises(BackendUnavailable, match="no NVIDIA driver answers"):
        NvmlBackend().open()
