"""`gpudesk top --once` with no engine shows a GPU's MIG state as `gpudesk mig list` does, from
the same source, or says that it cannot know it; and neither starts an engine.

On a real station both read the driver (NVML for top, nvidia-smi for `mig list`: the faithful
fakes, tests/fakes, made one driver by `follow_nvidia_smi`). A SIMULATED station's MIG layout is
its engine's (the station's `mig` setting, in a store only the engine reads): with the engine
stopped, top says the layout is unknown, and `mig list` says the engine is not running (exit 3)
instead of starting one to list it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for

from gpudesk.api.connection import engine_pid
from gpudesk.paths import Home

FAKES = Path(__file__).resolve().parents[1] / "fakes"
A100 = "NVIDIA A100-SXM4-40GB"
UUID = "GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0"


def gpudesk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpudesk", *args], capture_output=True, text=True, timeout=60
    )


def halves() -> list[dict]:
    """Two 3g.20gb GPU instances with a compute instance each, as nvidia-smi keeps them."""
    return [
        {
            "id": gi,
            "profile_id": 9,
            "start": start,
            "size": 4,
            "compute_instances": [
                {"id": 0, "profile_id": 2, "start": 0, "size": 3, "uuid": f"MIG-{gi}" * 4}
            ],
        }
        for gi, start in ((1, 0), (2, 4))
    ]


@pytest.fixture
def driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Home) -> Path:
    """One fake driver (nvidia-smi's state, which NVML follows) behind an A100 in MIG mode;
    the state file, for a test to give the GPU its MIG instances."""
    smi_state, nvml = tmp_path / "smi.json", tmp_path / "nvml.json"
    nvml.write_text(
        json.dumps(
            {
                "follow_nvidia_smi": True,
                "gpus": [{"name": A100, "uuid": UUID, "memory_total_mib": 40960}],
            }
        )
    )
    monkeypatch.setenv("GPUDESK_NVIDIA_SMI", str(FAKES / "nvidia-smi"))
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_STATE", str(smi_state))
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "nvml_shim"))
    monkeypatch.setenv("GPUDESK_FAKE_NVML", str(nvml))
    monkeypatch.setenv("GPUDESK_BACKEND", "nvml")
    return smi_state


def write_gpu(state: Path, gpu_instances: list[dict]) -> None:
    gpu = {"name": A100, "uuid": UUID, "pci_bus_id": "00000000:07:00.0", "mig_mode": "enabled"}
    state.write_text(json.dumps({"root": True, "gpus": [{**gpu, "gpu_instances": gpu_instances}]}))


def test_top_shows_a_real_gpus_mig_state_as_mig_list_does(driver: Path, home: Home) -> None:
    write_gpu(driver, halves())
    top = gpudesk("top", "--once")
    assert top.returncode == 0, top.stderr
    listed = gpudesk("mig", "list")
    assert listed.returncode == 0, listed.stderr
    assert "MIG enabled, 2 MIG device(s)" in listed.stdout
    assert top.stdout.count(f"{A100} MIG 3g.20gb  GI") == 2, top.stdout

    write_gpu(driver, [])  # in MIG mode, no instance: not a whole GPU a job could run on
    top = gpudesk("top", "--once")
    assert "MIG enabled, no MIG devices: no job runs on it" in top.stdout, top.stdout
    assert "MIG enabled, 0 MIG device(s)" in gpudesk("mig", "list").stdout
    (gpu,) = json.loads(gpudesk("top", "--json").stdout)["gpus"]
    assert (gpu["mig_enabled"], gpu["mig_devices"]) == (True, [])
    assert engine_pid(home) is None  # neither started an engine


def test_top_shows_a_mig_mode_pending_a_reset(driver: Path, home: Home) -> None:
    """`nvidia-smi -i 0 -mig 1` on a busy GPU leaves MIG mode pending until a reset (nvidia-smi
    shows "Enabled*"): top says so, and what applies it, as `mig list` does; `--json` has it."""
    gpu = {"name": A100, "uuid": UUID, "pci_bus_id": "00000000:07:00.0", "mig_mode": "pending"}
    driver.write_text(json.dumps({"root": True, "gpus": [gpu]}))
    top = gpudesk("top", "--once")
    assert top.returncode == 0, top.stderr
    said = " ".join(top.stdout.split())
    assert "MIG off now, on after a GPU reset (`gpudesk mig list` says what applies it)" in said
    listed = " ".join(gpudesk("mig", "list").stdout.split())
    assert "MIG enabled but pending a GPU reset: stop every process on it, then " in listed
    assert "`sudo nvidia-smi -i 0 -r` or reboot (gpudesk never resets a GPU)" in listed
    (view,) = json.loads(gpudesk("top", "--json").stdout)["gpus"]
    assert (view["mig_enabled"], view["mig_pending"]) == (False, True)

    write_gpu(driver, [])  # applied: nothing pending, nothing said
    top = gpudesk("top", "--once")
    assert "after a GPU reset" not in top.stdout, top.stdout
    (view,) = json.loads(gpudesk("top", "--json").stdout)["gpus"]
    assert (view["mig_enabled"], view["mig_pending"]) == (True, True)
    assert engine_pid(home) is None


def test_a_simulated_layout_is_said_unknown_without_its_engine(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUDESK_BACKEND", "sim:a100-40gbx2")
    # where no engine ever ran, nothing gave the GPUs a layout: whole, without a note
    fresh = gpudesk("top", "--once")
    assert fresh.returncode == 0 and "MIG" not in fresh.stdout, fresh
    engine = EngineHandle(home)
    engine.start(backend="sim:a100-40gbx2", sample_interval=0.2, mig={"1": "3g.20gb,3g.20gb"})
    try:
        wait_for(lambda: "MIG 1 " in gpudesk("top", "--once").stdout, what="the engine's MIG")
        listed = gpudesk("mig", "list")
        assert "GPU 1: NVIDIA A100-SXM4-40GB  MIG enabled, 2 MIG device(s)" in listed.stdout
    finally:
        engine.stop()
        engine.client.close()

    top = gpudesk("top", "--once")
    assert top.returncode == 0, top.stderr
    assert "MIG 0 " not in top.stdout  # not shown as whole GPUs without a word
    assert top.stdout.count("MIG mode unknown without the engine") == 2, top.stdout
    said = " ".join(top.stdout.split())
    assert "their MIG mode is unknown here" in said and "gpudesk engine start" in said
    view = json.loads(gpudesk("top", "--json").stdout)
    assert [(g["mig_enabled"], g["mig_unknown"]) for g in view["gpus"]] == [(None, True)] * 2
    assert "MIG mode is unknown" in view["note"]

    for command in (["mig", "list"], ["mig", "profiles"]):
        done = gpudesk(*command)
        said = " ".join(done.stderr.split())
        assert done.returncode == 3 and not done.stdout, (command, done)
        assert "is a SIMULATED station, whose MIG layout is its engine's" in said
        assert "does not start one: `gpudesk engine start` starts it" in said
    # apply and clear, which nvidia-smi would do on the real GPUs, are refused as before
    done = gpudesk("mig", "apply", "-g", "1", "3g.20gb")
    assert done.returncode == 2 and "the station is SIMULATED" in done.stderr, done
    assert engine_pid(home) is None  # a read-only view started no engine, nor a refusal
