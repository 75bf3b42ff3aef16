"""Learning on the station, the pure parts beside the intervals (policy/progress_intervals.py):
a MIG slice's size from a telemetry sample, a command's rate and steady SM share alone over its
runs (the same means the store keeps: tests/engine/test_learning.py), and what a shared
interval tells the learner given its tenants' steady SM shares."""

from __future__ import annotations

import pytest
from telemetry_views import gpu_view, mig_view, snapshot

from gpudesk.policy.interference import DEFAULT_PARAMS, Observation, Workload
from gpudesk.policy.progress_intervals import (
    AloneRate,
    CoTenant,
    Interval,
    Placed,
    Tenancy,
    alone_rate_after,
    slice_size,
    tenancies,
)

A100 = "NVIDIA A100-SXM4-40GB"
SAMPLE = snapshot(
    0.0,
    [
        gpu_view(0, name=A100),
        gpu_view(
            1, name=A100, mig_devices=[mig_view(0, "MIG-a", "3g.20gb"), mig_view(1, "MIG-b", None)]
        ),
    ],
)


def test_a_slices_size_is_read_from_the_latest_sample() -> None:
    assert slice_size(SAMPLE, 1, "MIG-a") == (3, 4)
    assert slice_size(SAMPLE, 1, "MIG-b") == (0, 0)  # a device the sample does not name
    assert slice_size(SAMPLE, 0, "MIG-a") == (0, 0)  # not on that GPU
    assert slice_size(None, 1, "MIG-a") == (0, 0)  # no sample yet


def test_a_commands_rate_alone_is_the_mean_over_its_runs() -> None:
    first = alone_rate_after(None, 10.0, 5.0)
    assert first == AloneRate(10.0, 1, 5.0)
    assert alone_rate_after(first, 20.0, 6.0) == AloneRate(15.0, 2, 6.0)


def test_a_commands_steady_sm_share_is_the_mean_over_the_runs_that_read_it() -> None:
    first = alone_rate_after(None, 10.0, 5.0, 60.0)
    assert first == AloneRate(10.0, 1, 5.0, 60.0, 1)
    unread = alone_rate_after(first, 20.0, 6.0)  # no SM activity reading in this run
    assert unread == AloneRate(15.0, 2, 6.0, 60.0, 1)
    assert alone_rate_after(unread, 30.0, 7.0, 80.0) == AloneRate(20.0, 3, 7.0, 70.0, 2)
    assert alone_rate_after(None, 10.0, 5.0) == AloneRate(10.0, 1, 5.0, None, 0)


def test_a_shared_interval_is_read_with_its_tenants_steady_sm_shares_or_not_at_all() -> None:
    shared = Interval(Tenancy(0, "mps", None, (CoTenant(2, 12), CoTenant(3, 13))), 100.0, 300.0)
    obs = shared.observation(5.0, [79.0, 33.0, 41.0], DEFAULT_PARAMS)
    assert obs == Observation(
        "mps",
        Workload(0.79, pytest.approx(0.395)),
        (Workload(0.33, pytest.approx(0.165)), Workload(0.41, pytest.approx(0.205))),
        pytest.approx(0.6),
    )
    # any tenant's unknown: the interval says nothing (its hint would stand in)
    assert shared.observation(5.0, [79.0, None, 41.0], DEFAULT_PARAMS) is None
    assert shared.observation(5.0, [None, 33.0, 41.0], DEFAULT_PARAMS) is None
    # on a MIG slice the job is the only tenant
    mig = Interval(Tenancy(0, "mig", "MIG-a", (), 3, 4), 100.0, 300.0)
    assert mig.observation(5.0, [None], DEFAULT_PARAMS) is None
    sliced = mig.observation(5.0, [40.0], DEFAULT_PARAMS)
    assert sliced is not None and (sliced.job.sm, sliced.compute_slices) == (0.4, 3)


def test_an_mps_client_beside_a_time_sliced_tenant_shows_time_slicing() -> None:
    """The MPS server is one context among the GPU's others: beside a time-sliced tenant its
    clients are time-sliced too, so their intervals there teach the switch cost, not MPS's
    (the simulated truth runs such a group time-sliced; read as MPS, a group at 0.9 said the
    MPS tenant cost was 0.10 where it was 0.15). MPS clients together, on another GPU, stay MPS;
    a MIG slice keeps its own."""
    found = tenancies(
        [
            Placed(1, 10, 0, "mps"),
            Placed(2, 20, 0, "mps"),
            Placed(3, 30, 0, "naive"),
            Placed(4, 40, 1, "mps"),
            Placed(5, 50, 1, "mps"),
            Placed(6, 60, 1, "mig", "MIG-a", 3, 4),
        ]
    )
    assert [found[i].mode for i in (1, 2, 3)] == ["naive", "naive", "naive"]
    assert found[1].others == (CoTenant(2, 20), CoTenant(3, 30))
    assert [found[i].mode for i in (4, 5, 6)] == ["mps", "mps", "mig"]
    assert found[4].others == (CoTenant(5, 50),) and found[6].others == ()
