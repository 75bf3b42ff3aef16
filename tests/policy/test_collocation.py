"""Collocation-aware placement (the pure policy) and the trace simulator that replays it."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
from test_jobs_protocol_policy import record  # same folder: on sys.path under pytest

from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.policy.carma import CarmaPolicy
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.demand import (
    MARGIN_MIB,
    PEAK_SETTLED_S,
    Demand,
    from_hints,
    reservation,
)
from gpudesk.policy.filled_station import Frontier as _Frontier
from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    FrozenTotal,
    InterferenceModel,
    Learner,
    Workload,
    pessimistic,
    predict_join,
)
from gpudesk.policy.policies import make_policy
from gpudesk.policy.policy import (
    RESERVE_MIB,
    GpuState,
    MigSlice,
    StationView,
    Tenant,
)
from gpudesk.policy.simulator import Simulation, TraceError, load_trace, simulate

TRACE = Path(__file__).resolve().parents[2] / "traces" / "carma-philly-t1.json"
GIB = 1024.0


def station(*gpus: GpuState, **kw: object) -> StationView:
    return StationView(
        StationConfig(slots=2), cores=8, backend="sim:x", gpu_states=gpus, simulated=True, **kw
    )


def gpu(
    index: int, *tenants: Tenant, used: float = 0.0, sm: float | None = None, mps: bool = True
) -> GpuState:
    return GpuState(
        index,
        f"GPU-{index}",
        40 * GIB,
        memory_used_mib=used,
        sm_activity_pct=sm,
        tenants=tenants,
        mps_usable=mps,
    )


def tenant(job_id: int, memory_gb: float, sm: float, mode: str = "mps") -> Tenant:
    return Tenant(job_id, mode, memory_gb * GIB, sm)


def job(job_id: int, memory_gb: float, sm: float, gpus: int = 1) -> JobRecord:
    rec = record(job_id, gpus=gpus, memory_gb=memory_gb)
    return msgspec.structs.replace(rec, spec=msgspec.structs.replace(rec.spec, sm_pct=sm))


def test_heavy_to_idle_light_to_busy() -> None:
    view = station(gpu(0, tenant(1, 10, 40)), gpu(1))
    decision = SharingPolicy("auto").place([job(2, 4, 90), job(3, 4, 20)], view)
    placed = {p.job_id: p for p in decision.placements}
    assert placed[2].gpus == (1,) and placed[2].mode == "mps"
    assert placed[3].gpus == (0,) and placed[3].mode == "mps"
    assert "collocated on GPU 0 under mps" in placed[3].reason
    # alone on GPU 1 the heavy job may use the whole GPU; next to job 1, job 3 what is free
    assert placed[2].mps_memory_limit_mib == int(40 * GIB - RESERVE_MIB)
    assert placed[3].mps_memory_limit_mib == int(40 * GIB - 10 * GIB - RESERVE_MIB)


def test_memory_must_fit_with_margin_counting_reservations_and_measurements() -> None:
    # 40 GiB GPU, 30 GiB reserved: 10 GiB - 0.5 reserve free; 8 GiB + 2 GiB margin does not fit
    view = station(gpu(0, tenant(1, 30, 10)))
    assert SharingPolicy("auto").place([job(2, 8, 10)], view).placements == []
    assert SharingPolicy("auto").place([job(2, 7, 10)], view).placements != []
    # the GPU measures more than was reserved: the measurement counts
    measured = station(gpu(0, tenant(1, 5, 10), used=30 * GIB))
    assert SharingPolicy("auto").place([job(2, 8, 10)], measured).placements == []
    assert 8 * GIB + MARGIN_MIB > 40 * GIB - 30 * GIB - RESERVE_MIB


def test_two_compute_heavy_jobs_never_share_and_sharing_must_gain() -> None:
    heavy = station(gpu(0, tenant(1, 5, 82)), gpu(1, tenant(3, 5, 82)))
    assert SharingPolicy("auto").place([job(2, 2, 82)], heavy).placements == []
    # a light job beside a heavy one gains (the seed's DLRM + ResNet152)
    (light,) = SharingPolicy("auto").place([job(2, 2, 5)], heavy).placements
    assert light.mode == "mps" and "predicted speed 0.96" in light.reason
    # with a co-tenant cost of 0.6 under MPS and a switch cost of 0.6 time-sliced nothing
    # gains: the job waits rather than slow job 1
    dear = Learner()
    dear.prior = dear.prior.with_values({"mps_tenant_cost": 0.6, "naive_switch_cost": 0.6})
    costly = station(gpu(0, tenant(1, 5, 30)), interference=InterferenceModel(dear))
    assert SharingPolicy("auto").place([job(2, 2, 30)], costly).placements == []
    # MPS alone dear: time-slicing beside job 1 still gains (0.9 each, less the 0.1 switch),
    # and `auto` takes it where forced `mps` waits
    dear.prior = dear.prior.with_values({"naive_switch_cost": 0.1})
    (sliced,) = SharingPolicy("auto").place([job(2, 2, 30)], costly).placements
    assert (sliced.mode, sliced.slot) == ("naive", "gpu:0/naive")
    assert "time-sliced rather than an MPS client" in sliced.reason, sliced.reason
    assert SharingPolicy("mps").place([job(2, 2, 30)], costly).placements == []


def test_auto_time_slices_a_bandwidth_bound_job_where_that_gains_even_pessimistically() -> None:
    """Per job, MPS or time-slicing beside the same MPS clients (issue 39 item 3): a pair that
    needs 1.8 x the GPU's bandwidth together loses under MPS (each at ~0.44) but only adds its
    kernel-active time time-sliced (each at ~0.64). Forced `mps` never time-slices, and a pair
    where time-slicing wins only at the model's nominal costs stays under MPS."""
    streaming = Tenant(1, "mps", 5 * GIB, 50.0, membw_pct=90.0)
    demand = Demand(2 * GIB, 50.0, "history", membw_pct=90.0)
    view = station(gpu(0, streaming), demands={2: demand})
    (sliced,) = SharingPolicy("auto").place([job(2, 2, 50)], view).placements
    assert (sliced.mode, sliced.slot, sliced.mps_memory_limit_mib) == ("naive", "gpu:0/naive", None)
    assert "time-sliced rather than an MPS client" in sliced.reason, sliced.reason
    pair = Workload(0.5, 0.9)
    under_mps = predict_join(DEFAULT_PARAMS, "mps", pair, [pair])
    assert under_mps.gain < 0 < predict_join(DEFAULT_PARAMS, "naive", pair, [pair]).gain
    assert f"under MPS the model predicts speed {under_mps.rate:.2f}" in sliced.reason
    assert SharingPolicy("mps").place([job(2, 2, 50)], view).placements == []  # no gain
    # Two 30 % jobs with an MPS co-tenant cost of 0.15: time-slicing gains 0.8 GPU at the
    # model's values against MPS's 0.7, but with each one's costs 1.5 x, 0.42 against 0.55: MPS
    learner = Learner()
    learner.prior = learner.prior.with_values({"mps_tenant_cost": 0.15})
    params = learner.prior
    close = station(gpu(0, tenant(1, 5, 30)), interference=InterferenceModel(learner))
    light = Workload(0.3, 0.15)
    assert (
        predict_join(params, "naive", light, [light]).gain
        > predict_join(params, "mps", light, [light]).gain
    )
    (kept,) = SharingPolicy("auto").place([job(2, 2, 30)], close).placements
    assert kept.mode == "mps" and "time-sliced" not in kept.reason


def test_auto_shares_only_where_the_station_gains_with_the_costs_at_the_top_of_their_range() -> (
    None
):
    """The robust rule (issue 39 item 4): two 78 % SM jobs under MPS gain the station 0.07 GPU
    at the model's values and lose with its co-tenant cost and contention at 1.5 x, so `auto`
    leaves the second waiting where forced `mps` collocates it; once the station has measured
    both parameters (27 observations each: a range of 1.05 x), `auto` collocates it too."""
    pair = Workload(0.78, 0.39)
    nominal = predict_join(DEFAULT_PARAMS, "mps", pair, [pair]).gain
    worst = predict_join(pessimistic(DEFAULT_PARAMS, "mps"), "mps", pair, [pair]).gain
    assert worst < 0 < nominal, (worst, nominal)
    view = station(gpu(0, tenant(1, 5, 78)))
    assert SharingPolicy("auto").place([job(2, 2, 78)], view).placements == []
    (forced,) = SharingPolicy("mps").place([job(2, 2, 78)], view).placements
    assert forced.mode == "mps" and f"station gains {nominal:.2f} GPU" in forced.reason
    # measured: the station's own observations agree with the defaults
    learner = Learner()
    assert learner.widths("")["contention"] == 1.5
    agree = {
        name: FrozenTotal(getattr(DEFAULT_PARAMS, name) * 27, 27, 0, None)
        for name in ("mps_tenant_cost", "contention")
    }
    learner.restore("", (), agree)
    learned_params = learner.params("")
    assert learned_params.contention == pytest.approx(DEFAULT_PARAMS.contention)
    assert learner.widths("")["mps_tenant_cost"] == pytest.approx(1.05)
    assert learner.widths("")["naive_switch_cost"] == 1.5  # not measured
    learned = station(gpu(0, tenant(1, 5, 78)), interference=InterferenceModel(learner))
    (collocated,) = SharingPolicy("auto").place([job(2, 2, 78)], learned).placements
    assert collocated.mode == "mps" and "with its costs at the top of their range" in (
        collocated.reason
    )


def test_an_idle_gpu_comes_before_sharing_unless_a_heavier_job_behind_needs_it() -> None:
    view = station(gpu(0), gpu(1), gpu(2), gpu(3))
    light = [job(i, 2, 30) for i in range(1, 5)]
    placed = SharingPolicy("auto").place(light, view).placements
    assert sorted(p.gpus for p in placed) == [(0,), (1,), (2,), (3,)]  # one per GPU
    # GPU 1 is the last idle one and a compute-heavy job waits behind the light one: the
    # light job shares GPU 0 and the heavy one gets GPU 1
    busy = station(gpu(0, tenant(1, 5, 30)), gpu(1))
    decision = SharingPolicy("auto").place([job(2, 2, 10), job(3, 4, 90)], busy)
    assert {p.job_id: p.gpus for p in decision.placements} == {2: (0,), 3: (1,)}
    kept = next(p for p in decision.placements if p.job_id == 2).alternatives
    assert [a.slot for a in kept] == ["gpu:0/mps", "gpu:1/mps"] and kept[0].note == "chosen"


def test_naive_without_mps_and_no_mixing_of_modes() -> None:
    view = station(gpu(0, tenant(1, 5, 20, mode="naive"), mps=False))
    (placement,) = SharingPolicy("auto").place([job(2, 2, 20)], view).placements
    assert placement.mode == "naive" and placement.mps_memory_limit_mib is None
    mixed = station(gpu(0, tenant(1, 5, 20, mode="naive"), mps=True))
    assert SharingPolicy("auto").place([job(2, 2, 20)], mixed).placements == []


def test_multi_gpu_and_after_oom_jobs_get_whole_idle_gpus() -> None:
    view = station(gpu(0, tenant(1, 5, 20)), gpu(1), gpu(2))
    (two,) = SharingPolicy("auto").place([job(2, 4, 50, gpus=2)], view).placements
    assert two.gpus == (1, 2) and two.mode == "exclusive"
    after = Demand(4 * GIB, 50, "hint").after_oom(observed_mib=5 * GIB)
    assert after.exclusive and after.memory_mib == pytest.approx(6.25 * GIB)
    oomed = station(gpu(0, tenant(1, 5, 20)), gpu(1), demands={3: after})
    (alone,) = SharingPolicy("auto").place([job(3, 4, 50)], oomed).placements
    assert alone.gpus == (1,) and alone.mode == "exclusive"
    assert "out-of-memory" in alone.reason


def test_bounded_backfilling_reserves_gpus_for_the_waiting_job() -> None:
    view = station(gpu(0, tenant(1, 5, 20)), gpu(1, tenant(2, 5, 30)), overtaken={10: 8})
    decision = SharingPolicy("auto").place([job(10, 33, 90), job(11, 2, 10)], view)
    # job 10 (heavy, 33 GiB + margin) cannot start; it has been overtaken 8 times, so the least
    # loaded GPU (0) is held for it and job 11 goes to GPU 1
    assert [(p.job_id, p.gpus) for p in decision.placements] == [(11, (1,))]
    wait = SharingPolicy("auto").explain_wait(job(10, 33, 90), [job(10, 33, 90)], view)
    assert wait.startswith("waiting (hint demand: needs 33.0 GiB")


def test_the_gpu_held_for_a_waiting_job_is_the_one_that_drains_first() -> None:
    # as above, but GPU 1's tenant ends in a minute and GPU 0's in an hour (their progress
    # says so): GPU 1 is held, though more loaded, and job 11 goes to GPU 0
    soon = replace(tenant(2, 5, 30), remaining_s=60.0)  # from its progress
    late = replace(tenant(1, 5, 20), remaining_s=3600.0, measured_remaining_s=3600.0)
    view = station(gpu(0, late), gpu(1, soon), overtaken={10: 8})
    decision = SharingPolicy("auto").place([job(10, 33, 90), job(11, 2, 10)], view)
    assert [(p.job_id, p.gpus) for p in decision.placements] == [(11, (0,))]
    # one end unknown: the least loaded is held, as before
    view = station(gpu(0, tenant(1, 5, 20)), gpu(1, soon), overtaken={10: 8})
    decision = SharingPolicy("auto").place([job(10, 33, 90), job(11, 2, 10)], view)
    assert [(p.job_id, p.gpus) for p in decision.placements] == [(11, (1,))]


def test_a_waiting_multi_gpu_job_holds_gpus_from_the_first_pass() -> None:
    # GPU 0 and 1 are busy, 2 idle: the 2-GPU job waits and GPUs 2 and 1 (least loaded) are held
    # for it at once; a later light job still starts, on GPU 0
    view = station(gpu(0, tenant(1, 5, 40)), gpu(1, tenant(2, 5, 20)), gpu(2))
    decision = SharingPolicy("auto").place([job(10, 8, 70, gpus=2), job(11, 2, 10)], view)
    assert [(p.job_id, p.gpus) for p in decision.placements] == [(11, (0,))]
    assert decision.overtaken == {10: 1}


def test_a_gpu_in_mig_mode_is_never_held_for_a_multi_gpu_job() -> None:
    # GPUs 0 and 1 are busy; GPU 2 is in MIG mode, idle, with a free 3g.20gb slice. The 2-GPU
    # job at the head waits for two whole GPUs: GPU 2 can never be one of them, so holding it
    # (as the least loaded) would idle its slice; the light job behind starts on it.
    slices = (MigSlice("MIG-a", "3g.20gb", 20096, 3),)
    view = station(
        gpu(0, tenant(1, 30, 40)),
        gpu(1, tenant(2, 30, 50)),
        GpuState(2, "GPU-2", 40 * GIB, mig_enabled=True, mig_slices=slices),
    )
    decision = SharingPolicy("auto").place([job(10, 8, 70, gpus=2), job(11, 8, 30)], view)
    assert [(p.job_id, p.gpus, p.mig_slice) for p in decision.placements] == [(11, (2,), "MIG-a")]
    assert decision.overtaken == {10: 1}


def test_a_measured_need_is_not_skipped_for_a_guess_that_found_no_room() -> None:
    # GPU 0 has 31.5 GiB free. Job 2's guess of 30 GiB needs 32 with the 2 GiB margin: no room.
    # Job 3's 30.5 GiB was measured by earlier runs: with its 3 % margin it needs 31.4 and fits.
    # A queue-wide "no room for anything this big" shortcut must not skip it. Job 4's measured
    # 31 GiB needs 31.9: no room.
    view = station(
        gpu(0, tenant(1, 8, 20)),
        demands={3: Demand(30.5 * GIB, 10, "history"), 4: Demand(31 * GIB, 10, "history")},
    )
    decision = SharingPolicy("auto").place([job(2, 30, 10), job(3, 1, 1), job(4, 1, 1)], view)
    assert [(p.job_id, p.gpus) for p in decision.placements] == [(3, (0,))]


def test_a_running_jobs_reservation_follows_its_measured_peak_once_settled() -> None:
    assert reservation(16 * GIB, 4 * GIB, None) == 16 * GIB  # no measurement yet
    assert reservation(16 * GIB, 4 * GIB, PEAK_SETTLED_S - 1) == 16 * GIB  # still growing
    assert reservation(16 * GIB, 4 * GIB, PEAK_SETTLED_S) == pytest.approx(4.4 * GIB)
    assert reservation(2 * GIB, 9 * GIB, 300.0) == pytest.approx(9.9 * GIB)  # underestimated
    usage = AttemptUsage(1, 1)
    usage.add_gpu_sample(1000.0, None, at=10.0)
    usage.add_gpu_sample(4000.0, None, at=11.0)
    usage.add_gpu_sample(4030.0, None, at=12.0)  # allocator noise: not a new peak
    assert usage.gpu_memory_peak_mib == 4030.0 and usage.gpu_memory_peak_at == 11.0
    usage.add_gpu_sample(3000.0, None, at=13.0)
    assert usage.gpu_memory_peak_at == 11.0


def test_impossible_jobs_are_rejected_with_a_reason_a_big_hint_is_not() -> None:
    view = station(gpu(0), gpu(1))
    decision = SharingPolicy("auto").place([job(1, 50, 10), job(2, 4, 10, gpus=3)], view)
    (reason,) = [r.reason for r in decision.rejections]
    assert "asks for 3 GPUs but this station has only 2" in reason
    # a 50 GB hint on 40 GiB GPUs is a hint: taken as unknown, the job starts alone
    (placed,) = decision.placements
    assert placed.job_id == 1 and "memory taken as unknown" in placed.reason


def test_carma_blocks_on_the_head_of_the_queue_and_uses_measured_memory() -> None:
    view = station(gpu(0, tenant(1, 5, 20), used=36 * GIB), gpu(1, tenant(2, 5, 20), used=30 * GIB))
    decision = CarmaPolicy().place([job(3, 9, 10), job(4, 1, 10)], view)
    assert decision.placements == []  # FIFO without backfilling: job 3 does not fit, 4 waits
    roomy = station(gpu(0, tenant(1, 5, 20), used=5 * GIB), gpu(1, tenant(2, 5, 20), used=20 * GIB))
    (placed,) = CarmaPolicy().place([job(3, 9, 10)], roomy).placements
    assert placed.gpus == (0,) and placed.mps_memory_limit_mib is None  # most free memory


def test_mig_slices_are_chosen_by_memory_and_compute() -> None:
    slices = (MigSlice("MIG-a", "3g.20gb", 20096, 3), MigSlice("MIG-b", "1g.5gb", 4864, 1))
    view = station(GpuState(0, "GPU-0", 40 * GIB, mig_enabled=True, mig_slices=slices))
    # a 70 % SM job of 4 GB would run at 0.20 on the 1g.5gb slice, at 0.58 on the 3g.20gb
    (heavy,) = SharingPolicy("auto").place([job(1, 4, 70)], view).placements
    assert (heavy.mode, heavy.mig_slice) == ("mig", "MIG-a")
    # a job that keeps 2 % of the SMs busy runs as fast on the smallest slice: it takes that
    (small,) = SharingPolicy("auto").place([job(1, 4, 2)], view).placements
    assert (small.mode, small.mig_slice) == ("mig", "MIG-b")
    real = StationView(StationConfig(), cores=8, backend="nvml", gpu_states=view.gpu_states)
    (placed,) = SharingPolicy("auto").place([job(1, 4, 2)], real).placements
    assert placed.env["CUDA_VISIBLE_DEVICES"] == "MIG-b"


def test_demand_from_hints_history_and_defaults() -> None:
    assert from_hints(4.0, 30.0) == Demand(4096.0, 30.0, "hint")
    history = Demand(6000.0, 45.0, "history")
    assert from_hints(None, None, history) is history
    assert from_hints(None, None).source == "default"


def test_policies_are_registered() -> None:
    assert make_policy("auto").name == "auto" and make_policy("carma").name == "carma"
    assert make_policy("mig").name == "mig"


# -------------------------------------------------------------- simulator
def test_the_carma_trace_through_every_policy() -> None:
    trace = load_trace(TRACE)
    assert len(trace.jobs) == 60 and trace.station == "dgx-station-a100"
    results = {r.policy: r for r in simulate(trace, ["exclusive", "carma", "auto", "mig"])}
    exclusive, carma, auto = results["exclusive"], results["carma"], results["auto"]
    assert all(r.lost == 0 and r.jobs == 60 for r in results.values())
    assert exclusive.modes == {"exclusive": 60} and exclusive.oom_crashes == 0
    assert auto.makespan_s < carma.makespan_s < exclusive.makespan_s
    assert auto.energy_kwh < exclusive.energy_kwh
    assert auto.oom_crashes <= carma.oom_crashes
    assert results["mig"].oom_recovered == results["mig"].oom_crashes  # every OOM recovered


def test_an_underestimated_job_dies_once_and_is_recovered(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    jobs = [
        {
            "id": 1,
            "arrival_s": 0,
            "exclusive_minutes": 30,
            "peak_memory_mb": 30000,
            "class": "light",
            "estimate_gpumemnet_mb": 20000,
        },
        {
            "id": 2,
            "arrival_s": 0,
            "exclusive_minutes": 30,
            "peak_memory_mb": 4000,
            "class": "light",
            "estimate_gpumemnet_mb": 4000,
        },
    ]
    path.write_text(json.dumps({"name": "t", "station": "h100", "jobs": jobs}))
    sim = Simulation(load_trace(path), policy="mig", station="sim:dgx-station-a100x1")
    result = sim.run()
    assert (result.oom_crashes, result.oom_recovered, result.lost) == (1, 1, 0)
    assert sim.runs[0].attempts == 2 and sim.runs[0].demand.exclusive


@pytest.mark.parametrize(
    "body, message",
    [
        ("[]", "expected an object"),
        ('{"jobs": [{"arrival_s": 0}]}', "jobs[0]: missing exclusive_minutes (the job's run time"),
        ("not json", "is not a JSON trace"),
    ],
)
def test_bad_traces_are_clear_errors(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(body)
    with pytest.raises(TraceError, match=re.escape(message)):
        load_trace(path)


def test_the_no_room_frontier_agrees_with_a_brute_force_check() -> None:
    import random

    rng = random.Random(7)
    for _ in range(200):
        frontier, points = _Frontier(), []
        for _ in range(rng.randint(1, 12)):
            point = (rng.choice((1.0, 2.0, 3.0, 4.0)) * 1024, rng.choice((10.0, 30.0, 70.0)))
            frontier.add(*point)
            points.append(point)
        for _ in range(20):
            memory, sm = rng.uniform(0, 5000), rng.uniform(0, 100)
            expected = any(memory >= m and sm >= s for m, s in points)
            assert frontier.dominates(memory, sm) == expected
        # it keeps the points no other dominates (the first of equals), by memory
        minimal = sorted(
            {
                p
                for i, p in enumerate(points)
                if not any(
                    q[0] <= p[0] and q[1] <= p[1] and (q != p or j < i)
                    for j, q in enumerate(points)
                )
            }
        )
        assert list(zip(frontier.memory, frontier.sm, strict=True)) == minimal


def test_a_station_that_asks_for_isolation_shares_only_mig_slices() -> None:
    isolated = StationView(
        StationConfig(isolation=True),
        cores=8,
        backend="nvml",
        gpu_states=(
            gpu(0, tenant(1, 4, 10)),
            GpuState(
                1,
                "GPU-1",
                40 * GIB,
                mig_enabled=True,
                mig_slices=(MigSlice("MIG-x", "2g.10gb", 9984, 2),),
            ),
        ),
    )
    placed = SharingPolicy("auto").place([job(2, 4, 10), job(3, 4, 10)], isolated).placements
    # job 2 takes the slice; job 3 would have to share GPU 0 with job 1, so it waits
    assert [(p.job_id, p.mode, p.mig_slice) for p in placed] == [(2, "mig", "MIG-x")]


def test_an_oom_re_estimate_is_capped_at_a_whole_gpu() -> None:
    usable = 40 * GIB - RESERVE_MIB
    # hinted 27 GB, died sharing at 29 GiB: raised to a whole GPU, not to an impossible 44 GiB
    raised = Demand(27 * GIB, 50, "hint").after_oom(observed_mib=29 * GIB, usable_mib=usable)
    assert raised.exclusive and raised.memory_mib == usable
    oomed = station(gpu(0), demands={1: raised})
    (alone,) = SharingPolicy("auto").place([job(1, 27, 50)], oomed).placements
    assert alone.mode == "exclusive"
    # died alone under an MPS limit of all but the reserve: a whole GPU is still more
    limited = Demand(27 * GIB, 50, "hint").after_oom(observed_mib=usable, usable_mib=usable)
    assert limited.exclusive and limited.memory_mib == usable
    # died alone on a whole GPU with all its memory: beyond every GPU here, a clear failure
    beyond = Demand(usable, 50, "after OOM", exclusive=True).after_oom(
        observed_mib=usable, usable_mib=usable, had_whole=True
    )
    decision = SharingPolicy("auto").place([job(1, 27, 50)], station(gpu(0), demands={1: beyond}))
    assert decision.placements == []
    assert "ran out of GPU memory alone on a whole GPU" in decision.rejections[0].reason


def test_known_peaks_earn_a_smaller_margin_so_dlrm_and_resnet152_share() -> None:
    # The seed's pair on an A100 40GB (40536 MiB): DLRM 29.14 GB at 5 % SM runs, its peak
    # settled; ResNet152 8.47 GB at 82 % SM waits.
    total = 40536.0
    dlrm = Tenant(1, "mps", reservation(29.14 * GIB, 29.14 * GIB, 120.0, known=True), 5.0)
    view = station(
        replace(gpu(0, dlrm), memory_total_mib=total),
        demands={2: Demand(8.47 * GIB, 82.0, "hint")},
    )
    assert SharingPolicy("auto").place([job(2, 8.47, 82)], view).placements == []  # 2 GiB margin
    known = msgspec.structs.replace(view, demands={2: Demand(8.47 * GIB, 82.0, "history")})
    (placed,) = SharingPolicy("auto").place([job(2, 8.47, 82)], known).placements
    assert placed.mode == "mps" and "predicted speed 0.96" in placed.reason


def test_carma_does_not_place_whole_gpu_jobs_on_a_gpu_in_mig_mode() -> None:
    slices = (MigSlice("MIG-a", "3g.20gb", 20096, 3),)
    mig_gpu = GpuState(0, "GPU-0", 40 * GIB, mig_enabled=True, mig_slices=slices)
    assert CarmaPolicy().place([job(1, 4, 10)], station(mig_gpu)).placements == []
    (placed,) = CarmaPolicy().place([job(1, 4, 10)], station(mig_gpu, gpu(1))).placements
    assert placed.gpus == (1,)
