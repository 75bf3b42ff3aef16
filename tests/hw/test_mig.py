"""gpudesk.hw.mig without a GPU: the parsers against real nvidia-smi output (the fixtures), the
layout planner, the error mapping, and the fake nvidia-smi's fidelity to the fixtures."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from gpudesk.core import mig_layout as layout
from gpudesk.core import mig_records as records
from gpudesk.core.mig_layout import LayoutError, MigError, UnknownProfileError
from gpudesk.core.mig_profiles import SliceSpan
from gpudesk.core.mig_records import GpuEntry, MigEntry
from gpudesk.hw.mig import nvidia_smi
from gpudesk.hw.mig.manager import MigManager

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures" / "nvidia-smi" / "a100-40gb"
FAKE = TESTS / "fakes" / "nvidia-smi"


def fixture(name: str) -> tuple[list[str], bool, str]:
    """A fixture's nvidia-smi arguments, whether it ran under sudo, and its verbatim output."""
    first, output = (FIXTURES / name).read_text().split("\n", 1)
    assert first.startswith("$ "), name
    argv = shlex.split(first[2:])
    root = argv[0] == "sudo"
    argv = argv[1:] if root else argv
    assert argv[0] == "nvidia-smi", name
    return argv[1:], root, output


def output(name: str) -> str:
    return fixture(name)[2]


def profiles() -> list[records.GiProfile]:
    return nvidia_smi.parse_gi_profiles(output("lgip.txt"))


def placements() -> dict[int, tuple[SliceSpan, ...]]:
    return {p.profile_id: p.placements for p in nvidia_smi.parse_gi_placements(output("lgipp.txt"))}


# -------------------------------------------------------------------------------- parsers
def test_list_gpus_without_and_with_mig_devices() -> None:
    assert nvidia_smi.parse_list_gpus(output("L.txt")) == [
        GpuEntry(0, "NVIDIA A100-PCIE-40GB", "GPU-c7cc679c-da89-47e3-834b-24b894d632fd")
    ]
    (gpu,) = nvidia_smi.parse_list_gpus(output("L-mig.txt"))
    assert (gpu.index, gpu.name) == (0, "A100-SXM4-40GB")
    assert gpu.mig_devices == (
        MigEntry(0, "3g.20gb", 0, "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"),
        MigEntry(0, "3g.20gb", 1, "MIG-a28ad590-3fda-56dd-84fc-0a0b96edc58d"),
    )


def test_list_gpus_reads_newer_spacing_and_several_gpus() -> None:
    text = (
        "GPU 0: NVIDIA A30 (UUID: GPU-1e44b340-0000-0000-0000-343a6b8b8bcd)\n"
        "  MIG 1g.6gb      Device  0: (UUID: MIG-41b9eab5-0000-0000-0000-82bc59af3901)\n"
        "  MIG 2c.4g.24gb  Device  1: (UUID: MIG-GPU-1e44b340-0000/5/0)\n"
        "GPU 1: NVIDIA A30 (UUID: GPU-2e44b340-0000-0000-0000-343a6b8b8bcd)\n"
    )
    first, second = nvidia_smi.parse_list_gpus(text)
    assert [d.name for d in first.mig_devices] == ["1g.6gb", "2c.4g.24gb"]
    assert [d.device for d in first.mig_devices] == [0, 1]
    assert second.index == 1 and second.mig_devices == ()


def test_list_gpus_quotes_a_line_it_cannot_read() -> None:
    with pytest.raises(MigError, match="Failed to initialize NVML: Driver/library"):
        nvidia_smi.parse_list_gpus("Failed to initialize NVML: Driver/library version mismatch\n")


def test_gi_profiles_read_both_lines_of_each_row() -> None:
    rows = {p.short_name: p for p in profiles()}
    assert list(rows) == ["1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    seven = rows["7g.40gb"]
    assert (seven.gpu, seven.name, seven.id, seven.free, seven.total) == (0, "MIG 7g.40gb", 0, 1, 1)
    assert seven.memory_gib == 39.5 and seven.p2p is False
    assert (seven.sm, seven.dec, seven.enc, seven.ce, seven.jpeg, seven.ofa) == (98, 5, 0, 7, 1, 1)
    media = rows["1g.5gb+me"]
    assert (media.id, media.total, media.dec, media.jpeg, media.ofa) == (20, 1, 1, 1, 1)
    assert (rows["3g.20gb"].id, rows["3g.20gb"].compute_slices) == (9, 3)
    assert rows["1g.5gb"].free == 7


def test_gi_profiles_key_on_structure_not_on_fixed_columns() -> None:
    # Another driver's layout: a wider table, other figures, a profile the fixtures lack.
    text = """\
+---------------------------------------------------------------------------------+
| GPU instance profiles:                                                          |
| GPU   Name                 ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                                  Free/Total   GiB              CE    JPEG  OFA  |
|=================================================================================|
|   1  MIG 1g.10gb           19     5/7        9.62       No     14     0     0   |
|                                                                 1     0     0   |
+---------------------------------------------------------------------------------+
|   1  MIG 1g.10gb+me.all    15     1/1        9.62       No     14     N/A   0   |
|                                                                 1     1     1   |
+---------------------------------------------------------------------------------+
|   1  MIG 7g.80gb            0     0/1        79.25      No     98     5     0   |
|                                                                 7     1     1   |
+---------------------------------------------------------------------------------+
"""
    one, two, seven = nvidia_smi.parse_gi_profiles(text)
    assert (one.gpu, one.short_name, one.free, one.total, one.memory_gib) == (
        1,
        "1g.10gb",
        5,
        7,
        9.62,
    )
    assert (two.short_name, two.id, two.dec, two.ofa) == ("1g.10gb+me.all", 15, None, 1)
    assert (seven.sm, seven.ce, seven.memory_gib) == (98, 7, 79.25)
    # Rows not boxed one by one, some without a continuation line.
    unboxed = """\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
|   0  MIG 3g.20gb        9     2/2        19.62      No     42     2     0   |
|                                                             3     0     0   |
+-----------------------------------------------------------------------------+
"""
    small, half = nvidia_smi.parse_gi_profiles(unboxed)
    assert (small.id, small.sm, small.ce) == (19, 14, None)
    assert (half.id, half.sm, half.ce, half.jpeg) == (9, 42, 3, 0)


def test_gi_profiles_quote_a_row_they_cannot_read() -> None:
    lines = output("lgip.txt").splitlines()
    lines[5] = lines[5].replace("7/7", "seven")
    with pytest.raises(MigError, match=re.escape("MIG 1g.5gb        19     seven")):
        nvidia_smi.parse_gi_profiles("\n".join(lines))
    with pytest.raises(MigError, match="expected a table"):
        nvidia_smi.parse_gi_profiles("No MIG-enabled devices found.\n")


def test_gi_placements() -> None:
    table = placements()
    assert table[19] == tuple(SliceSpan(s, 1) for s in range(7))
    assert table[14] == (SliceSpan(0, 2), SliceSpan(2, 2), SliceSpan(4, 2))
    assert table[9] == (SliceSpan(0, 4), SliceSpan(4, 4))
    assert table[5] == (SliceSpan(0, 4),)  # "SliceSpan :" for a single one
    assert table[0] == (SliceSpan(0, 8),)
    with pytest.raises(MigError, match="Profile ID 9 Placements: 0,4"):
        nvidia_smi.parse_gi_placements("GPU  0 Profile ID 9 Placements: 0,4\n")


def test_gpu_instances_and_the_empty_answer() -> None:
    assert nvidia_smi.parse_gpu_instances(output("lgi.txt")) == [
        records.GpuInstance(0, "MIG 3g.20gb", 9, 1, SliceSpan(0, 4)),
        records.GpuInstance(0, "MIG 3g.20gb", 9, 2, SliceSpan(4, 4)),
    ]
    assert nvidia_smi.parse_gpu_instances(output("lgi-empty.txt")) == []
    narrow = """\
+----------------------------------------------------+
| GPU instances:                                     |
| GPU   Name          Profile  Instance   SliceSpan  |
|                       ID       ID       Start:Size |
|====================================================|
|   3  MIG 2g.10gb      14       5          0:2     |
+----------------------------------------------------+
"""
    assert nvidia_smi.parse_gpu_instances(narrow) == [
        records.GpuInstance(3, "MIG 2g.10gb", 14, 5, SliceSpan(0, 2))
    ]
    with pytest.raises(MigError, match=re.escape("MIG 3g.20gb          9        1          0-4")):
        nvidia_smi.parse_gpu_instances(output("lgi.txt").replace("0:4", "0-4", 1))


def test_compute_instances() -> None:
    full, *parts = nvidia_smi.parse_compute_instances(output("lci.txt"))
    assert full == records.ComputeInstance(0, 1, "MIG 3g.20gb", 2, 0, SliceSpan(0, 3))
    assert [
        (c.gpu_instance_id, c.short_name, c.profile_id, c.instance_id, str(c.placement))
        for c in parts
    ] == [
        (2, "1c.3g.20gb", 0, 0, "0:1"),
        (2, "1c.3g.20gb", 0, 1, "1:1"),
        (2, "1c.3g.20gb", 0, 2, "2:1"),
    ]
    assert nvidia_smi.parse_compute_instances("No compute instances found: Not Found\n") == []
    without_placement = """\
+-------------------------------------------------------+
| Compute instances:                                    |
| GPU     GPU       Name             Profile   Instance |
|       Instance                       ID        ID     |
|         ID                                            |
|=======================================================|
|   0      7       MIG 1g.5gb           0         0     |
+-------------------------------------------------------+
"""
    (ci,) = nvidia_smi.parse_compute_instances(without_placement)
    assert (ci.gpu_instance_id, ci.short_name, ci.placement) == (7, "1g.5gb", None)


def test_created_gpu_instances_from_cgi_output() -> None:
    assert nvidia_smi.parse_created_gpu_instances(output("cgi-mixed.txt")) == [
        (2, "3g.20gb"),
        (7, "1g.5gb"),
        (4, "2g.10gb"),
        (8, "1g.5gb"),
    ]
    assert nvidia_smi.parse_created_gpu_instances(output("cgi-error-insufficient.txt")) == [
        (13, "1g.5gb"),
        (11, "1g.5gb"),
        (3, "2g.10gb"),
    ]


def test_slots_pair_mig_devices_with_instances_in_instance_id_order() -> None:
    (gpu,) = nvidia_smi.parse_list_gpus(output("L-mig.txt"))
    gis = nvidia_smi.parse_gpu_instances(output("lgi.txt"))
    cis = [
        records.ComputeInstance(0, 2, "MIG 3g.20gb", 2, 0),
        records.ComputeInstance(0, 1, "MIG 3g.20gb", 2, 0),
    ]
    first, second = nvidia_smi.match_slots(gpu, gis, cis)
    assert (first.uuid, first.gpu_instance_id, str(first.placement)) == (
        "MIG-c7384736-a75d-5afc-978f-d2f1294409fd",
        1,
        "0:4",
    )
    assert (second.gpu_instance_id, second.compute_instance_id, str(second.placement)) == (
        2,
        0,
        "4:4",
    )
    # Names that disagree leave the instance unknown rather than guessed.
    odd = nvidia_smi.match_slots(gpu, gis, [records.ComputeInstance(0, 1, "MIG 1c.3g.20gb", 0, 0)])
    assert odd[0].gpu_instance_id is None and odd[0].placement is None


# ------------------------------------------------------------------------------- planning
def planned(requested: list[str], **kwargs: object) -> list[tuple[str, str]]:
    plan = layout.plan_layout(profiles(), requested, placements(), **kwargs)  # type: ignore[arg-type]
    return [(p.profile.short_name, str(p.placement)) for p in plan]


def test_plan_creates_larger_slices_first() -> None:
    # The order of cgi-error-insufficient.txt fails on the real GPU; the planned order is the one
    # cgi-mixed.txt shows succeeding.
    assert [name for name, _ in planned(["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"])] == [
        "3g.20gb",
        "2g.10gb",
        "1g.5gb",
        "1g.5gb",
    ]
    assert planned(["3g.20gb", "4g.20gb"]) == [("4g.20gb", "0:4"), ("3g.20gb", "4:4")]
    assert planned(["3g.20gb", "3g.20gb"]) == [("3g.20gb", "0:4"), ("3g.20gb", "4:4")]
    assert len(planned(["1g.5gb"] * 7)) == 7
    assert planned(["9", "MIG 2g.10gb"]) == [("3g.20gb", "0:4"), ("2g.10gb", "4:2")]


def test_plan_placements_never_overlap() -> None:
    for request in (
        ["2g.10gb"] * 3 + ["1g.5gb"],
        ["4g.20gb", "2g.10gb", "1g.5gb"],
        ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"],
        ["7g.40gb"],
    ):
        plan = layout.plan_layout(profiles(), request, placements())
        spots = [p.placement for p in plan]
        assert all(not a.overlaps(b) for i, a in enumerate(spots) for b in spots[i + 1 :])


@pytest.mark.parametrize(
    ("request_", "culprit"),
    [
        (["3g.20gb"] * 3, "3g.20gb"),
        (["1g.5gb"] * 8, "1g.5gb"),
        (["1g.5gb+me", "1g.5gb+me"], "1g.5gb+me"),
        (["4g.20gb", "3g.20gb", "1g.5gb"], "1g.5gb"),
        (["7g.40gb", "1g.5gb"], "1g.5gb"),
        (["2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb", "1g.5gb"], "1g.5gb"),
        (["4g.20gb", "4g.20gb"], "4g.20gb"),
    ],
)
def test_plan_rejects_a_set_that_does_not_fit_and_names_the_profile(
    request_: list[str], culprit: str
) -> None:
    with pytest.raises(LayoutError, match="does not fit") as caught:
        layout.plan_layout(profiles(), request_, placements())
    assert caught.value.profile == culprit
    assert culprit in str(caught.value)


def test_plan_around_instances_already_there() -> None:
    assert planned(["3g.20gb"], occupied=[SliceSpan(4, 4)]) == [("3g.20gb", "0:4")]
    with pytest.raises(LayoutError, match="left free by its current instances"):
        layout.plan_layout(profiles(), ["4g.20gb"], placements(), occupied=[SliceSpan(2, 2)])


def test_plan_counts_compute_slices_too() -> None:
    # Four 2g instances fit in 8 memory slices but need 8 of the 7 compute slices.
    table = [
        records.GiProfile(0, "MIG 2g.20gb", "2g.20gb", 14, 4, 4, 19.5),
        records.GiProfile(0, "MIG 7g.80gb", "7g.80gb", 0, 1, 1, 79.25),
    ]
    spots = {14: tuple(SliceSpan(s, 2) for s in (0, 2, 4, 6)), 0: (SliceSpan(0, 8),)}
    assert len(layout.plan_layout(table, ["2g.20gb"] * 3, spots)) == 3
    with pytest.raises(LayoutError, match=re.escape("no placement is left for 2g.20gb")):
        layout.plan_layout(table, ["2g.20gb"] * 4, spots)


def test_placements_derived_from_lgip_match_lgipp() -> None:
    assert layout.derive_placements(profiles()) == placements()
    assert planned(["1g.5gb", "3g.20gb"]) == [
        (p.profile.short_name, str(p.placement))
        for p in layout.plan_layout(profiles(), ["1g.5gb", "3g.20gb"], {})
    ]


def test_plan_rejects_unknown_profiles_with_a_suggestion() -> None:
    with pytest.raises(UnknownProfileError, match=re.escape("Did you mean 3g.20gb")) as caught:
        layout.plan_layout(profiles(), ["3g.20g"], placements())
    assert caught.value.name == "3g.20g"
    assert "1g.5gb (ID 19)" in str(caught.value)
    with pytest.raises(UnknownProfileError, match="no MIG profile given"):
        layout.plan_layout(profiles(), [], placements())
    assert layout.split_profiles(["3g.20gb,1g.5gb", " 1g.5gb ", ","]) == [
        "3g.20gb",
        "1g.5gb",
        "1g.5gb",
    ]


# ---------------------------------------------------------------------------- error mapping
def test_insufficient_resources_names_the_profile() -> None:
    error = nvidia_smi.map_nvidia_smi_error(
        ["nvidia-smi", "mig", "-cgi", "19,19,14,9"],
        23,
        output("cgi-error-insufficient.txt"),
        0,
        {"9": "3g.20gb"},
    )
    assert error.kind == "insufficient-resources"
    assert "GPU 0 has no room left for a 3g.20gb instance" in str(error)
    assert "gpudesk mig profiles --gpu 0" in str(error)
    unnamed = nvidia_smi.map_nvidia_smi_error(
        ["nvidia-smi"], 23, output("cgi-error-insufficient.txt")
    )
    assert "a 9 instance" in str(unnamed)


def test_in_use_says_to_stop_the_processes() -> None:
    error = nvidia_smi.map_nvidia_smi_error(["nvidia-smi"], 19, output("cgi-error-in-use.txt"), 0)
    assert error.kind == "in-use"
    assert "In use by another client" in str(error) and "Stop the processes" in str(error)


@pytest.mark.parametrize(
    "said",
    [
        "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Permissions\n"
        "Failed to create GPU instances: Insufficient Permissions\n",
        "Failed to display compute instances: Insufficient Permissions\n",
        "open /dev/nvidia-caps/nvidia-cap1: permission denied\n",
    ],
)
def test_permission_errors_suggest_sudo_or_a_sudoers_rule(said: str) -> None:
    error = nvidia_smi.map_nvidia_smi_error(["nvidia-smi"], 4, said, 0)
    assert error.kind == "permission"
    assert "needs root" in str(error) and "sudoers" in str(error)
    assert "GPUDESK_NVIDIA_SMI" in str(error)


def test_mig_mode_messages_give_the_commands_and_never_act() -> None:
    error = nvidia_smi.map_nvidia_smi_error(["nvidia-smi"], 6, "No MIG-enabled devices found.\n", 2)
    assert error.kind == "mig-disabled"
    assert "`sudo nvidia-smi -i 2 -mig 1`" in str(error) and "never" in str(error)
    assert "reset" in str(error)
    pending = nvidia_smi.mig_mode_message(1, records.MigMode("disabled", "enabled"))
    assert "pending a GPU reset" in pending and "`sudo nvidia-smi -i 1 -r`" in pending
    assert "never resets" in pending
    assert "does not support MIG" in nvidia_smi.mig_mode_message(
        0, records.MigMode("n/a", "n/a"), "T4"
    )


def test_other_failures_quote_the_command_and_output() -> None:
    error = nvidia_smi.map_nvidia_smi_error(
        ["nvidia-smi", "mig", "-lgi"], 255, "Unknown Error\n", 0
    )
    assert error.kind == "other"
    assert "`nvidia-smi mig -lgi` failed (exit 255): Unknown Error" in str(error)


def test_nvidia_smi_missing_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(nvidia_smi.ENV_NVIDIA_SMI, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MigError, match="GPUDESK_NVIDIA_SMI"):
        MigManager().gpus()
    monkeypatch.setenv(nvidia_smi.ENV_NVIDIA_SMI, str(tmp_path / "nvidia-smi"))
    with pytest.raises(MigError, match=r"cannot run nvidia-smi at .* \(from GPUDESK_NVIDIA_SMI\)"):
        MigManager().gpus()


def test_every_call_has_a_timeout(tmp_path: Path) -> None:
    hung = tmp_path / "nvidia-smi"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(hung.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(MigError, match=re.escape("did not finish within 0.2 s")):
        MigManager(str(hung), timeout=0.2).gpus()


# ------------------------------------------------------------- the fake against the fixtures
def _gpu(**fields: object) -> dict:
    gpu = {
        "name": "NVIDIA A100-PCIE-40GB",
        "uuid": "GPU-c7cc679c-da89-47e3-834b-24b894d632fd",
        "pci_bus_id": "00000000:41:00.0",
        "mig_mode": "enabled",
        "gpu_instances": [],
    }
    gpu.update(fields)
    return gpu


def _gi(gi_id: int, start: int, cis: list[dict] | None = None) -> dict:
    return {"id": gi_id, "profile_id": 9, "start": start, "size": 4, "compute_instances": cis or []}


def _ci(ci_id: int, size: int, uuid: str = "MIG-unused") -> dict:
    return {
        "id": ci_id,
        "profile_id": {1: 0, 3: 2}[size],
        "start": ci_id if size == 1 else 0,
        "size": size,
        "uuid": uuid,
    }


# The state each fixture was taken in.
FIXTURE_STATES: dict[str, dict] = {
    "L.txt": _gpu(mig_mode="disabled"),
    "L-mig.txt": _gpu(
        name="A100-SXM4-40GB",
        uuid="GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0",
        gpu_instances=[
            _gi(2, 4, [_ci(0, 3, "MIG-a28ad590-3fda-56dd-84fc-0a0b96edc58d")]),
            _gi(1, 0, [_ci(0, 3, "MIG-c7384736-a75d-5afc-978f-d2f1294409fd")]),
        ],
    ),
    "lgip.txt": _gpu(),
    "lgipp.txt": _gpu(),
    "lgi.txt": _gpu(gpu_instances=[_gi(2, 4), _gi(1, 0)]),
    "lgi-empty.txt": _gpu(),
    "lci.txt": _gpu(
        gpu_instances=[_gi(2, 4, [_ci(2, 1), _ci(0, 1), _ci(1, 1)]), _gi(1, 0, [_ci(0, 3)])]
    ),
    "cgi.txt": _gpu(),
    "cgi-C.txt": _gpu(),
    "cgi-mixed.txt": _gpu(),
    "cgi-error-insufficient.txt": _gpu(),
    "cgi-error-in-use.txt": _gpu(in_use=True),
    "cci.txt": _gpu(gpu_instances=[_gi(2, 4)]),
    "dci.txt": _gpu(gpu_instances=[_gi(2, 4, [_ci(0, 1), _ci(1, 1), _ci(2, 1)])]),
    "dgi.txt": _gpu(gpu_instances=[_gi(2, 4)]),
    "mig-enable.txt": _gpu(mig_mode="disabled"),
}
EXPECTED_EXIT = {"lgi-empty.txt": 6, "cgi-error-insufficient.txt": 23, "cgi-error-in-use.txt": 19}


def run_fake(state_file: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FAKE), *args],
        capture_output=True,
        text=True,
        timeout=10,
        env={**os.environ, "GPUDESK_FAKE_NVIDIA_SMI_STATE": str(state_file)},
    )


def test_every_command_fixture_has_a_state() -> None:
    commands = {p.name for p in FIXTURES.glob("*.txt")}
    assert commands - set(FIXTURE_STATES) == {"lcip.txt"}  # -lcip: not implemented by the fake
    assert (FIXTURES / "README.md").is_file()
    assert os.access(FAKE, os.X_OK)
    assert FAKE.read_text().startswith("#!/usr/bin/env python3\n")


@pytest.mark.parametrize("name", sorted(FIXTURE_STATES))
def test_fake_prints_each_fixture_byte_for_byte(name: str, tmp_path: Path) -> None:
    args, root, expected = fixture(name)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"root": root, "gpus": [FIXTURE_STATES[name]]}))
    result = run_fake(state, *args)
    assert result.stdout == expected
    assert result.returncode == EXPECTED_EXIT.get(name, 0)


def test_fake_keeps_its_state_between_calls(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"root": True, "gpus": [_gpu(name="A100-SXM4-40GB")]}))
    args, _, expected = fixture("cgi-C.txt")
    assert run_fake(state, *args).stdout == expected
    assert run_fake(state, "mig", "-i", "0", "-lgi").stdout == output("lgi.txt")
    devices = nvidia_smi.parse_list_gpus(run_fake(state, "-L").stdout)[0].mig_devices
    assert [d.name for d in devices] == ["3g.20gb", "3g.20gb"]
    lgip = nvidia_smi.parse_gi_profiles(run_fake(state, "mig", "-lgip").stdout)
    assert all(p.free == 0 for p in lgip)


def test_fake_keeps_what_a_failed_creation_made(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"root": True, "gpus": [_gpu()]}))
    run_fake(state, *fixture("cgi-error-insufficient.txt")[0])
    gis = nvidia_smi.parse_gpu_instances(run_fake(state, "mig", "-lgi").stdout)
    assert sorted(g.instance_id for g in gis) == [3, 11, 13]


def test_fake_leaves_mig_mode_pending(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"root": True, "gpus": [_gpu(mig_mode="disabled")]}))
    run_fake(state, "-i", "0", "-mig", "1")
    assert json.loads(state.read_text())["gpus"][0]["mig_mode"] == "pending"
    refused = run_fake(state, "mig", "-lgi")
    # exit 0, as an H200 with MIG disabled answers -lgi (driver 580.159.04, raw_probe.json)
    assert (refused.stdout, refused.returncode) == ("No MIG-enabled devices found.\n", 0)
    query = run_fake(
        state, "--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader"
    )
    assert query.stdout == "0, Disabled, Enabled\n"


def test_fake_refuses_changes_without_root(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"root": False, "gpus": [_gpu(gpu_instances=[_gi(2, 4)])]}))
    before = state.read_text()
    result = run_fake(state, "mig", "-i", "0", "-dgi")
    assert result.returncode == 4
    assert result.stdout == (
        "Unable to destroy GPU instance ID  2 from GPU  0: Insufficient "
        "Permissions\nFailed to destroy GPU instances: Insufficient "
        "Permissions\n"
    )
    assert state.read_text() == before
    assert run_fake(state, "mig", "-i", "0", "-lgi").returncode == 0  # listing needs no root
