"""A one-GPU job that must run alone (after an out-of-memory death) on a station whose GPUs are
all in MIG mode: it takes a free slice holding all of a GPU's compute (policy/full_slice.py),
the MIG planner asks for one for it where no GPU runs whole (`QueuedDemand.alone`), and the
simulator, replaying such a station with `--mig-repartition`, no longer loses it."""

from __future__ import annotations

from dataclasses import replace

import msgspec
from test_collocation import GIB, gpu, job, station  # same folder: on sys.path under pytest
from test_mig_planner import a100, plan  # same folder

from gpudesk.core.station import StationConfig
from gpudesk.examples import folder
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.demand import Demand
from gpudesk.policy.mig_planner import QueuedDemand, any_whole_gpu
from gpudesk.policy.policy import MigSlice, StationView
from gpudesk.policy.sim_repartition import mig_queue
from gpudesk.policy.simulator import Simulation, load_trace

FULL = MigSlice("MIG-7g", "7g.40gb", 40 * GIB - 512, 7)
HALF = (
    MigSlice("MIG-4g", "4g.20gb", 20 * GIB - 256, 4),
    MigSlice("MIG-3g", "3g.20gb", 20 * GIB - 256, 3),
)


def after_oom(view: StationView, job_id: int, memory_gib: float) -> StationView:
    """The job's demand as the engine gives it after an out-of-memory death: alone."""
    demand = Demand(memory_gib * GIB, 60.0, "after OOM", exclusive=True)
    return msgspec.structs.replace(view, demands={job_id: demand})


def mig_gpu(*slices: MigSlice) -> object:
    return replace(gpu(0), mig_enabled=True, mig_slices=slices)


def test_a_job_that_must_run_alone_takes_a_full_compute_slice() -> None:
    view = after_oom(station(mig_gpu(FULL)), 1, 30)
    (placement,) = SharingPolicy("auto").place([job(1, 8, 60)], view).placements
    assert placement.mode == "mig" and placement.mig_slice == "MIG-7g"
    assert "all of the GPU's compute in one slice" in placement.reason
    assert "after an out-of-memory death it runs alone" in placement.reason


def test_no_smaller_slice_will_do_and_a_whole_gpu_comes_first() -> None:
    view = after_oom(station(mig_gpu(*HALF)), 1, 10)
    assert SharingPolicy("auto").place([job(1, 8, 60)], view).placements == []
    whole_too = after_oom(station(mig_gpu(FULL), replace(gpu(1))), 1, 30)
    (placement,) = SharingPolicy("auto").place([job(1, 8, 60)], whole_too).placements
    assert placement.mode == "exclusive" and tuple(placement.gpus) == (1,)


def test_it_waits_for_the_engine_to_carve_one_not_for_an_admin() -> None:
    # the GPU in MIG mode with two half slices, and the engine allowed to re-carve it
    carvable = StationView(
        StationConfig(slots=2, mig_repartition=True, policy="auto"),
        cores=8,
        backend="sim:x",
        gpu_states=(replace(mig_gpu(*HALF), model="NVIDIA A100-SXM4-40GB"),),
        simulated=True,
    )
    view = after_oom(carvable, 1, 30)
    policy = SharingPolicy("auto")
    assert policy.place([job(1, 8, 60)], view).placements == []
    assert policy.change_needed(job(1, 8, 60), view) == ""  # no admin's change: it can run


def test_the_planner_asks_for_a_full_slice_for_it_only_where_no_gpu_runs_whole() -> None:
    alone = QueuedDemand(1, "rerun", 30 * GIB, 60.0, alone=True)
    result = plan(a100(current=("4g.20gb", "3g.20gb")), [alone])
    assert [s.profile for s in result.wanted] == ["7g.40gb"]
    assert not any_whole_gpu([mig_gpu(*HALF)])
    assert any_whole_gpu([mig_gpu(*HALF), gpu(1)])


def test_the_one_h100_day_in_mig_mode_loses_no_job_with_repartitioning() -> None:
    trace = load_trace(folder("traces") / "h100-mixed-day.json")
    result = Simulation(
        trace, policy="auto", station="sim:h100", mig="0=4g.40gb,3g.40gb", mig_repartition=True
    ).run()
    assert result.lost == 0 and result.oom_recovered == 1


def test_the_simulators_mig_queue_is_the_engines() -> None:
    # as mig_candidates: each queued job with its family's measured run time once one of the
    # family has finished (the engine's typical_run_s), and none before
    trace = load_trace(folder("traces") / "sweep-day-a100x4.json")
    sim = Simulation(trace, policy="auto", mig="3=3g.20gb,2g.10gb,1g.5gb,1g.5gb")
    seen_unknown = seen_known = False
    original = sim._schedule

    def schedule() -> None:
        nonlocal seen_unknown, seen_known
        for queued in mig_queue(sim):
            run = sim.run_of[queued.job_id]
            assert queued.run_s == sim.family_times.expected_s(run)
            seen_known |= queued.run_s is not None
            seen_unknown |= queued.run_s is None
        original()

    sim._schedule = schedule  # type: ignore[method-assign]
    sim.run()
    assert seen_unknown and seen_known
