"""The preemption decision (gpudesk.policy.preemption): who gives way, only when the waiting job
gains more than the preempted work loses, never a protected (just resumed) job."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.policy.collocation import MAX_OVERTAKES, SharingPolicy
from gpudesk.policy.policy import GpuState, MigSlice, StationView, Tenant
from gpudesk.policy.preemption import (
    MAX_ASKERS,
    PROTECT_FACTOR,
    Preemptible,
    choose,
    held_back,
    natural_wait_s,
    placed_by,
    without,
)
from gpudesk.policy.remaining import Remaining
from gpudesk.policy.simulator import Simulation, TraceError, load_trace

GIB = 1024.0
POLICY = SharingPolicy("auto")


def waiting(job_id: int, priority: int, gpus: int = 1, sm: float = 90.0) -> JobRecord:
    spec = JobSpec(
        name=f"j{job_id}",
        command=("true",),
        priority=priority,
        gpus=gpus,
        memory_gb=30.0,
        sm_pct=sm,
    )
    return JobRecord(job_id, spec, JobState.QUEUED, 0.0, None, None, 0, None, None, False)


def full_station(*tenants: Tenant, overtaken: dict[int, int] | None = None) -> StationView:
    """One 40 GiB GPU per tenant, each full (a heavy job, 35 GiB)."""
    gpus = tuple(
        GpuState(i, f"GPU-{i}", 40 * GIB, tenants=(t,), mps_usable=True)
        for i, t in enumerate(tenants)
    )
    return StationView(
        StationConfig(slots=1),
        cores=8,
        backend="sim:x",
        gpu_states=gpus,
        simulated=True,
        overtaken=overtaken or {},
    )


def heavy(job_id: int, remaining_s: float | None = None) -> Tenant:
    return Tenant(
        job_id,
        "mps",
        35 * GIB,
        95.0,
        remaining_s=remaining_s,
        measured_remaining_s=remaining_s,
    )


def low(
    job_id: int = 1,
    *,
    run_s: float = 3600.0,
    remaining_s: float | None = 3600.0,
    priority: int = 0,
    grace_s: float = 120.0,
) -> Preemptible:
    return Preemptible(job_id, priority, run_s, remaining_s, grace_s, restart_s=grace_s)


def test_a_higher_priority_job_preempts_a_long_low_priority_one() -> None:
    view = full_station(heavy(1, 3600.0))
    found = choose([waiting(2, 10)], view, [low()], placed_by(POLICY))
    assert found is not None
    assert (found.victim, found.for_job) == (1, 2)
    assert found.gain_s == 3600.0 - 120.0 and found.loss_s == 240.0
    assert "priority 10 > 0" in found.reason


def test_no_preemption_when_the_gain_does_not_exceed_the_loss() -> None:
    # remaining 300 s: the waiting job is spared 300 - 120 = 180 s, the victim loses 240 s
    view = full_station(heavy(1, 300.0))
    assert choose([waiting(2, 10)], view, [low(remaining_s=300.0)], placed_by(POLICY)) is None
    # one more second of grace-free gain beyond the loss tips it: 361 - 120 = 241 > 240
    view = full_station(heavy(1, 361.0))
    assert choose([waiting(2, 10)], view, [low(remaining_s=361.0)], placed_by(POLICY))


def test_equal_or_lower_priority_waits_unless_starving() -> None:
    view = full_station(heavy(1, 3600.0))
    assert choose([waiting(2, 0)], view, [low()], placed_by(POLICY)) is None
    assert choose([waiting(2, -5)], view, [low()], placed_by(POLICY)) is None
    starving = full_station(heavy(1, 3600.0), overtaken={2: MAX_OVERTAKES})
    found = choose([waiting(2, 0)], starving, [low()], placed_by(POLICY))
    assert found is not None and "overtake budget" in found.reason
    # starving never reaches a job of higher priority
    assert choose([waiting(2, 0)], starving, [low(priority=5)], placed_by(POLICY)) is None


def test_a_just_resumed_job_is_protected() -> None:
    view = full_station(heavy(1, 3600.0))
    young = low(run_s=PROTECT_FACTOR * 240.0 - 1)
    assert choose([waiting(2, 10)], view, [young], placed_by(POLICY)) is None
    old_enough = low(run_s=PROTECT_FACTOR * 240.0)
    assert choose([waiting(2, 10)], view, [old_enough], placed_by(POLICY)) is not None


def test_unknown_remaining_counts_its_run_so_far() -> None:
    view = full_station(heavy(1, None))
    short = low(run_s=500.0, remaining_s=None)  # 500 - 120 = 380 > 240
    assert choose([waiting(2, 10)], view, [short], placed_by(POLICY)) is not None
    shorter = low(run_s=480.0, remaining_s=None)  # protected exactly below 480; gain 360 > 240
    assert choose([waiting(2, 10)], view, [shorter], placed_by(POLICY)) is not None
    assert (
        choose([waiting(2, 10)], view, [low(run_s=350.0, remaining_s=None)], placed_by(POLICY))
        is None
    )


def test_a_gpu_draining_soon_by_itself_makes_preemption_pointless() -> None:
    # GPU 1's job (not preemptible) ends in 200 s: waiting that long beats preempting job 1
    view = full_station(heavy(1, 3600.0), heavy(3, 200.0))
    assert choose([waiting(2, 10)], view, [low()], placed_by(POLICY)) is None


def test_the_waiting_job_must_fit_where_the_victim_was() -> None:
    # job 1 is light (5 GiB) beside a 34 GiB heavy job that is not preemptible: its leaving
    # frees too little for the 30 GiB waiting job
    gpu = GpuState(
        0,
        "GPU-0",
        40 * GIB,
        mps_usable=True,
        tenants=(
            Tenant(
                1,
                "mps",
                5 * GIB,
                10.0,
                remaining_s=3600.0,
                measured_remaining_s=3600.0,
            ),
            Tenant(3, "mps", 34 * GIB, 90.0),
        ),
    )
    view = StationView(
        StationConfig(slots=1), cores=8, backend="sim:x", gpu_states=(gpu,), simulated=True
    )
    assert choose([waiting(2, 10)], view, [low()], placed_by(POLICY)) is None
    assert without(view, 1).gpu_states[0].tenants == (gpu.tenants[1],)


def test_the_lowest_priority_victim_and_jobs_in_flight_are_skipped() -> None:
    view = full_station(heavy(1, 3600.0), heavy(3, 3600.0))
    victims = [low(1, priority=2), low(3, priority=-1)]
    found = choose([waiting(2, 10)], view, victims, placed_by(POLICY))
    assert found is not None and found.victim == 3
    # job 3 already told to stop: job 1 is next; job 2 already served: nothing
    again = choose([waiting(2, 10)], view, victims, placed_by(POLICY), skip=frozenset({3}))
    assert again is not None and again.victim == 1
    assert choose([waiting(2, 10)], view, victims, placed_by(POLICY), skip=frozenset({2})) is None


def test_cpu_jobs_and_held_jobs_never_preempt() -> None:
    view = full_station(heavy(1, 3600.0))
    cpu = waiting(2, 10, gpus=0)
    assert choose([cpu], view, [low()], placed_by(POLICY)) is None

    held = msgspec.structs.replace(waiting(2, 10), held=True)
    assert choose([held], view, [low()], placed_by(POLICY)) is None


def test_a_waiting_job_is_told_why_no_preemptible_job_gives_way() -> None:
    fits = placed_by(POLICY)
    view = full_station(heavy(1, 3600.0))
    young = low(run_s=100.0)
    said = held_back(waiting(2, 10), view, [young], fits)
    assert said == (
        "not preempting: job 1 is protected: its attempt has run 1m40s of the 8m00s it must "
        "run before it may be preempted (2 x what preemption costs it: grace 2m00s + restart "
        "2m00s)"
    )
    # known remaining time: 300 s spares 180 s, no more than the 240 s lost
    said = held_back(waiting(2, 10), full_station(heavy(1, 300.0)), [low(remaining_s=300.0)], fits)
    assert said is not None and "would spare it 3m00s of waiting" in said
    assert "5m00s by its command family's past runs" in said and "would lose" in said
    # another GPU draining by itself first; the victim's own time unknown: what it has run
    draining = full_station(heavy(1, None), heavy(3, 200.0))
    said = held_back(waiting(2, 10), draining, [low(run_s=2000.0, remaining_s=None)], fits)
    assert said is not None and "a GPU drains by itself in 3m20s, sooner than its remaining" in said
    assert "unknown, taken as the 33m20s it has run" in said
    # equal priority, not starving; starving but outranked
    said = held_back(waiting(2, 0), view, [low()], fits)
    assert said is not None and said.startswith("no preemption: the preemptible job 1 has")
    assert "once later jobs have started ahead of it 8 times (this one: 0)" in said
    hungry = full_station(heavy(1, 3600.0), overtaken={2: MAX_OVERTAKES})
    said = held_back(waiting(2, 0), hungry, [low(priority=5)], fits)
    assert said is not None and "priority above its own (0)" in said
    # told to leave for it already; a CPU job, a held one and a station without one: nothing
    assert "job 1 (preemptible) is leaving for it" in (
        held_back(waiting(2, 10), view, [], fits, {1: 2}) or ""
    )

    assert held_back(waiting(2, 10, gpus=0), view, [low()], fits) is None
    assert (
        held_back(msgspec.structs.replace(waiting(2, 10), held=True), view, [low()], fits) is None
    )
    assert held_back(waiting(2, 10), view, [], fits) is None


def test_told_why_agrees_with_the_rule() -> None:
    """Whenever the rule preempts for a lone waiting job, it is told preempting pays, and
    whenever it does not, it is told why not, over a grid of victims and waiting jobs."""
    fits = placed_by(POLICY)
    cases = 0
    for remaining in (None, 200.0, 361.0, 3600.0):
        for run_s in (100.0, 479.0, 480.0, 2000.0):
            for grace in (30.0, 120.0):
                for priority, mine, overtaken in ((0, 10, 0), (0, 0, 0), (0, 0, 8), (5, 0, 8)):
                    view = full_station(heavy(1, remaining), overtaken={2: overtaken})
                    victim = low(run_s=run_s, remaining_s=remaining, grace_s=grace)
                    victim = msgspec.structs.replace(victim, priority=priority)
                    w = waiting(2, mine)
                    preempted = choose([w], view, [victim], fits) is not None
                    said = held_back(w, view, [victim], fits) or ""
                    assert ("pays (" in said) == preempted, (remaining, run_s, grace, said)
                    assert said.startswith(("not preempting: ", "no preemption: "))
                    cases += 1
    assert cases == 128


def _trace(tmp_path: Path, preemptible: bool = True) -> Path:
    jobs = [
        {
            "id": 1,
            "arrival_s": 0,
            "task": "long",
            "gpus": 1,
            "exclusive_minutes": 240,
            "peak_memory_mb": 60000,
            "sm_pct": 95,
            "preemptible": preemptible,
            "checkpoint_s": 60,
        },
        {
            "id": 2,
            "arrival_s": 1800,
            "task": "short",
            "gpus": 1,
            "exclusive_minutes": 10,
            "peak_memory_mb": 50000,
            "sm_pct": 90,
            "priority": 10,
        },
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"name": "t", "station": "h100", "jobs": jobs}))
    return path


def test_the_simulator_preempts_by_the_same_rule(tmp_path: Path) -> None:
    trace = load_trace(_trace(tmp_path))
    sim = Simulation(trace, policy="auto", station="sim:h100", estimator="measured")
    result = sim.run()
    long_run, short = sim.runs
    assert sim.preemptions == 1 and result.placement_classes["preempted"] == 1
    assert result.lost == 0
    # the short job waits for the long one's checkpoint (60 s) and no more
    assert short.first_start == pytest.approx(1800 + 60)
    # the long one loses its checkpoint and its restore, and waits for the short one
    assert long_run.finished_at == pytest.approx(240 * 60 + 60 + 600 + 60)
    ended = [o.ended for o in result.occupancies if o.job_id == 1]
    assert ended == ["preempted", "finished"]
    # off, or with a job not marked preemptible: the short job waits for the long one
    for sim in (
        Simulation(trace, policy="auto", station="sim:h100", estimator="measured", preempt=False),
        Simulation(
            load_trace(_trace(tmp_path, preemptible=False)),
            policy="auto",
            station="sim:h100",
            estimator="measured",
        ),
    ):
        sim.run()
        assert sim.preemptions == 0
        assert sim.runs[1].first_start == pytest.approx(240 * 60)


def test_a_trace_checkpoint_must_fit_a_grace(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            {
                "jobs": [
                    {
                        "arrival_s": 0,
                        "exclusive_minutes": 1,
                        "peak_memory_mb": 1,
                        "checkpoint_s": 7200,
                    }
                ]
            }
        )
    )
    with pytest.raises(
        TraceError,
        match="checkpoint_s: expected a number from 0 to 3600, found 7200",
    ):
        load_trace(path)


def test_the_simulator_asks_again_when_protection_ends(tmp_path: Path) -> None:
    jobs = [
        {
            "id": 1,
            "arrival_s": 0,
            "gpus": 1,
            "exclusive_minutes": 240,
            "peak_memory_mb": 60000,
            "sm_pct": 95,
            "preemptible": True,
            "checkpoint_s": 300,
        },
        {
            "id": 2,
            "arrival_s": 1800,
            "gpus": 1,
            "exclusive_minutes": 10,
            "peak_memory_mb": 50000,
            "sm_pct": 90,
            "priority": 10,
        },
        {
            "id": 3,
            "arrival_s": 3000,
            "gpus": 1,
            "exclusive_minutes": 10,
            "peak_memory_mb": 50000,
            "sm_pct": 90,
            "priority": 10,
        },
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"name": "t", "jobs": jobs}))
    sim = Simulation(load_trace(path), policy="auto", station="sim:h100", estimator="measured")
    sim.run()
    # job 1 resumes at 1800 + 300 + 600 = 2700 and is protected for 2 x (300 + 300) s: job 3
    # waits for that and its checkpoint, not for job 1's end
    assert sim.runs[2].first_start == pytest.approx(2700 + PROTECT_FACTOR * 600 + 300)
    assert sim.preemptions == 2


def test_a_jobs_own_progress_lines_never_spare_it() -> None:
    """A remaining time from the job's progress lines (its owner writes them) counts as unknown:
    a fake near-done claim neither shortens the victim's time left nor a GPU's drain."""
    claimed = Tenant(1, "mps", 35 * GIB, 95.0, remaining_s=5.0)
    assert natural_wait_s(full_station(claimed)) is None
    assert natural_wait_s(full_station(heavy(1, remaining_s=5.0))) == 5.0
    # the engine's own figure for a job that prints progress: its family's, whatever it prints
    assert Remaining(5.0, "progress").measured_s is None
    assert Remaining(5.0, "progress", typical_s=600.0, elapsed_s=100.0).measured_s == 500.0
    assert Remaining(None, "unknown", typical_s=600.0, elapsed_s=700.0).measured_s is None


def test_jobs_waiting_for_an_admins_change_do_not_use_up_the_askers() -> None:
    # GPU 0 whole, full with preemptible job 1; GPU 1 in MIG mode, its slice busy for an hour
    # more. A two-GPU job needs both GPUs whole: it waits for an admin to leave MIG mode, and
    # no preemption starts it.
    on_slice = Tenant(5, "mig", 20 * GIB, 40.0, remaining_s=3600.0, measured_remaining_s=3600.0)
    mig = GpuState(
        1,
        "GPU-1",
        40 * GIB,
        tenants=(on_slice,),
        mig_enabled=True,
        mig_slices=(MigSlice("MIG-1-0", "3g.20gb", 20 * GIB, 3, busy=True),),
    )
    whole = full_station(heavy(1, 3600.0))
    view = msgspec.structs.replace(whole, gpu_states=(*whole.gpu_states, mig))
    sweep = [waiting(100 + i, 10, gpus=2) for i in range(MAX_ASKERS + 2)]
    assert POLICY.change_needed(sweep[0], view)  # the scenario: it waits for a change
    one_gpu = waiting(2, 10)
    # each would ask (priority 10 > 0) but none fits with job 1 gone; behind them, one that does
    found = choose([*sweep, one_gpu], view, [low()], placed_by(POLICY))
    assert found is not None and (found.victim, found.for_job) == (1, 2)
    # jobs that may ask and could start once GPUs drain still count, up to MAX_ASKERS: 35 GiB
    # jobs do not fit beside job 3's 8 GiB even with job 1 gone; a 25 GiB one does
    victim = Tenant(1, "mps", 25 * GIB, 80.0, remaining_s=3600.0, measured_remaining_s=3600.0)
    beside = (victim, Tenant(3, "mps", 8 * GIB, 10.0, remaining_s=3600.0))
    shared = msgspec.structs.replace(
        view, gpu_states=(GpuState(0, "GPU-0", 40 * GIB, tenants=beside, mps_usable=True),)
    )
    fitting = msgspec.structs.replace(
        one_gpu, spec=msgspec.structs.replace(one_gpu.spec, memory_gb=25.0, sm_pct=80.0)
    )
    too_big = [
        msgspec.structs.replace(
            waiting(200 + i, 10), spec=msgspec.structs.replace(one_gpu.spec, memory_gb=35.0)
        )
        for i in range(MAX_ASKERS)
    ]
    assert not POLICY.change_needed(too_big[0], shared)
    assert choose([*too_big, fitting], shared, [low()], placed_by(POLICY)) is None
    assert choose([*too_big[1:], fitting], shared, [low()], placed_by(POLICY)) is not None
    # the sweep's own jobs are not told why job 1 does not give way: they wait for a change
    assert held_back(sweep[0], view, [low()], placed_by(POLICY)) is None
    assert held_back(one_gpu, view, [low(run_s=10.0)], placed_by(POLICY))
