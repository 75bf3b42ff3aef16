"""The shortcuts of the placement hot path give exactly what the slow path gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudesk.engine.placement.interference import (
    DEFAULT_PARAMS,
    Joining,
    Workload,
    predict_join,
    workload,
)

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
