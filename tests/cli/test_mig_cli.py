"""`gpudesk mig` against the stateful fake nvidia-smi (tests/fakes/nvidia-smi), named by
GPUDESK_NVIDIA_SMI as a user would. The commands run in-process through gpudesk.cli.main (the
real error handling and exit codes); one runs as a separate process."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, wait_for

from gpudesk.core import mig_layout as layout
from gpudesk.core import mig_profiles as profiles
from gpudesk.core import mig_records as records
from gpudesk.hw.mig import manager
from gpudesk.paths import Home

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "nvidia-smi"
READ_ONLY = ("-L", "-lgip", "-lgipp", "-lgi", "-lci", "--query-gpu")


def a100(**fields: object) -> dict:
    gpu = {
        "name": "NVIDIA A100-SXM4-40GB",
        "uuid": "GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0",
        "pci_bus_id": "00000000:07:00.0",
        "mig_mode": "enabled",
        "gpu_instances": [],
    }
    gpu.update(fields)
    return gpu


def two_halves(busy: int | None = None) -> list[dict]:
    """Two 3g.20gb instances with a compute instance each; `busy`: the one a process runs on."""
    return [
        {
            "id": gi_id,
            "profile_id": 9,
            "start": start,
            "size": 4,
            "in_use": gi_id == busy,
            "compute_instances": [
                {
                    "id": 0,
                    "profile_id": 2,
                    "start": 0,
                    "size": 3,
                    "uuid": f"MIG-0000000{gi_id}-0000-5000-8000-000000000000",
                }
            ],
        }
        for gi_id, start in ((1, 0), (2, 4))
    ]


class FakeSmi:
    def __init__(self, root: Path) -> None:
        self.state_file = root / "state.json"
        self.log_file = root / "calls.jsonl"

    def write(self, *gpus: dict, root: bool = True) -> None:
        self.state_file.write_text(json.dumps({"root": root, "gpus": list(gpus)}))

    def state(self) -> dict:
        return json.loads(self.state_file.read_text())

    def calls(self) -> list[list[str]]:
        if not self.log_file.exists():
            return []
        return [json.loads(line) for line in self.log_file.read_text().splitlines()]

    def changing_calls(self) -> list[list[str]]:
        return [c for c in self.calls() if not any(a.startswith(READ_ONLY) for a in c)]


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSmi:
    fake = FakeSmi(tmp_path)
    monkeypatch.setenv("GPUDESK_NVIDIA_SMI", str(FAKE))
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_STATE", str(fake.state_file))
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_LOG", str(fake.log_file))
    return fake


def test_profiles_json(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100())
    code, out, _ = gpudesk("mig", "profiles", "--json")
    assert code == 0
    (gpu,) = json.loads(out)["gpus"]
    assert (gpu["index"], gpu["mig_mode"]) == (0, "enabled")
    rows = {p["name"]: p for p in gpu["profiles"]}
    assert list(rows) == ["1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert rows["3g.20gb"] == {
        "id": 9,
        "name": "3g.20gb",
        "free": 2,
        "total": 2,
        "memory_gib": 19.62,
        "sm": 42,
        "ce": 3,
        "dec": 2,
        "enc": 0,
        "jpeg": 0,
        "ofa": 0,
        "p2p": False,
        "placements": ["0:4", "4:4"],
    }
    assert smi.changing_calls() == []


def test_profiles_text_shows_what_is_free(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(gpu_instances=two_halves()))
    code, out, _ = gpudesk("mig", "profiles", "--gpu", "0")
    assert code == 0
    row = next(line for line in out.splitlines() if " 3g.20gb " in line)
    assert row.split()[:3] == ["9", "3g.20gb", "0/2"] and row.endswith("{0,4}:4")


def made_devices(smi: FakeSmi) -> dict[str, tuple[int, str]]:
    """MIG UUID -> (GPU instance ID, placement), from the fake's state."""
    return {
        ci["uuid"]: (gi["id"], f"{gi['start']}:{gi['size']}")
        for gi in smi.state()["gpus"][0]["gpu_instances"]
        for ci in gi["compute_instances"]
    }


def test_apply_creates_larger_slices_first_and_prints_the_uuids(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100())
    code, out, err = gpudesk("mig", "apply", "--gpu", "0", "1g.5gb,1g.5gb,2g.10gb,3g.20gb")
    assert (code, err) == (0, "")
    assert "GPU 0 now has 4 MIG device(s)" in out
    assert smi.changing_calls() == [["mig", "-i", "0", "-cgi", "9,14,19,19", "-C"]]
    made = made_devices(smi)
    assert len(made) == 4 and all(uuid in out for uuid in made)


def test_list_after_apply_shows_the_mig_uuids(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100())
    # What `apply` runs (checked above), straight to the fake to keep this test quick.
    created = subprocess.run(
        [str(FAKE), "mig", "-i", "0", "-cgi", "9,14,19,19", "-C"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert created.returncode == 0, created.stdout
    made = made_devices(smi)
    code, out, _ = gpudesk("mig", "list", "--json")
    assert code == 0
    (gpu,) = json.loads(out)["gpus"]
    assert gpu["mig_mode"] == "enabled"
    devices = gpu["mig_devices"]
    assert sorted(d["profile"] for d in devices) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    assert {d["uuid"]: (d["gpu_instance_id"], d["placement"]) for d in devices} == made
    assert [d["device"] for d in devices] == [0, 1, 2, 3]


def test_list_text(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(gpu_instances=two_halves()), a100(mig_mode="disabled", uuid="GPU-2"))
    code, out, _ = gpudesk("mig", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "GPU 0: NVIDIA A100-SXM4-40GB  MIG enabled, 2 MIG device(s)"
    assert lines[2].split() == [
        "0",
        "3g.20gb",
        "1",
        "0",
        "0:4",
        "MIG-00000001-0000-5000-8000-000000000000",
    ]
    assert lines[4] == "GPU 1: NVIDIA A100-SXM4-40GB"
    note = " ".join(" ".join(lines[5:]).split())  # the mode and what to do, wrapped under it
    assert note.startswith("MIG disabled.") and "sudo nvidia-smi -i 1 -mig 1" in note
    assert all(len(line) <= 80 for line in lines[4:]), lines  # the test's terminal: 80 columns


def test_apply_replaces_the_layout(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(gpu_instances=two_halves()))
    code, out, _ = gpudesk("mig", "apply", "--gpu", "0", "7g.40gb")
    assert code == 0
    assert smi.changing_calls() == [
        ["mig", "-i", "0", "-dci"],
        ["mig", "-i", "0", "-dgi"],
        ["mig", "-i", "0", "-cgi", "0", "-C"],
    ]
    (gi,) = smi.state()["gpus"][0]["gpu_instances"]
    assert (gi["profile_id"], gi["start"], gi["size"]) == (0, 0, 8)
    assert gi["compute_instances"][0]["uuid"] in out


def test_apply_on_a_busy_gpu_fails_cleanly(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(in_use=True, gpu_instances=two_halves()))
    before = smi.state_file.read_text()
    code, out, err = gpudesk("mig", "apply", "--gpu", "0", "1g.5gb")
    assert code == 1 and out == ""
    assert err.startswith("error: GPU 0 or one of its MIG instances is in use")
    assert "In use by another client" in err and "Stop the processes" in err
    assert "Nothing was changed on GPU 0." in err
    assert smi.state_file.read_text() == before


def test_a_failure_mid_apply_says_what_state_the_gpu_is_in(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(gpu_instances=two_halves(busy=2)))
    code, _, err = gpudesk("mig", "apply", "--gpu", "0", "1g.5gb")
    assert code == 1
    assert "In use by another client" in err
    assert "GPU 0 is now partly changed" in err
    assert "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  1" in err
    assert "gpudesk mig list" in err
    gis = smi.state()["gpus"][0]["gpu_instances"]
    assert [len(gi["compute_instances"]) for gi in gis] == [0, 1]


def test_a_layout_that_does_not_fit_is_refused_before_anything_changes(
    smi: FakeSmi, gpudesk: Run
) -> None:
    smi.write(a100(gpu_instances=two_halves()))
    before = smi.state_file.read_text()
    code, _, err = gpudesk("mig", "apply", "--gpu", "0", "4g.20gb,3g.20gb,1g.5gb")
    assert code == 1
    assert "does not fit" in err and "no placement is left for 1g.5gb" in err
    assert smi.changing_calls() == [] and smi.state_file.read_text() == before


def test_insufficient_resources_from_nvidia_smi(
    smi: FakeSmi, gpudesk: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were the planner's order wrong, the driver's refusal must still read clearly."""
    smi.write(a100())

    def as_given(available, requested, placements, occupied=()):  # type: ignore[no-untyped-def]
        return [
            records.PlannedInstance(layout.resolve_profile(available, n), profiles.SliceSpan(0, 1))
            for n in requested
        ]

    monkeypatch.setattr(manager, "plan_layout", as_given)
    code, _, err = gpudesk("mig", "apply", "--gpu", "0", "1g.5gb,1g.5gb,2g.10gb,3g.20gb")
    assert code == 1
    assert (
        "GPU 0 has no room left for a 3g.20gb instance (nvidia-smi: Insufficient Resources)" in err
    )
    assert "partly changed" in err and "Successfully created GPU instance ID 13" in err
    assert len(smi.state()["gpus"][0]["gpu_instances"]) == 3


def test_mig_not_enabled_tells_the_enable_command(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(mig_mode="disabled"), a100(mig_mode="pending", uuid="GPU-2"))
    code, _, err = gpudesk("mig", "apply", "--gpu", "0", "3g.20gb")
    assert code == 1
    assert "MIG mode is not enabled on GPU 0" in err
    assert "`sudo nvidia-smi -i 0 -mig 1`" in err and "never" in err
    code, _, err = gpudesk("mig", "apply", "--gpu", "1", "3g.20gb")
    assert code == 1
    assert "pending a GPU reset" in err and "`sudo nvidia-smi -i 1 -r`" in err
    assert smi.changing_calls() == []


def test_profiles_and_list_without_mig(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(mig_mode="disabled"), a100(mig_mode="pending", uuid="GPU-2"))
    code, _, err = gpudesk("mig", "profiles")
    said = " ".join(err.split())
    assert code == 1 and "sudo nvidia-smi -i 0 -mig 1" in said
    # every GPU is said, not the first alone, and why nothing is listed
    assert "no GPU here is in MIG mode" in said and "GPU 1:" in said and "-i 1 -r" in said
    code, out, _ = gpudesk("mig", "list", "--json")
    assert code == 0
    assert [g["mig_mode"] for g in json.loads(out)["gpus"]] == ["disabled", "pending"]
    assert smi.changing_calls() == []
    assert [g["mig_mode"] for g in smi.state()["gpus"]] == ["disabled", "pending"]


def test_dry_run_prints_the_commands_and_changes_nothing(
    smi: FakeSmi, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spaced = tmp_path / "driver tools" / "nvidia-smi"
    spaced.parent.mkdir()
    shutil.copy(FAKE, spaced)
    monkeypatch.setenv("GPUDESK_NVIDIA_SMI", str(spaced))
    smi.write(a100(gpu_instances=two_halves()))
    before = smi.state_file.read_text()
    code, out, _ = gpudesk("mig", "apply", "--gpu", "0", "1g.5gb,3g.20gb", "2g.10gb", "--dry-run")
    assert code == 0
    exe = shlex.quote(str(spaced))
    assert out.splitlines() == [
        f"{exe} mig -i 0 -dci",
        f"{exe} mig -i 0 -dgi",
        f"{exe} mig -i 0 -cgi 9,14,19 -C",
    ]
    assert [shlex.split(line)[0] for line in out.splitlines()] == [str(spaced)] * 3
    code, out, _ = gpudesk("mig", "clear", "--gpu", "0", "--dry-run")
    assert code == 0
    assert out.splitlines() == [f"{exe} mig -i 0 -dci", f"{exe} mig -i 0 -dgi"]
    assert smi.changing_calls() == [] and smi.state_file.read_text() == before


def test_clear(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(gpu_instances=two_halves()))
    code, out, _ = gpudesk("mig", "clear", "--gpu", "0")
    assert code == 0 and "cleared GPU 0" in out
    assert smi.state()["gpus"][0]["gpu_instances"] == []
    assert smi.state()["gpus"][0]["mig_mode"] == "enabled"
    assert smi.changing_calls() == [["mig", "-i", "0", "-dci"], ["mig", "-i", "0", "-dgi"]]


def test_clear_an_empty_gpu(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100())
    code, out, _ = gpudesk("mig", "clear", "--gpu", "0")
    assert code == 0 and "nothing to do" in out
    code, out, _ = gpudesk("mig", "list")
    assert code == 0 and "no MIG instances" in out
    assert smi.changing_calls() == []


def test_usage_errors_exit_2_with_a_suggestion(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100())
    code, _, err = gpudesk("mig", "apply", "--gpu", "0", "3g.20bg")
    assert code == 2
    assert err.startswith("error: unknown MIG profile '3g.20bg'. Did you mean 3g.20gb")
    code, _, err = gpudesk("mig", "apply", "--gpu", "3", "3g.20gb")
    assert code == 2 and "there is no GPU 3" in err
    assert smi.changing_calls() == []


def test_without_root_it_says_how_to_get_root(smi: FakeSmi, gpudesk: Run) -> None:
    smi.write(a100(), root=False)
    code, _, err = gpudesk("mig", "apply", "--gpu", "0", "3g.20gb")
    assert code == 1
    assert "needs root" in err and "sudo" in err and "sudoers" in err
    assert smi.state()["gpus"][0]["gpu_instances"] == []


def test_nvidia_smi_that_does_not_exist(
    smi: FakeSmi, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUDESK_NVIDIA_SMI", str(tmp_path / "missing" / "nvidia-smi"))
    code, _, err = gpudesk("mig", "list")
    assert code == 1
    assert "cannot run nvidia-smi at" in err and "(from GPUDESK_NVIDIA_SMI)" in err


def test_as_a_separate_process(tmp_path: Path) -> None:
    """The error path a user sees: `error: ...` on stderr, exit 1, no traceback."""
    missing = tmp_path / "nvidia-smi"
    result = subprocess.run(
        [sys.executable, "-m", "gpudesk", "mig", "list"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "GPUDESK_NVIDIA_SMI": str(missing)},
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"error: cannot run nvidia-smi at {missing} (from GPUDESK_NVIDIA_SMI)"
    )
    assert "Traceback" not in result.stderr


# ----------------------------------------------------------------- a simulated station
def sim_slices(engine: EngineHandle, gpu: int) -> list[str] | None:
    snapshot = engine.client.request("telemetry")["snapshot"]
    if snapshot is None:
        return None
    return [m["name"].rsplit(" ", 1)[-1] for m in snapshot["gpus"][gpu]["mig_devices"]]


def test_profiles_and_list_on_a_simulated_station(
    home: Home, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIMULATED DGX Station A100 with GPU 3 in MIG mode and no nvidia-smi on PATH: `mig
    profiles` and `mig list` answer from the engine (as `mig plan` does), labelled SIMULATED,
    instead of failing on the missing nvidia-smi."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi anywhere
    monkeypatch.delenv("GPUDESK_NVIDIA_SMI", raising=False)
    engine = EngineHandle(home)
    engine.start(backend="sim:dgx-station-a100", sample_interval=0.2, mig={"3": "3g.20gb"})
    try:
        wait_for(
            lambda: sim_slices(engine, 3) == ["3g.20gb"],
            what="GPU 3's MIG slice in telemetry",
        )
        code, out, err = gpudesk("mig", "profiles")
        assert code == 0, err
        assert "GPU 3: NVIDIA A100-SXM4-40GB  [SIMULATED]" in out
        gpu3 = out.split("GPU 3: ")[1]  # GPU 0-2 list what they would offer: 2/2 free
        row = next(line for line in gpu3.splitlines() if " 3g.20gb " in line)
        assert row.split()[:3] == ["9", "3g.20gb", "1/2"] and row.endswith("{0,4}:4")
        assert "GPU 0: NVIDIA A100-SXM4-40GB  [SIMULATED]\n  MIG disabled (SIMULATED)." in out
        # no nvidia-smi to run and no GPU to reset: the station's mig table is the switch
        said = " ".join(out.split())  # the note is wrapped to the terminal
        assert "sudo" not in out and 'mig = { 0 = "3g.20gb,3g.20gb" } under [station]' in said
        code, out, _ = gpudesk("mig", "profiles", "--gpu", "3", "--json")
        (gpu,) = json.loads(out)["gpus"]
        assert gpu["simulated"] is True and gpu["mig_mode"] == "enabled"
        rows = {p["name"]: p for p in gpu["profiles"]}
        assert (rows["7g.40gb"]["free"], rows["1g.5gb"]["free"]) == (0, 3)  # 1g: at 4, 5, 6
        code, _, err = gpudesk("mig", "profiles", "--gpu", "9")
        assert code == 2 and "GPU 9 is not a MIG-capable GPU" in err
        code, out, err = gpudesk("mig", "profiles", "--gpu", "0")  # what it would offer
        assert code == 0 and "MIG disabled (SIMULATED)" in out and not err, (out, err)
        row = next(line for line in out.splitlines() if " 3g.20gb " in line)
        assert row.split()[:3] == ["9", "3g.20gb", "2/2"]

        code, out, err = gpudesk("mig", "list")
        assert code == 0, err
        assert out.startswith("sim:dgx-station-a100 SIMULATED")
        assert "GPU 3: NVIDIA A100-SXM4-40GB  MIG enabled, 1 MIG device(s)" in out
        said = " ".join(out.split())  # the note is wrapped to the terminal
        assert "sudo" not in out and 'mig = { 1 = "3g.20gb,3g.20gb" } under [station]' in said
        assert re.search(r"^\s+0\s+3g\.20gb\s.*MIG-", out, re.M), out
        assert "nvidia-smi was not found" not in out + err
        code, out, _ = gpudesk("mig", "list", "--json")
        listed = json.loads(out)
        assert listed["simulated"] is True
        gpu3 = listed["gpus"][3]
        (device,) = gpu3["mig_devices"]
        assert device["profile"] == "3g.20gb" and device["uuid"].startswith("MIG-")
        # the keys a real GPU's listing has, each slice a GPU instance with its compute instance
        assert gpu3["gpu_instances"] == [
            {"id": device["gpu_instance_id"], "profile": "3g.20gb", "profile_id": 9}
            | {"placement": None}
        ]
        assert gpu3["compute_instances"] == [
            {"gpu_instance_id": device["gpu_instance_id"], "id": device["compute_instance_id"]}
            | {"profile": "3g.20gb", "profile_id": 2, "placement": None}
        ]
        assert listed["gpus"][0]["gpu_instances"] == listed["gpus"][0]["compute_instances"] == []
        assert [g["mig_mode"] for g in listed["gpus"]] == ["disabled"] * 3 + ["enabled"]

        # apply and clear drive nvidia-smi, which would act on the machine's real GPUs: refused
        smi_log = tmp_path / "smi.log"
        monkeypatch.setenv("GPUDESK_NVIDIA_SMI", str(FAKE))
        monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_LOG", str(smi_log))
        for command in (["apply", "-g", "3", "2g.10gb,2g.10gb"], ["clear", "-g", "3"]):
            for dry in ([], ["--dry-run"]):
                code, out, err = gpudesk("mig", *command, *dry)
                said = " ".join(err.split())
                assert code == 2 and not out, (command, out, err)
                assert said.startswith(
                    f"error: mig {command[0]}: the station is SIMULATED (sim:dgx-station-a100)"
                ), said
        assert "gpudesk engine set 'mig={3=\"2g.10gb,2g.10gb\"}'" in " ".join(
            gpudesk("mig", "apply", "-g", "3", "2g.10gb,2g.10gb")[2].split()
        )
        assert not smi_log.exists()
        assert sim_slices(engine, 3) == ["3g.20gb"]
    finally:
        engine.client.close()


def test_the_mig_mode_is_read_once_for_every_gpus_profiles(smi: FakeSmi, gpudesk: Run) -> None:
    """`mig profiles` and the engine's reading of the MIG GPUs (`mig plan`, repartitioning) ask
    nvidia-smi for the GPUs' MIG modes once, not once more per GPU."""
    from gpudesk.engine.station.repartition.station import real_gpus
    from gpudesk.hw.mig.manager import MigManager

    second = a100(uuid="GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b1", pci_bus_id="00000000:0F:00.0")
    smi.write(a100(), second, a100(uuid="GPU-3", pci_bus_id="00000000:47:00.0"))

    def mode_reads() -> int:
        return sum(1 for call in smi.calls() if any(a.startswith("--query-gpu") for a in call))

    code, out, _ = gpudesk("mig", "profiles", "--json")
    assert code == 0 and len(json.loads(out)["gpus"]) == 3, out
    assert mode_reads() == 1
    assert [state.mig_mode for state in real_gpus(MigManager(), {})] == ["enabled"] * 3
    assert mode_reads() == 2


def test_profiles_on_a_simulated_station_with_no_gpu_in_mig_mode_list_what_each_would_offer(
    home: Home, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every simulated GPU's MIG off: `mig profiles` lists each GPU, its mode and how to turn
    it on, and the profiles its model offers in MIG mode (all free), exit 0: it failed on GPU 0
    alone. `mig list` lists them too (0)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("GPUDESK_NVIDIA_SMI", raising=False)
    engine = EngineHandle(home)
    engine.start(backend="sim:dgx-station-a100", sample_interval=0.2)
    try:
        code, out, err = gpudesk("mig", "profiles")
        assert code == 0 and not err, (out, err)
        said = " ".join(out.split())
        for gpu in range(4):
            assert f"GPU {gpu}: NVIDIA A100-SXM4-40GB [SIMULATED] MIG disabled (SIMULATED)" in said
            assert f'mig = {{ {gpu} = "3g.20gb,3g.20gb" }} under [station]' in said
        assert said.count("In MIG mode it would offer:") == 4
        assert len([line for line in out.splitlines() if " 7g.40gb " in line]) == 4
        code, out, _ = gpudesk("mig", "profiles", "--json")
        gpus = json.loads(out)["gpus"]
        assert [g["mig_mode"] for g in gpus] == ["disabled"] * 4
        assert all("[station]" in g["problem"] for g in gpus)
        rows = {p["name"]: p for p in gpus[0]["profiles"]}
        assert (rows["7g.40gb"]["free"], rows["1g.5gb"]["free"]) == (1, 7)
        code, out, err = gpudesk("mig", "list")
        assert code == 0 and "GPU 3: NVIDIA A100-SXM4-40GB" in out, err
    finally:
        engine.stop()
