"""`gpudesk calibrate` looks at its GPU through NVML before anything runs: against the fake
pynvml, which answers the calls it makes as an H200 did (tests/fakes/fake_pynvml.py)."""

from __future__ import annotations

import sys

import pytest
from fakes.fake_pynvml import FakeGpu, FakeNvml, FakeProcess, real

from gpudesk.hw.probe_runner import CalibrationRefused, inspect_gpu

H200 = "NVIDIA H200"


def use(monkeypatch: pytest.MonkeyPatch, *gpus: FakeGpu) -> FakeNvml:
    fake = FakeNvml(list(gpus))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_an_idle_gpu_is_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = use(monkeypatch, FakeGpu(name=H200, uuid="GPU-4c18"))
    target = inspect_gpu(0)
    assert (target.name, target.uuid, target.mig_mode, target.exclusive_process) == (
        H200,
        "GPU-4c18",
        False,
        False,
    )
    assert fake.count("nvmlDeviceGetComputeMode") == 1
    assert fake.count("nvmlDeviceGetGraphicsRunningProcesses") == 1
    assert fake.initialized == 0  # NVML shut down again


def test_an_mps_server_left_on_the_gpu_makes_it_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeProcess(797, 66.0, name="nvidia-cuda-mps-server", mps="server")
    use(monkeypatch, FakeGpu(name=H200, processes=[server]))
    with pytest.raises(CalibrationRefused, match=r"other processes on it \(pid 797\)"):
        inspect_gpu(0)


def test_the_compute_modes_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, FakeGpu(name=H200, compute_mode=real.NVML_COMPUTEMODE_PROHIBITED))
    with pytest.raises(CalibrationRefused, match="PROHIBITED"):
        inspect_gpu(0)
    use(monkeypatch, FakeGpu(name=H200, compute_mode=real.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS))
    assert inspect_gpu(0).exclusive_process
