"""The nvidia-smi fake answers as the real tool did on an H200 (driver 580.159.04, MIG mode
disabled, 2026-11-29): every answer recorded in bench/results/h200-2026-11-29/run2/raw_probe.json
that the fake models is replayed against it, byte for byte, exit status and streams apart; and
gpudesk reads those answers right. (The MPS control fake's replay is in
tests/hw/test_mps.py.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import Run
from fakes.h200_records import extra_checks, raw_probe

from gpudesk.hw.mig import manager, nvidia_smi

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"
SMI_RUNS = {run["key"]: run for run in raw_probe()["nvidia_smi"]["runs"]}
SMI_CHECKS = {k: v for k, v in extra_checks().items() if k.startswith("nvidia-smi ")}
# Answers of nvidia-smi that gpudesk never reads and the fake does not model.
UNMODELLED = {"table", "--version", "-q -d COMPUTE", "query-compute-apps"}


def h200_state(tmp_path: Path, mig_mode: str = "disabled") -> Path:
    """The recorded H200 as the fake's state (name, UUID and bus ID as `-L` and the query
    showed them)."""
    name, uuid = "NVIDIA H200", "GPU-4c185902-fd69-cccd-bdd0-08bfc0fbea09"
    assert f"GPU 0: {name} (UUID: {uuid})" in SMI_RUNS["-L"]["stdout"]
    state = tmp_path / "smi.json"
    gpu = {"name": name, "uuid": uuid, "pci_bus_id": "00000000:00:06.0", "mig_mode": mig_mode}
    state.write_text(json.dumps({"root": True, "gpus": [gpu]}))
    return state


def run_smi(state: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUDESK_FAKE_NVIDIA_SMI_STATE": str(state)}
    return subprocess.run(
        [str(FAKES / "nvidia-smi"), *args], capture_output=True, text=True, env=env, timeout=30
    )


@pytest.mark.parametrize("key", sorted(set(SMI_RUNS) - UNMODELLED))
def test_nvidia_smi_fake_answers_as_the_h200_did(tmp_path: Path, key: str) -> None:
    real = SMI_RUNS[key]
    here = run_smi(h200_state(tmp_path), real["args"])
    assert (here.returncode, here.stdout, here.stderr) == (
        real["rc"],
        real["stdout"],
        real["stderr"],
    )


@pytest.mark.parametrize("command", sorted(SMI_CHECKS))
def test_nvidia_smi_fake_answers_the_follow_up_checks_as_the_h200_did(
    tmp_path: Path, command: str
) -> None:
    here = run_smi(h200_state(tmp_path), command.split()[1:])
    assert (here.returncode, here.stdout, here.stderr) == SMI_CHECKS[command]


def test_the_h200_profile_table_reads_alike_from_the_driver_and_the_fake(tmp_path: Path) -> None:
    real = nvidia_smi.parse_gi_profiles(SMI_RUNS["mig -lgip"]["stdout"])
    assert [(p.short_name, p.id, p.total, p.memory_gib, p.sm) for p in real][-1] == (
        "7g.141gb",
        0,
        1,
        140.0,
        132,
    )
    state = h200_state(tmp_path, mig_mode="enabled")
    assert nvidia_smi.parse_gi_profiles(run_smi(state, ["mig", "-i", "0", "-lgip"]).stdout) == real
    placements = nvidia_smi.parse_gi_placements(SMI_RUNS["mig -lgipp"]["stdout"])
    fake = run_smi(state, ["mig", "-i", "0", "-lgipp"]).stdout
    assert nvidia_smi.parse_gi_placements(fake) == placements


def test_an_h200_in_mig_mode_takes_a_mixed_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The H200's table drives the fake's placement rules: 3g + 2g + two 1g fill its 8 memory
    slices and 7 compute slices."""
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_STATE", str(h200_state(tmp_path, "enabled")))
    slots = manager.MigManager(str(FAKES / "nvidia-smi")).apply(
        0, "3g.71gb,2g.35gb,1g.18gb,1g.18gb"
    )
    assert sorted(s.profile for s in slots) == ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]


@pytest.fixture
def h200_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = h200_state(tmp_path)
    monkeypatch.setenv("GPUDESK_NVIDIA_SMI", str(FAKES / "nvidia-smi"))
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_STATE", str(state))
    return state


def test_mig_profiles_on_an_h200_with_mig_disabled_says_so(h200_smi: Path, gpudesk: Run) -> None:
    """The driver lists the profiles of a GPU with MIG off (exit 0): gpudesk must still say
    that MIG is off and how to turn it on, not offer profiles that cannot be created."""
    code, out, err = gpudesk("mig", "profiles", "--gpu", "0")
    assert code == 1 and "MIG mode is not enabled on GPU 0" in err, (out, err)
    assert "sudo nvidia-smi -i 0 -mig 1" in err and "Traceback" not in err
    code, out, err = gpudesk("mig", "profiles", "--json")
    assert code == 1 and "MIG mode is not enabled on GPU 0" in err, (out, err)


def test_mig_list_and_apply_on_an_h200_with_mig_disabled(h200_smi: Path, gpudesk: Run) -> None:
    """-lgi answers "No MIG-enabled devices found." with exit 0: still MIG off, not an empty
    layout."""
    code, out, err = gpudesk("mig", "list")
    assert code == 0 and "GPU 0: NVIDIA H200" in out and "sudo nvidia-smi -i 0 -mig 1" in out
    code, out, err = gpudesk("mig", "apply", "--gpu", "0", "3g.71gb", "--dry-run")
    assert code == 1 and "MIG mode is not enabled on GPU 0" in err, (out, err)
    with pytest.raises(nvidia_smi.NvidiaSmiError) as refused:
        manager.MigManager().instances(0)
    assert refused.value.kind == "mig-disabled"
