"""gpudesk.policy.mig_planner: which profile each queued job gets, how the queue is
packed under the A100's placement rules, the commands a plan would run, and every reason it may
not be applied. Real GPUs are described by the real nvidia-smi output in tests/fixtures
(A100 40GB)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudesk.core import mig_layout as layout
from gpudesk.core.gpu_models import A100_SXM4_40GB, H100_SXM5_80GB
from gpudesk.core.mig_profiles import SliceSpan
from gpudesk.core.mig_records import GiProfile
from gpudesk.core.station import StationConfig
from gpudesk.core.wire.base import to_builtins
from gpudesk.hw.mig import nvidia_smi
from gpudesk.hw.mig.manager import MigManager
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.mig_payoff import choose_layouts
from gpudesk.policy.mig_planner import (
    BLOCKED_BUSY,
    BLOCKED_BY_CONFIG,
    BLOCKED_MIG_MODE,
    BLOCKED_NOTHING_TO_CHANGE,
    HELD_REASON,
    SLICE_HEADROOM_MIB,
    GpuMigState,
    MigPlan,
    QueuedDemand,
    pack_queue,
    plan_gpu,
    plan_station,
    simulated_profiles,
    smallest_fitting_profile,
)
from gpudesk.policy.policy import RESERVE_MIB

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi" / "a100-40gb"
GIB = 1024.0


def fixture_output(name: str) -> str:
    return (FIXTURES / name).read_text().split("\n", 1)[1]


def a100_profiles() -> tuple[GiProfile, ...]:
    return tuple(nvidia_smi.parse_gi_profiles(fixture_output("lgip.txt")))


def a100_placements() -> dict[int, tuple[SliceSpan, ...]]:
    return {
        p.profile_id: p.placements
        for p in nvidia_smi.parse_gi_placements(fixture_output("lgipp.txt"))
    }


def a100(
    index: int = 0,
    *,
    mode: str = "enabled",
    current: tuple[str, ...] = (),
    running: tuple[int, ...] = (),
) -> GpuMigState:
    """A real A100 40GB as nvidia-smi describes it (profiles only in MIG mode)."""
    enabled = mode == "enabled"
    return GpuMigState(
        index,
        "NVIDIA A100-SXM4-40GB",
        mode,
        profiles=a100_profiles() if enabled else (),
        placements=a100_placements() if enabled else {},
        current=current,
        has_gpu_instances=bool(current),
        has_compute_instances=bool(current),
        running_job_ids=running,
    )


def job(job_id: int, memory_gib: float, sm_pct: float, *, held: bool = False) -> QueuedDemand:
    return QueuedDemand(job_id, f"job{job_id}", memory_gib * GIB, sm_pct, held)


def plan(
    gpu: GpuMigState, queue: list[QueuedDemand], *, allowed: bool = True, simulated: bool = False
) -> MigPlan:
    return plan_gpu(
        gpu,
        queue,
        repartition_allowed=allowed,
        simulated=simulated,
        commands_from=MigManager("nvidia-smi"),
    )


def chosen(memory_gib: float, sm_pct: float) -> str | None:
    profile = smallest_fitting_profile(a100_profiles(), memory_gib * GIB, sm_pct)
    return profile.short_name if profile else None


def codes(result: MigPlan) -> list[str]:
    return [b.code for b in result.blockers]


# ---------------------------------------------------------------------------- profile choice
def test_the_headroom_is_the_one_placement_keeps_free() -> None:
    assert SLICE_HEADROOM_MIB == RESERVE_MIB


@pytest.mark.parametrize(
    ("memory_gib", "sm_pct", "profile"),
    [
        (2, 10, "1g.5gb"),  # the plain profile, not the scarcer 1g.5gb+me
        (4.75 - 0.5, 10, "1g.5gb"),  # exactly the slice's memory less the headroom
        (4.5, 10, "2g.10gb"),  # 4.5 GiB + 0.5 GiB no longer fits 4.75 GiB
        (3, 20, "2g.10gb"),  # 1 of 7 compute slices is 14 % of the GPU: too little
        (3, 30, "3g.20gb"),  # 2 of 7 is 29 %
        (12, 40, "3g.20gb"),
        (12, 50, "4g.20gb"),  # same memory as 3g.20gb, more compute
        (20, 10, "7g.40gb"),  # 20 GiB + headroom does not fit 19.62 GiB
        (39, 100, "7g.40gb"),
        (39.5, 10, None),  # needs a whole GPU
    ],
)
def test_the_smallest_profile_that_holds_memory_and_sm(
    memory_gib: float, sm_pct: float, profile: str | None
) -> None:
    assert chosen(memory_gib, sm_pct) == profile


# ----------------------------------------------------------------------------------- packing
def test_slices_are_packed_in_queue_order_until_one_no_longer_fits() -> None:
    queue = [job(1, 8, 20), job(2, 16, 40), job(3, 6, 10), job(4, 3, 10), job(5, 1, 5)]
    pairs, left_out, total = pack_queue(a100_profiles(), a100_placements(), queue)
    assert [(j.job_id, p.short_name) for j, p in pairs] == [
        (1, "2g.10gb"),
        (2, "3g.20gb"),
        (3, "2g.10gb"),
    ]
    # job 4's 1g.5gb would be an 8th compute slice; job 5 fits no better and is not let past it
    assert [(j.job_id, j.reason.split(":")[0]) for j in left_out] == [
        (4, "no room left for a 1g.5gb next to the slices before it"),
        (5, "queued behind a job that no longer fits on this GPU"),
    ]
    assert total == 2


def test_a_job_no_profile_fits_is_skipped_not_blocking() -> None:
    queue = [job(1, 39.5, 100), job(2, 4, 10), job(3, 4, 10)]
    pairs, left_out, _ = pack_queue(a100_profiles(), a100_placements(), queue)
    assert [(j.job_id, p.short_name) for j, p in pairs] == [(2, "1g.5gb"), (3, "1g.5gb")]
    assert left_out[0].job_id == 1 and "needs a whole GPU" in left_out[0].reason


@pytest.mark.parametrize(
    ("demands", "packed"),
    [
        # two 3g.20gb take all 8 memory slices: no 1g.5gb fits although only 6 of 7 compute are used
        ([(12, 40), (12, 40), (2, 10)], ["3g.20gb", "3g.20gb"]),
        # 4g.20gb sits at 0:4 only, 3g.20gb then at 4:4: 7 compute slices, nothing after
        ([(12, 50), (12, 40), (2, 10)], ["4g.20gb", "3g.20gb"]),
        # three 2g.10gb and a 1g.5gb: 7 compute slices in 7 of the 8 memory slices
        ([(8, 20)] * 3 + [(2, 10), (2, 10)], ["2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"]),
        ([(2, 10)] * 8, ["1g.5gb"] * 7),
        ([(30, 60), (2, 10)], ["7g.40gb"]),
    ],
)
def test_packing_follows_the_a100_placement_rules(
    demands: list[tuple[float, float]], packed: list[str]
) -> None:
    queue = [job(i + 1, memory, sm) for i, (memory, sm) in enumerate(demands)]
    pairs, _, _ = pack_queue(a100_profiles(), a100_placements(), queue)
    assert [p.short_name for _, p in pairs] == packed
    layout.plan_layout(a100_profiles(), packed, a100_placements())  # what plan_layout accepts


# -------------------------------------------------------------------------------- the plan
def test_a_plan_the_engine_may_apply() -> None:
    result = plan(
        a100(3, current=("3g.20gb", "3g.20gb")),
        [job(7, 8, 20), job(8, 16, 40, held=True), job(9, 2, 5)],
    )
    assert result.allowed and result.blockers == () and result.reason is None
    # the held job 8 is given no slice; the room the others leave is carved into spare ones
    assert result.wanted_profiles == ["2g.10gb", "1g.5gb", "2g.10gb", "1g.5gb", "1g.5gb"]
    assert [s.job_id for s in result.wanted] == [7, 9]
    assert result.spare == ("2g.10gb", "1g.5gb", "1g.5gb")
    # MigManager's own dry-run path: destroy what is there, largest first, then read back
    assert result.commands == (
        "nvidia-smi mig -i 3 -dci",
        "nvidia-smi mig -i 3 -dgi",
        "nvidia-smi mig -i 3 -cgi 14,14,19,19,19 -C",
        "nvidia-smi -L",
    )
    data = to_builtins(result.view())
    assert data["wanted"] == ["2g.10gb", "1g.5gb", "2g.10gb", "1g.5gb", "1g.5gb"]
    assert data["spare"] == ["2g.10gb", "1g.5gb", "1g.5gb"]
    assert data["slices"][0] == {
        "profile": "2g.10gb",
        "profile_id": 14,
        "memory_mib": pytest.approx(9.75 * GIB, abs=0.01 * GIB),
        "compute_slices": 2,
        "job_id": 7,
        "job_name": "job7",
        "job_memory_mib": 8 * GIB,
        "job_sm_pct": 20,
        "job_held": False,
        "jobs": [7],
    }
    assert data["left_out"] == [{"job_id": 8, "job_name": "job8", "reason": HELD_REASON}]
    assert (data["allowed"], data["mig_enabled"], data["current"]) == (
        True,
        True,
        ["3g.20gb", "3g.20gb"],
    )


def test_a_gpu_without_instances_is_not_cleared_first() -> None:
    result = plan(a100(0), [job(1, 12, 40)])  # its 3g.20gb, and a spare one beside it
    assert result.commands == ("nvidia-smi mig -i 0 -cgi 9,9 -C", "nvidia-smi -L")


def test_the_station_config_must_allow_it() -> None:
    result = plan(a100(0), [job(1, 12, 40)], allowed=False)
    assert codes(result) == [BLOCKED_BY_CONFIG] and not result.allowed
    assert "mig_repartition = true" in (result.reason or "")
    assert result.wanted_profiles == ["3g.20gb", "3g.20gb"] and result.commands  # still shown


def test_nothing_to_change_when_the_gpu_has_the_layout_already() -> None:
    current = ("1g.5gb", "3g.20gb", "1g.5gb", "1g.5gb", "1g.5gb")  # with its spare slices
    result = plan(a100(0, current=current), [job(1, 2, 10), job(2, 12, 40)])
    assert codes(result) == [BLOCKED_NOTHING_TO_CHANGE] and result.commands == ()
    assert "already has this layout" in (result.reason or "")


def test_nothing_to_change_when_no_queued_job_wants_a_slice() -> None:
    result = plan(a100(0, current=("7g.40gb",)), [job(1, 39.5, 100)])
    assert codes(result) == [BLOCKED_NOTHING_TO_CHANGE] and result.wanted == ()
    assert "its layout (7g.40gb) stays" in (result.reason or "")
    assert plan(a100(0), []).reason == "No queued job needs a MIG slice on GPU 0."


def test_a_gpu_not_in_mig_mode_gets_the_command_the_user_must_run() -> None:
    result = plan(a100(2, mode="disabled"), [job(1, 8, 20)])
    assert codes(result)[0] == BLOCKED_MIG_MODE and not result.allowed
    assert "sudo nvidia-smi -i 2 -mig 1" in (result.enable_hint or "")
    assert "sudo nvidia-smi -i 2 -mig 1" in (result.reason or "")
    assert "never changes MIG mode" in (result.reason or "")
    assert result.wanted == () and result.commands == ()  # nvidia-smi lists no profiles yet
    pending = plan(a100(2, mode="pending"), [job(1, 8, 20)])
    assert "sudo nvidia-smi -i 2 -r" in (pending.reason or "")


def test_a_simulated_gpu_not_in_mig_mode_still_shows_what_it_would_want() -> None:
    profiles, placements = simulated_profiles(A100_SXM4_40GB, 1)
    gpu = GpuMigState(1, A100_SXM4_40GB.name, "disabled", profiles, placements)
    result = plan(gpu, [job(1, 8, 20)], simulated=True)
    assert [s.profile for s in result.wanted] == ["2g.10gb"] and result.simulated
    assert codes(result) == [BLOCKED_MIG_MODE]
    assert "[station] mig" in (result.reason or "") and result.enable_hint


def test_a_busy_gpu_keeps_its_layout() -> None:
    result = plan(a100(1, current=("3g.20gb",), running=(11, 12)), [job(1, 8, 20)])
    assert codes(result) == [BLOCKED_BUSY]
    assert "Job(s) 11, 12 run on GPU 1" in (result.reason or "")
    assert result.view().running_jobs == [11, 12]


def test_every_reason_is_given_most_fundamental_first() -> None:
    result = plan(a100(0, mode="disabled", running=(5,)), [], allowed=False)
    assert codes(result) == [BLOCKED_MIG_MODE, BLOCKED_BUSY, BLOCKED_BY_CONFIG]
    result = plan(a100(0, running=(5,)), [], allowed=False)
    assert codes(result) == [BLOCKED_NOTHING_TO_CHANGE, BLOCKED_BUSY, BLOCKED_BY_CONFIG]


def test_gpus_that_can_take_a_layout_now_claim_their_jobs_first() -> None:
    queue = [job(i, 12, 40) for i in range(1, 6)]
    busy, first, second = plan_station(
        [a100(2), a100(0, running=(9,)), a100(1)],
        queue,
        repartition_allowed=True,
        simulated=False,
        commands_from=MigManager("nvidia-smi"),
    )
    assert [p.gpu for p in (busy, first, second)] == [0, 1, 2]
    assert [s.job_id for s in first.wanted] == [1, 2]
    assert [s.job_id for s in second.wanted] == [3, 4]
    assert [s.job_id for s in busy.wanted] == [5]  # a busy GPU plans for what is left


def test_the_plan_is_the_layout_auto_would_make_spare_slices_included() -> None:
    """GPU 3 of the walk-through: 3g.20gb,2g.10gb,2g.10gb, with 4, 4, 8 and 15 GiB jobs queued.
    Three 2g.10gb slices leave a compute slice, which auto carves into a spare 1g.5gb: the
    plan's wanted layout, its -cgi line and auto's layout are that one layout."""
    gpu = a100(3, current=("3g.20gb", "2g.10gb", "2g.10gb"))
    queue = [job(1, 4, 20), job(2, 4, 20), job(3, 8, 20), job(4, 15, 30)]
    result = plan(gpu, queue)
    layout = ["2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"]
    assert result.wanted_profiles == layout and result.spare == ("1g.5gb",)
    assert [s.job_id for s in result.wanted] == [1, 2, 3]
    assert "nvidia-smi mig -i 3 -cgi 14,14,14,19 -C" in result.commands
    (choice,) = choose_layouts(
        [gpu],
        queue,
        lambda _name: DEFAULT_PARAMS,
        simulated=False,
        commands_from=MigManager("nvidia-smi"),
    )
    assert list(choice.payoff.planned) == layout == result.view().wanted
    assert f"-> {', '.join(layout)}:" in choice.payoff.summary()


def test_a_held_job_is_said_held_not_queued_behind() -> None:
    """A held job waits for its release, not for room: it is given no slice, and said so,
    wherever it stands in the queue (here behind a job that no longer fits)."""
    queue = [job(1, 30, 90), job(2, 30, 90), job(3, 4, 10, held=True), job(4, 2, 5)]
    result = plan(a100(0), queue)
    assert [s.job_id for s in result.wanted] == [1]
    reasons = {j.job_id: j.reason for j in result.left_out}
    assert reasons[3] == HELD_REASON and "held" not in reasons[4]
    assert reasons[4] == "queued behind a job that no longer fits on this GPU"
    early = plan(a100(0), [job(5, 4, 10, held=True), job(6, 4, 10)])
    assert [s.job_id for s in early.wanted] == [6]
    assert [(j.job_id, j.reason) for j in early.left_out] == [(5, HELD_REASON)]


def test_no_job_is_given_a_slice_on_two_gpus() -> None:
    """A station with no GPU in MIG mode (simulated: each still plans on its model's table):
    each queued job is planned on one GPU at most, GPUs in index order."""
    profiles, placements = simulated_profiles(A100_SXM4_40GB, 0)
    gpus = [GpuMigState(i, A100_SXM4_40GB.name, "disabled", profiles, placements) for i in range(4)]
    queue = [job(i, 16, 50) for i in range(10, 16)]  # each takes a GPU's whole 7g.40gb
    plans = plan_station(
        gpus,
        queue,
        repartition_allowed=False,
        simulated=True,
        commands_from=MigManager("nvidia-smi"),
    )
    given = [[s.job_id for s in p.wanted] for p in plans]
    assert given == [[10], [11], [12], [13]]
    assert [j.job_id for j in plans[3].left_out] == [14, 15]


# ------------------------------------------------------------------------- simulated models
def test_the_simulated_a100_matches_the_real_tables() -> None:
    profiles, placements = simulated_profiles(A100_SXM4_40GB, 3)
    real = {p.id: p for p in a100_profiles()}
    real_placements = a100_placements()
    for profile in profiles:
        twin = real[profile.id]
        assert (profile.short_name, profile.total, profile.gpu) == (twin.short_name, twin.total, 3)
        assert profile.memory_gib == pytest.approx(twin.memory_gib, abs=0.01)
        assert placements[profile.id] == real_placements[profile.id]


def test_the_simulated_h100_follows_its_placement_rules() -> None:
    profiles, placements = simulated_profiles(H100_SXM5_80GB, 0)
    assert [(p.short_name, p.id, p.total) for p in profiles] == [
        ("1g.10gb", 19, 7),
        ("1g.20gb", 15, 4),
        ("2g.20gb", 14, 3),
        ("3g.40gb", 9, 2),
        ("4g.40gb", 5, 1),
        ("7g.80gb", 0, 1),
    ]
    assert placements[15] == tuple(SliceSpan(s, 2) for s in (0, 2, 4, 6))
    assert placements == layout.derive_placements(profiles)


# ------------------------------------------------------------------------------- the config
def test_mig_repartition_is_off_unless_the_station_says_so() -> None:
    assert StationConfig().mig_repartition is False
    assert StationConfig.from_dict({"mig_repartition": True}).mig_repartition is True
    with pytest.raises(ValueError, match=r"station\.mig_repartition: expected true or false"):
        StationConfig.from_dict({"mig_repartition": "yes"})
