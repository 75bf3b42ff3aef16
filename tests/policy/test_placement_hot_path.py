"""The placement hot path: its shortcuts give exactly what the slow path gives, and the GPUs it
holds for a long-waiting job are GPUs that job can run on."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    Joining,
    Workload,
    predict_join,
    shared_rates,
    workload,
)
from gpudesk.policy.policy import GpuState, MigSlice, StationView, Tenant
from gpudesk.policy.rates import MIN_RATE, cap_factor, mps_shared_rate

share = st.floats(0.0, 1.0, allow_nan=False)
cap = st.one_of(st.none(), st.floats(0.05, 1.0, allow_nan=False))
tenants = st.lists(st.builds(Workload, share, share, cap), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(tenants, st.builds(Workload, share, share), st.sampled_from(["mps", "naive"]))
def test_joining_predicts_exactly_what_predict_join_does(
    loads: list[Workload], job: Workload, mechanism: str
) -> None:
    assert Joining(DEFAULT_PARAMS, mechanism, loads)(job) == predict_join(
        DEFAULT_PARAMS, mechanism, job, loads
    )
    # time-slicing beside MPS clients: the tenants lose against their MPS rates now
    under_mps = Joining(DEFAULT_PARAMS, "mps", loads).before
    assert Joining(DEFAULT_PARAMS, "naive", loads, under_mps)(job) == predict_join(
        DEFAULT_PARAMS, "naive", job, loads, under_mps
    )


uncapped = st.lists(st.builds(Workload, share, share), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.one_of(tenants, uncapped), st.sampled_from(["mps", "naive", "exclusive"]))
def test_joining_takes_the_tenants_rates_as_shared_rates_gives_them(
    loads: list[Workload], mechanism: str
) -> None:
    """mps_rates' shortcut for uncapped tenants (one shared rate) is what its per-tenant rule
    gives, to the bit, and Joining's tenants' rates are shared_rates'."""
    assert Joining(DEFAULT_PARAMS, mechanism, loads).before == tuple(
        shared_rates(DEFAULT_PARAMS, mechanism, loads)
    )
    if mechanism == "mps" and len(loads) > 1:
        pressure = max(sum([t.sm for t in loads]), sum([t.membw for t in loads]))
        shared = mps_shared_rate(DEFAULT_PARAMS, pressure, len(loads))
        per_tenant = [max(MIN_RATE, min(shared, cap_factor(DEFAULT_PARAMS, t))) for t in loads]
        assert shared_rates(DEFAULT_PARAMS, "mps", loads) == per_tenant


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.0, 200.0, allow_nan=False),
    st.one_of(st.none(), st.floats(0.0, 200.0, allow_nan=False)),
)
def test_a_workload_asked_for_again_is_the_same_one(sm_pct: float, membw_pct: float | None) -> None:
    """workload() keeps what it made (a pass asks for the same few again and again), by the
    figures and by the one parameter it reads: another bandwidth-per-SM gives another."""
    first = workload(sm_pct, membw_pct, DEFAULT_PARAMS)
    assert workload(sm_pct, membw_pct, DEFAULT_PARAMS) is first
    other = msgspec.structs.replace(DEFAULT_PARAMS, membw_per_sm=DEFAULT_PARAMS.membw_per_sm / 2)
    if membw_pct is None and sm_pct >= 1.0:
        assert workload(sm_pct, None, other).membw == first.membw / 2


def test_a_gpu_joined_by_a_tenant_is_what_replace_makes() -> None:
    mig = (MigSlice("MIG-a", "3g.20gb", 20 * GIB, 3, busy=True),)
    gpu = GpuState(
        2,
        "GPU-2",
        40 * GIB,
        "NVIDIA A100-SXM4-40GB",
        1 * GIB,
        40.0,
        tenants=(Tenant(7, "mps", 4 * GIB, 30.0),),
        mps_usable=True,
        mig_enabled=True,
        mig_slices=(MigSlice("MIG-a", "3g.20gb", 20 * GIB, 3),),
        mig_dynamic=True,
        placed_s_ago=90.0,
    )
    assert gpu.free_mib < 40 * GIB and gpu.idle is False  # kept by _memo: not to be copied
    tenant = Tenant(8, "mps", 2 * GIB, 10.0, uid=1000)
    joined = gpu.joined(tenant, mig)
    assert joined == replace(gpu, tenants=(*gpu.tenants, tenant), mig_slices=mig, placed_s_ago=0.0)
    assert joined.free_mib == gpu.free_mib - 2 * GIB
    assert [f.name for f in fields(GpuState)] == [f.name for f in fields(joined)]


MEMOS = ("idle", "exclusive", "tenant_modes", "mps_uid", "heaviest_tenant_sm_pct", "free_mib")
joining_tenants = st.lists(
    st.tuples(
        st.sampled_from(["mps", "naive", "exclusive", "mig"]),
        st.sampled_from([0, 0.0, 5, 30.0, 70.0, 90]),
        st.sampled_from([None, 1000, 1001]),
        st.sets(st.sampled_from(MEMOS)),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(joining_tenants)
def test_what_a_joined_gpu_carries_forward_is_what_it_would_work_out(
    joins: list[tuple[str, float, int | None, set[str]]],
) -> None:
    """`GpuState.joined` carries forward what `_memo` kept where one more tenant changes it
    by a step of the same rule: each is what a state made afresh gives, to the type (an int SM
    stays an int), whichever were asked of the states before."""
    gpu = GpuState(0, "GPU-0", 40 * GIB, memory_used_mib=GIB, mps_usable=True)
    for number, (mode, sm, uid, asked) in enumerate(joins):
        for name in asked:  # what the pass asked of this state before a job joined it
            getattr(gpu, name)
        gpu = gpu.joined(Tenant(number, mode, 2 * GIB, sm, uid=uid), ())
        fresh = replace(gpu)  # the same fields, nothing kept
        for name in MEMOS:
            carried, worked_out = getattr(gpu, name), getattr(fresh, name)
            assert carried == worked_out and type(carried) is type(worked_out), name


@settings(max_examples=300, deadline=None)
@given(
    tenants,
    st.floats(0.0, 100.0, allow_nan=False),
    st.floats(0.0, 100.0, allow_nan=False),
    st.sampled_from(["mps", "naive"]),
)
def test_a_heavier_job_never_gains_more_beside_the_same_tenants(
    loads: list[Workload], sm_a: float, sm_b: float, mechanism: str
) -> None:
    """What lets placement skip the model for a job at least as heavy (in SM, bandwidth
    following SM) as one that gained nothing on the same GPU state (`_Host.gainless_sm`)."""
    light, heavy = sorted((sm_a, sm_b))
    joining = Joining(DEFAULT_PARAMS, mechanism, loads)
    assert (
        joining(workload(heavy, None, DEFAULT_PARAMS)).gain
        <= joining(workload(light, None, DEFAULT_PARAMS)).gain
    )


# --------------------------------------------------------------- held GPUs (bounded backfill)
GIB = 1024.0


def _job(job_id: int, gpus: int, memory_gb: float, sm_pct: float) -> JobRecord:
    spec = JobSpec(
        name=f"j{job_id}", command=("true",), gpus=gpus, memory_gb=memory_gb, sm_pct=sm_pct
    )
    return JobRecord(job_id, spec, JobState.QUEUED, 0.0, None, None, 0, None, None, False)


def _gpu(index: int, *sms: float, **kw: Any) -> GpuState:
    tenants = tuple(Tenant(100 + index * 10 + i, "mps", 4 * GIB, sm) for i, sm in enumerate(sms))
    return GpuState(index, f"GPU-{index}", 40 * GIB, tenants=tenants, mps_usable=True, **kw)


def _station(*gpus: GpuState, repartition: bool = False) -> StationView:
    return StationView(
        StationConfig(slots=2, mig_repartition=repartition),
        cores=8,
        backend="sim:x",
        gpu_states=gpus,
        simulated=True,
    )


SLICES = (MigSlice("MIG-a", "3g.20gb", 20096, 3), MigSlice("MIG-b", "1g.5gb", 4864, 1))


def test_a_waiting_multi_gpu_job_is_not_held_a_mig_gpu_it_can_never_use() -> None:
    """GPU 3 is in MIG mode with a fixed layout: a two-GPU job can never run on it. Holding it
    for that job (it was the least loaded) kept its slices idle and left only one GPU held,
    so GPU 1 went on taking new jobs and the two-GPU job waited until some other GPU happened
    to drain (on the Philly trace, GPU 3's slices sat idle for 4 hours and the first two-GPU
    job started 72 minutes later than under CARMA). The job is held the two least-loaded
    GPUs it can run on; the light job behind it goes to GPU 3's slice or GPU 0."""
    view = _station(
        _gpu(0, 70.0, 30.0),
        _gpu(1, 30.0),
        _gpu(2, 10.0),
        GpuState(3, "GPU-3", 40 * GIB, mig_enabled=True, mig_slices=SLICES),
    )
    two_gpu, light = _job(1, 2, 10.0, 70.0), _job(2, 1, 2.0, 10.0)
    decision = SharingPolicy("auto").place([two_gpu, light], view)
    (placed,) = decision.placements
    assert placed.job_id == 2
    assert placed.gpus[0] not in (1, 2), placed.slot  # held for the two-GPU job


def test_a_mig_gpu_is_never_held_for_a_whole_gpu_job_even_where_it_may_be_recarved() -> None:
    # repartitioning gives a MIG-mode GPU new slices; it never toggles MIG mode, so a two-GPU
    # job can never run on GPU 2. A one-GPU job of 30 GB may: a 7g.40gb can be carved for it.
    view = _station(
        _gpu(0, 70.0, 30.0),
        _gpu(1, 30.0, 30.0),
        GpuState(2, "GPU-2", 40 * GIB, mig_enabled=True, mig_slices=SLICES),
        repartition=True,
    )
    assert SharingPolicy("auto").reserve(_job(1, 2, 10.0, 70.0), view) == {0, 1}
    assert SharingPolicy("auto").reserve(_job(1, 1, 30.0, 30.0), view) == {2}


def test_a_one_gpu_job_is_held_a_mig_gpu_only_where_a_slice_holds_it() -> None:
    view = _station(
        _gpu(0, 70.0, 30.0), GpuState(1, "GPU-1", 40 * GIB, mig_enabled=True, mig_slices=SLICES)
    )
    policy = SharingPolicy("auto")
    assert policy.reserve(_job(1, 1, 30.0, 30.0), view) == {0}  # no slice holds 30 GB
    assert policy.reserve(_job(1, 1, 12.0, 30.0), view) == {1}  # the 3g.20gb slice does
