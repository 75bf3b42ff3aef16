"""gpudesk.core.mig_profiles, the one home of MIG profile facts: the tables against the real
nvidia-smi output in the fixtures, the hardware's placement rules, and reading profile names."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk.core import mig_layout as layout
from gpudesk.core.mig_profiles import (
    A100_40GB,
    A100_80GB,
    CARVED_PROFILES,
    H100_80GB,
    H200_141GB,
    PROFILE_TABLES,
    SliceSpan,
    compute_slices,
    is_plain_profile_name,
    memory_slices,
    short_name,
    table_for_gpu,
)
from gpudesk.core.mig_records import GiProfile
from gpudesk.hw.mig import nvidia_smi
from gpudesk.units import MIB_PER_GIB

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi" / "a100-40gb"


def fixture_output(name: str) -> str:
    return (FIXTURES / name).read_text().split("\n", 1)[1]


def test_the_a100_40gb_table_matches_real_nvidia_smi_output() -> None:
    real = {p.short_name: p for p in nvidia_smi.parse_gi_profiles(fixture_output("lgip.txt"))}
    spans = {
        p.profile_id: p.placements
        for p in nvidia_smi.parse_gi_placements(fixture_output("lgipp.txt"))
    }
    table = {p.name: p for p in PROFILE_TABLES[A100_40GB]}
    assert set(real) <= set(table)  # the fixture's driver predates 1g.10gb
    for name, twin in real.items():
        profile = table[name]
        assert (profile.id, profile.instances) == (twin.id, twin.total), name
        assert profile.compute_slices == twin.compute_slices, name
        assert profile.memory_mib / MIB_PER_GIB == pytest.approx(twin.memory_gib, abs=0.01)
        assert profile.placements == spans[twin.id], name


@pytest.mark.parametrize("model", [A100_40GB, A100_80GB, H100_80GB, H200_141GB])
def test_every_table_follows_the_placement_rules(model: str) -> None:
    table = PROFILE_TABLES[model]
    assert [p.id for p in table] == [19, 20, 15, 14, 9, 5, 0]
    plain = [p for p in table if not p.name.endswith("+me")]
    assert [(p.compute_slices, p.memory_slices) for p in plain] == [
        (1, 1),
        (1, 2),
        (2, 2),
        (3, 4),
        (4, 4),
        (7, 8),
    ]
    assert [len(p.starts) for p in plain] == [7, 4, 3, 2, 1, 1]
    # what a driver without -lgipp would derive from the profiles alone agrees
    profiles = [
        GiProfile(0, f"MIG {p.name}", p.name, p.id, 0, p.instances, p.memory_mib / MIB_PER_GIB)
        for p in plain
    ]
    assert layout.derive_placements(profiles) == {p.id: p.placements for p in plain}
    media = next(p for p in table if p.name.endswith("+me"))
    assert (media.instances, media.starts) == (1, tuple(range(7)))


def test_the_published_profile_names() -> None:
    names = {model: [p.name for p in table] for model, table in PROFILE_TABLES.items()}
    assert names[A100_40GB] == [
        "1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"
    ]  # fmt: skip
    assert names[A100_80GB] == names[H100_80GB] == [
        "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"
    ]  # fmt: skip
    assert names[H200_141GB] == [
        "1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"
    ]  # fmt: skip
    assert [p.name for p in CARVED_PROFILES] == [
        "1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"
    ]  # fmt: skip


def test_profile_names_are_read_one_way() -> None:
    assert (compute_slices("3g.20gb"), memory_slices("3g.20gb")) == (3, 4)
    assert compute_slices("1g.10gb+me") == 1 and compute_slices("1g.5gb") == 1
    assert short_name("MIG 3g.20gb") == "3g.20gb"
    assert short_name("NVIDIA A100-SXM4-40GB MIG 2g.10gb") == "2g.10gb"
    assert compute_slices("MIG 7g.40gb") == 7
    assert compute_slices("1c.3g.20gb") == 0 and compute_slices("NVIDIA A100") == 0
    assert memory_slices("7g.80gb", PROFILE_TABLES[H100_80GB]) == 8
    assert is_plain_profile_name("3g.20gb") and not is_plain_profile_name("1g.5gb+me")


def test_a_gpu_name_finds_its_table() -> None:
    assert table_for_gpu("NVIDIA A100-SXM4-40GB") is PROFILE_TABLES[A100_40GB]
    assert table_for_gpu("NVIDIA A100-SXM4-80GB") is PROFILE_TABLES[A100_80GB]
    assert table_for_gpu("NVIDIA H100 80GB HBM3") is PROFILE_TABLES[H100_80GB]
    assert table_for_gpu("NVIDIA H200") is PROFILE_TABLES[H200_141GB]
    assert table_for_gpu("NVIDIA GeForce RTX 4090") == ()


def test_a_span_reads_and_prints_as_nvidia_smi_does() -> None:
    span = SliceSpan.parse("4:4")
    assert (span.start, span.end, str(span)) == (4, 8, "4:4")
    assert span.overlaps(SliceSpan(6, 2)) and not span.overlaps(SliceSpan(0, 4))


@pytest.mark.parametrize(
    ("backend", "layout", "said"),
    [
        (
            "sim:dgx-station-a100",
            {"7": "3g.20gb"},
            "GPU 7: the station sim:dgx-station-a100 has GPUs 0..3",
        ),
        ("sim:h100", {"1": "3g.40gb"}, "GPU 1: the station sim:h100 has GPU 0"),
        (
            "sim:dgx-station-a100",
            {"0": "3g.40gb"},
            "GPU 0: a NVIDIA A100-SXM4-40GB has no MIG profile 3g.40gb; it offers 1g.5gb, "
            "2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb",
        ),
        (
            "sim:a100-40gbx2",
            {"1": "3g.20gb,3g.20gb,1g.5gb"},
            "GPU 1: 3g.20gb,3g.20gb,1g.5gb does not fit a NVIDIA A100-SXM4-40GB",
        ),
    ],
)
def test_a_simulated_stations_layout_is_checked_against_its_gpus(
    backend: str, layout: dict[str, str], said: str
) -> None:
    from gpudesk.core.station import mig_layout_problem

    problem = mig_layout_problem(backend, layout)
    assert problem is not None and problem.startswith(said), problem


def test_a_layout_the_station_can_take_or_a_real_backends_is_no_problem() -> None:
    from gpudesk.core.station import mig_layout_problem

    assert (
        mig_layout_problem("sim:dgx-station-a100", {"3": "3g.20gb,2g.10gb,1g.5gb,1g.5gb"}) is None
    )
    assert mig_layout_problem("sim:h100x8", {"7": "4g.40gb,3g.40gb"}) is None
    # real GPUs: `gpudesk mig apply` checks against what the driver offers
    assert mig_layout_problem("nvml", {"7": "3g.40gb"}) is None
    assert mig_layout_problem("auto", {"0": "3g.40gb"}) is None


def test_a_mig_change_waits_for_its_gpu_to_be_idle_and_a_bad_one_is_not_applied() -> None:
    from gpudesk.core.reconfigure import weigh
    from gpudesk.core.station import StationConfig

    station = StationConfig(backend="sim:dgx-station-a100", policy="auto")
    table = {"mig": {"0": "3g.20gb,3g.20gb"}, "policy": "mig"}
    busy = weigh(station, table, refusal=None, running_by_gpu={0: (4, 9)}, env={})
    assert busy.config.mig is None and busy.config.policy == "mig"
    (kept,) = busy.not_applied
    assert kept.key == "mig" and kept.reason.startswith("GPU 0 runs job(s) 4, 9: its MIG layout")
    # a job on another GPU is no reason; GPU 0 idle takes the layout
    idle = weigh(station, table, refusal=None, running_by_gpu={1: (4,)}, env={})
    assert idle.config.mig == {"0": "3g.20gb,3g.20gb"} and not idle.not_applied
    # going back out of MIG mode on a busy GPU is a change of its layout too
    back = weigh(idle.config, {"mig": None}, refusal=None, running_by_gpu={0: (5,)}, env={})
    assert back.config.mig == {"0": "3g.20gb,3g.20gb"} and back.not_applied
    # a layout the station's GPUs cannot take (from a client that skipped the profile's check)
    wrong = weigh(station, {"mig": {"5": "1g.5gb"}}, refusal=None, env={})
    assert wrong.config.mig is None
    assert [n.reason for n in wrong.not_applied] == [
        "GPU 5: the station sim:dgx-station-a100 has GPUs 0..3"
    ]
