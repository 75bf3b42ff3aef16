"""The queueing form (`policy/queueing_form.py`): a simulated truth in which the members of a
pair slow each other unequally, as measured pairs do, so a run can show how `auto` (which
predicts with one rate per GPU) holds up in such a world. Its fits come from
`bench/model_forms.py`; docs/calibration.md has the data."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_simulator import write_trace

from gpudesk.policy.interference import DEFAULT_PARAMS, Workload, shared_rates
from gpudesk.policy.once_paid_form import ONCE_PAID
from gpudesk.policy.queueing_form import FITS, FORMS, queueing_rates, truth_form
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import Simulation, load_trace

LIGHT, HEAVY = Workload(0.08, 0.0), Workload(0.70, 0.23)  # the H100 probes (docs/calibration.md)
STREAM = Workload(0.96, 0.95)  # never idle: the H200's memory stream


def test_a_light_job_beside_a_heavy_one_loses_more_than_the_heavy_one() -> None:
    for fit in FITS.values():
        light, heavy = queueing_rates(fit, DEFAULT_PARAMS, "mps", [LIGHT, HEAVY])
        assert light < heavy < 1.0
        # two alike get one rate, as in the product's form
        a, b = queueing_rates(fit, DEFAULT_PARAMS, "naive", [HEAVY, HEAVY])
        assert a == b < 1.0
    # the product's form gives the pair one rate
    one, other = shared_rates(DEFAULT_PARAMS, "mps", [LIGHT, HEAVY])
    assert one == other


def test_fitted_on_every_measured_pair_a_job_beside_a_never_idle_tenant_starves_under_mps() -> None:
    """The H200 measured 0.05-0.36 for a job beside the memory stream under MPS, 0.78-1.00 for
    the stream; time-sliced, 0.45-0.90 each (docs/calibration.md)."""
    resnet = Workload(0.45, 0.20)
    starved, stream = queueing_rates(FITS["all"], DEFAULT_PARAMS, "mps", [resnet, STREAM])
    assert starved < 0.45 and stream > 0.75
    sliced = queueing_rates(FITS["all"], DEFAULT_PARAMS, "naive", [resnet, STREAM])
    assert all(0.4 < r < 0.9 for r in sliced)


def test_alone_and_a_thread_cap_are_as_in_the_products_form() -> None:
    capped = Workload(0.6, 0.3, thread_cap=0.3)
    for mechanism in ("mps", "naive"):
        assert queueing_rates(FITS["h100"], DEFAULT_PARAMS, mechanism, [LIGHT]) == [1.0]
    assert queueing_rates(FITS["h100"], DEFAULT_PARAMS, "mps", [capped]) == shared_rates(
        DEFAULT_PARAMS, "mps", [capped]
    )


def test_a_truth_form_by_name() -> None:
    assert truth_form("current") is None
    assert truth_form("queueing-all") is FITS["all"]
    assert truth_form("once-paid") is ONCE_PAID
    assert FORMS == ("current", "queueing-h100", "queueing-all", "once-paid")
    with pytest.raises(ValueError, match="known: current, queueing-h100, queueing-all, once-paid"):
        truth_form("queueing-h200")


def test_the_simulator_runs_a_pair_at_unequal_rates_and_keeps_its_bound_to_its_own_form(
    tmp_path: Path,
) -> None:
    trace = load_trace(
        write_trace(tmp_path, [{"sm_pct": 8, "membw_pct": 0}, {"sm_pct": 70, "membw_pct": 23}])
    )
    # both 30 minutes of work alone, sharing one H100 under MPS from the start
    unequal = Simulation(trace, policy="mps", station="sim:h100", truth_form=FITS["h100"])
    unequal.run()
    light, heavy = (r.finished_at for r in sorted(unequal.runs, key=lambda r: r.job.id))
    assert light is not None and heavy is not None and heavy < light  # the light one lost more
    with pytest.raises(ValueError, match="model's own form only"):
        bound_of(unequal)
    equal = Simulation(trace, policy="mps", station="sim:h100")
    equal.run()
    light, heavy = (r.finished_at for r in sorted(equal.runs, key=lambda r: r.job.id))
    assert light == heavy
    assert bound_of(equal).makespan_s > 0
