"""A hint is a hint (issue 39): a memory hint above what a GPU offers a job alone, or at 90 % of
the largest GPU or more, is taken as unknown. The job is never refused or failed for it: it
starts where the room is largest (alone on an idle GPU, else beside others under an MPS memory
limit of the room left) and reruns alone if it runs out of memory. Only a need measured beyond
every GPU (an OOM alone on a whole GPU of the largest size) fails it, saying so."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest
from test_jobs_protocol_policy import record  # same folder: on sys.path under pytest

from gpudesk.core.jobs import JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.policy.carma import CarmaPolicy
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.demand import UNKNOWN_ADMIT_MIB, Demand, beyond_every_gpu, hint_unknown
from gpudesk.policy.policy import RESERVE_MIB, GpuState, StationView, Tenant, gpu_job_impossible
from gpudesk.policy.retry import Ending, ending
from gpudesk.policy.simulator import Simulation
from gpudesk.policy.trace import Trace, TraceJob

GIB = 1024.0
A100_40 = 40536.0  # MiB, as the card reports it (gpu_models.A100_SXM4_40GB)
USABLE = A100_40 - RESERVE_MIB


def station(*gpus: GpuState) -> StationView:
    return StationView(
        StationConfig(slots=2), cores=8, backend="sim:x", gpu_states=gpus, simulated=True
    )


def gpu(index: int, *tenants: Tenant) -> GpuState:
    return GpuState(index, f"GPU-{index}", A100_40, tenants=tenants, mps_usable=True)


def job(job_id: int, memory_gb: float, sm: float = 30.0, gpus: int = 1) -> JobRecord:
    rec = record(job_id, gpus=gpus, memory_gb=memory_gb)
    return msgspec.structs.replace(rec, spec=msgspec.structs.replace(rec.spec, sm_pct=sm))


def busy(index: int, tenant_gib: float) -> GpuState:
    return gpu(index, Tenant(100 + index, "mps", tenant_gib * GIB, 20.0))


@pytest.mark.parametrize("share", [1.0, 0.95])
def test_a_hint_at_or_near_the_whole_gpu_starts_alone_on_an_idle_gpu(share: float) -> None:
    hinted = job(1, share * A100_40 / GIB)
    view = station(busy(0, 10), gpu(1))
    (placed,) = SharingPolicy("auto").place([hinted], view).placements
    assert placed.gpus == (1,) and placed.mode == "mps"
    assert placed.mps_memory_limit_mib == int(USABLE)  # alone: the whole GPU
    assert "memory taken as unknown" in placed.reason and "alone" in placed.reason
    # the GPU counts it as holding all of it until its peak is measured
    assert placed.demand is not None and placed.demand["memory_mib"] == round(USABLE)


@pytest.mark.parametrize("share", [1.0, 0.95, 1.5])
def test_without_an_idle_gpu_it_starts_where_the_room_is_largest(share: float) -> None:
    hinted = job(1, share * A100_40 / GIB)
    view = station(busy(0, 25), busy(1, 10), busy(2, 30))
    (placed,) = SharingPolicy("auto").place([hinted], view).placements
    room = A100_40 - 10 * GIB - RESERVE_MIB
    assert placed.gpus == (1,) and placed.mode == "mps"
    assert placed.mps_memory_limit_mib == int(room)  # never into what the tenant holds
    assert placed.demand is not None and placed.demand["memory_mib"] == round(room)
    assert "its co-tenants left free" in placed.reason
    # nothing else is packed into the room it may grow into in the same pass
    after = SharingPolicy("auto").place([hinted, job(2, 2)], view).placements
    assert [p.gpus for p in after] == [(1,), (0,)]


def test_a_hint_below_the_share_is_a_need() -> None:
    """At 85 % of the GPU a hint is used as it is: it needs a GPU where that much is free."""
    view = station(busy(0, 10))
    assert SharingPolicy("auto").place([job(1, 0.85 * A100_40 / GIB)], view).placements == []
    assert hint_unknown(0.85 * A100_40, "hint", A100_40, USABLE) == ""
    assert hint_unknown(0.9 * A100_40, "hint", A100_40, USABLE) != ""
    # a peak measured by earlier runs is a need up to what a GPU offers alone
    assert hint_unknown(0.95 * A100_40, "history", A100_40, USABLE) == ""
    assert hint_unknown(A100_40, "history", A100_40, USABLE) != ""
    assert hint_unknown(2 * A100_40, "after OOM", A100_40, USABLE) == ""  # measured


def test_a_job_with_unknown_memory_waits_for_room_and_says_why() -> None:
    view = station(busy(0, 35), busy(1, 34))  # 4.5 and 5.5 GiB free: less than 8 + 2
    hinted = job(1, 60)
    decision = SharingPolicy("auto").place([hinted], view)
    assert decision.placements == [] and decision.rejections == []
    text = SharingPolicy("auto").explain_wait(hinted, [hinted], view)
    assert "memory taken as unknown: its hint of 60.0 GiB is above what the largest GPU" in text
    assert f"{UNKNOWN_ADMIT_MIB / GIB:.1f} GiB and a margin are free" in text
    assert "reruns alone if it runs out of memory" in text
    assert "waiting for a change" not in text and "admin" not in text


def test_a_hint_above_every_gpu_is_never_refused() -> None:
    view = station(gpu(0), gpu(1))
    assert gpu_job_impossible(1, 60 * GIB, view, RESERVE_MIB) is None  # at submit
    for policy in (SharingPolicy("auto"), SharingPolicy("mps"), CarmaPolicy()):
        decision = policy.place([job(1, 60)], view)
        assert decision.rejections == [] and len(decision.placements) == 1, policy.name


def test_a_multi_gpu_job_with_big_hints_gets_whole_gpus() -> None:
    view = station(gpu(0), gpu(1), busy(2, 10))
    (placed,) = SharingPolicy("auto").place([job(1, 45, gpus=2)], view).placements
    assert placed.gpus == (0, 1) and placed.mode == "exclusive"
    assert "memory taken as unknown" in placed.reason
    # too many GPUs is still refused
    (rejected,) = SharingPolicy("auto").place([job(2, 45, gpus=4)], view).rejections
    assert "asks for 4 GPUs" in rejected.reason


def test_only_a_need_measured_on_a_whole_gpu_fails_the_job() -> None:
    shared = Demand(40 * GIB, 30.0, "hint").after_oom(3 * GIB, USABLE)
    assert shared.exclusive and shared.memory_mib == USABLE and not beyond_every_gpu(shared, USABLE)
    alone = shared.after_oom(USABLE, USABLE, had_whole=True)
    assert beyond_every_gpu(alone, USABLE)
    hinted = job(1, 60)

    def ended(attempt: int, raised: Demand) -> Ending:
        oom = "CUDA out of memory"
        return ending(
            hinted,
            attempt,
            1,
            "exited 1",
            timed_out=False,
            oom=oom,
            after_oom=lambda: raised,
            usable_mib=USABLE,
        )

    retried = ended(1, shared)
    assert retried.state == JobState.QUEUED and retried.raised_demand == shared
    failed = ended(2, alone)
    assert failed.state == JobState.FAILED
    assert "its need, measured, is beyond every GPU of this station" in failed.message


def _trace(*jobs: TraceJob) -> Trace:
    return Trace("t", "sim:a100-40gb", jobs)


def _job(
    job_id: int, peak_mib: float, hint_mib: float, minutes: float = 30.0, at: float = 0.0
) -> TraceJob:
    return TraceJob(
        job_id, f"j{job_id}", at, 1, minutes * 60, peak_mib, 30.0, "light", {"gpumemnet": hint_mib}
    )


@pytest.mark.parametrize("policy", ["auto", "mps", "carma", "exclusive"])
def test_two_small_jobs_hinted_at_39_gb_both_run(policy: str) -> None:
    """Two 1 GB jobs whose hints say 39.1 GB (40,038 MiB: above the 40,024 MiB an A100 40GB
    offers a job alone) were both rejected and lost; now both run."""
    trace = _trace(_job(1, 1024.0, 39.1 * GIB), _job(2, 1024.0, 39.1 * GIB))
    result = Simulation(trace, policy=policy, station="sim:a100-40gb").run()
    assert (result.lost, result.impossible, result.oom_crashes) == (0, 0, 0)
    assert result.makespan_s > 0


def test_a_job_past_the_room_it_got_reruns_alone_and_is_not_lost() -> None:
    """Job 2's hint (39.1 GB) is taken as unknown; it starts beside job 1 under a limit of the
    room job 1 left, runs out of memory at its true peak (30 GB), and reruns alone."""
    trace = _trace(_job(1, 12 * GIB, 12 * GIB, minutes=60), _job(2, 30 * GIB, 39.1 * GIB, at=60))
    sim = Simulation(trace, policy="auto", station="sim:a100-40gb")
    result = sim.run()
    assert (result.lost, result.oom_crashes, result.oom_recovered) == (0, 1, 1)
    tries = [(o.job_id, o.mode, o.ended) for o in sim.occupancies if o.job_id == 2]
    assert tries == [(2, "mps", "oom"), (2, "exclusive", "finished")]


def test_a_rerun_after_an_oom_takes_a_gpu_large_enough() -> None:
    """On a station of an 80 GB and a 40 GB GPU, a job that died sharing reruns alone on the
    80 GB one (all a retry can give it), not on the first idle GPU by index."""
    big = replace(gpu(1), memory_total_mib=81920.0)
    usable = 81920.0 - RESERVE_MIB
    raised = Demand(50 * GIB, 30.0, "hint").after_oom(45 * GIB, usable)
    view = msgspec.structs.replace(station(gpu(0), big), demands={1: raised})
    (placed,) = SharingPolicy("auto").place([job(1, 50)], view).placements
    assert placed.gpus == (1,) and placed.mode == "exclusive"
    busy_big = station(gpu(0), replace(busy(1, 10), memory_total_mib=81920.0))
    assert (
        SharingPolicy("auto")
        .place([job(1, 50)], msgspec.structs.replace(busy_big, demands={1: raised}))
        .placements
        == []
    )
