"""The tail rule (gpudesk/policy/tail_join.py): at the queue's tail a job the robust rule leaves
waiting joins tenants where, with sharing's costs at the top of their range, it and they finish
before it would by waiting for a GPU to drain; elsewhere it waits as before."""

from __future__ import annotations

from dataclasses import replace

import msgspec
from test_collocation import GIB, gpu, job, station  # same folder: on sys.path under pytest

from gpudesk.core.records import JobRecord
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.policy import GpuState, StationView, Tenant
from gpudesk.policy.tail_join import at_tail, first_drain

RUN_S = 2100.0  # the family's measured run time (the sweep day's ResNet-50 members: ~35 min)


def busy(index: int, first_id: int, remaining_s: float | None) -> GpuState:
    """A whole GPU with three 30 % SM MPS tenants, each 8 GB, each ending in `remaining_s`:
    room for a fourth, which the model at its values says gains a little (+0.04 GPU) and with
    the costs at the top of their range loses (-0.03): the robust rule leaves it waiting."""
    return gpu(
        index,
        *(
            Tenant(
                first_id + k,
                "mps",
                8 * GIB,
                30.0,
                remaining_s=remaining_s,
                measured_remaining_s=remaining_s,
            )
            for k in range(3)
        ),
        used=24 * GIB,
    )


def view(remaining_s: float | None = 1900.0, run_s: float | None = RUN_S) -> StationView:
    return station(
        busy(0, 10, remaining_s),
        busy(1, 20, remaining_s),
        run_time_of=lambda record: run_s,
    )


def sweep_member(job_id: int) -> JobRecord:
    return job(job_id, 12, 30)


def test_the_last_job_joins_where_it_finishes_before_waiting_would() -> None:
    decision = SharingPolicy("auto").place([sweep_member(1)], view())
    (placement,) = decision.placements
    assert placement.mode == "mps"
    assert "at the queue's tail" in placement.reason
    assert "before waiting for GPU" in placement.reason


def test_the_robust_rule_still_holds_it_where_jobs_queue_behind() -> None:
    queue = [sweep_member(1), sweep_member(2), sweep_member(3)]  # three jobs, two GPUs
    assert SharingPolicy("auto").place(queue, view()).placements == []


def test_it_waits_where_its_run_time_or_the_drains_are_unknown() -> None:
    assert SharingPolicy("auto").place([sweep_member(1)], view(run_s=None)).placements == []
    assert SharingPolicy("auto").place([sweep_member(1)], view(remaining_s=None)).placements == []


def test_it_waits_where_a_gpu_drains_soon() -> None:
    # the GPUs drain in five minutes: waiting and running alone ends at 40 min; joining, at the
    # pessimistic end, at 51
    assert SharingPolicy("auto").place([sweep_member(1)], view(remaining_s=300.0)).placements == []


def test_it_waits_where_the_tenants_it_slows_would_end_after_waiting_would() -> None:
    # one GPU's tenants end in 30 min, the other's in 60: it would wait for the first (30 +
    # 35 = 65 min) and joining the second pushes those tenants to ~80 min; joining the first
    # is the choice
    station_view = station(
        busy(0, 10, 1800.0), busy(1, 20, 3600.0), run_time_of=lambda record: RUN_S
    )
    (placement,) = SharingPolicy("auto").place([sweep_member(1)], station_view).placements
    assert tuple(placement.gpus) == (0,)


def test_forced_modes_and_carma_are_unchanged() -> None:
    # forced MPS shares wherever the model at its values gains (no robust rule, no tail rule)
    (placement,) = SharingPolicy("mps").place([sweep_member(1)], view(run_s=None)).placements
    assert "tail" not in placement.reason


def test_a_gpu_closed_to_sharing_is_not_joined() -> None:
    # an exclusive tenant closes its GPU: the job joins the other, whose tenants share
    closed = gpu(0, replace(Tenant(5, "exclusive", 8 * GIB, 30.0), remaining_s=1900.0))
    station_view = station(closed, busy(1, 20, 1900.0), run_time_of=lambda record: RUN_S)
    (placement,) = SharingPolicy("auto").place([sweep_member(1)], station_view).placements
    assert tuple(placement.gpus) == (1,)


def test_only_whole_gpus_that_work_count_for_the_tail() -> None:
    # two jobs waiting on a station of one whole GPU, one in MIG mode and one lost: not the tail
    whole = busy(0, 10, 1900.0)
    in_mig = replace(gpu(1), mig_enabled=True)
    lost = replace(gpu(2), lost=True)
    station_view = station(whole, in_mig, lost, run_time_of=lambda record: RUN_S)
    assert not at_tail(1, station_view)
    assert at_tail(0, station_view)
    assert first_drain(station_view) == (1900.0, 0)  # the MIG and the lost GPU never drain
    queue = [sweep_member(1), sweep_member(2)]
    assert SharingPolicy("auto").place(queue, station_view).placements == []


def test_beside_another_users_mps_server_it_time_slices_and_says_so() -> None:
    # GPU 0's MPS server serves another member's two 30 % jobs: a third member's job may only
    # time-slice beside them; at the tail it does where that finishes it sooner
    theirs = gpu(
        0,
        *(
            Tenant(
                10 + k,
                "mps",
                4 * GIB,
                30.0,
                uid=1001,
                remaining_s=3000.0,
                measured_remaining_s=3000.0,
            )
            for k in range(2)
        ),
        used=8 * GIB,
    )
    mine = job(1, 4, 10)
    mine = msgspec.structs.replace(mine, owner=replace(mine.owner, uid=1002))
    station_view = station(theirs, run_time_of=lambda record: RUN_S)
    (placement,) = SharingPolicy("auto").place([mine], station_view).placements
    assert placement.mode == "naive"
    assert placement.reason.startswith("time-sliced: GPU 0's MPS server serves")
    assert "at the queue's tail" in placement.reason


def test_a_tenants_own_progress_lines_are_not_believed() -> None:
    # the same ends as the first test, but said by the tenants' own progress lines alone (which
    # their owner writes; no family history): on a system engine root decides for another
    # member, so it waits
    def said(index: int, first_id: int) -> GpuState:
        gpu_state = busy(index, first_id, 1900.0)
        claimed = tuple(replace(t, measured_remaining_s=None) for t in gpu_state.tenants)
        return replace(gpu_state, tenants=claimed)

    station_view = station(said(0, 10), said(1, 20), run_time_of=lambda record: RUN_S)
    assert SharingPolicy("auto").place([sweep_member(1)], station_view).placements == []
    assert first_drain(station_view) is None


def test_tenants_printing_progress_keep_their_familys_measured_figure() -> None:
    # tenants that print progress lines (which say they end in 5 s) and whose families' runs
    # the engine measured (1900 s left): the rule goes by the measured figure, as for tenants
    # that print nothing; printing progress never makes it stop working
    def printing(index: int, first_id: int) -> GpuState:
        gpu_state = busy(index, first_id, 1900.0)
        claimed = tuple(replace(t, remaining_s=5.0) for t in gpu_state.tenants)
        return replace(gpu_state, tenants=claimed)

    station_view = station(printing(0, 10), printing(1, 20), run_time_of=lambda record: RUN_S)
    (placement,) = SharingPolicy("auto").place([sweep_member(1)], station_view).placements
    assert "at the queue's tail" in placement.reason
    assert first_drain(station_view) == (1900.0, 0)
