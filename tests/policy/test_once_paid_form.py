"""The once-paid form (`policy/once_paid_form.py`): a simulated truth whose cost of sharing a
GPU is paid once, not per co-tenant, as an H200's groups of 2-8 copies of one job measured
(bench/results/h200-2026-12-04c/scaling), so a run shows how `auto` fares where many tenants cost
less than its model expects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_simulator import write_trace

from gpudesk.policy.interference import DEFAULT_PARAMS, Workload, shared_rates
from gpudesk.policy.once_paid_form import ONCE_PAID, once_paid_rates
from gpudesk.policy.simulator import Simulation, load_trace

LIGHT = Workload(0.02, 0.0)  # the H200's launch-bound MLP: 2 % SM alone
RESNET = Workload(0.32, 0.08)


def test_a_pair_is_the_products_form_and_eight_light_tenants_pay_the_cost_once() -> None:
    for mechanism in ("mps", "naive"):
        for pair in ([LIGHT, RESNET], [RESNET, RESNET]):
            assert once_paid_rates(DEFAULT_PARAMS, mechanism, pair) == shared_rates(
                DEFAULT_PARAMS, mechanism, pair
            )
        assert once_paid_rates(DEFAULT_PARAMS, mechanism, [RESNET]) == [1.0]
    eight = [LIGHT] * 8
    cost = DEFAULT_PARAMS.mps_tenant_cost
    assert once_paid_rates(DEFAULT_PARAMS, "mps", eight) == pytest.approx([1.0 - cost] * 8)
    # the product's form: seven co-tenants at the cost each (the H200 measured 0.92-0.98 each)
    assert shared_rates(DEFAULT_PARAMS, "mps", eight) == pytest.approx([1.0 - 7 * cost] * 8)
    # past a full GPU the share and the contention are the product's: only the cost differs
    crowded = [RESNET] * 8
    ratio = (
        once_paid_rates(DEFAULT_PARAMS, "mps", crowded)[0]
        / shared_rates(DEFAULT_PARAMS, "mps", crowded)[0]
    )
    assert ratio == pytest.approx((1.0 - cost) / (1.0 - 7 * cost))


def test_the_simulator_runs_its_groups_at_the_once_paid_rates(tmp_path: Path) -> None:
    """Four 30-minute jobs of 10 % SM under MPS on one H100: each at 1 - cost with the cost paid
    once, 1 - 3 x cost in the product's form."""
    trace = load_trace(write_trace(tmp_path, [{"sm_pct": 10, "membw_pct": 0}] * 4))
    finished = {}
    for form in (None, ONCE_PAID):
        sim = Simulation(trace, policy="mps", station="sim:h100", truth_form=form, learn=False)
        sim.run()
        finished[form] = max(r.finished_at or 0.0 for r in sim.runs)
    cost = DEFAULT_PARAMS.mps_tenant_cost
    assert finished[None] == pytest.approx(1800 / (1.0 - 3 * cost), rel=1e-6)
    assert finished[ONCE_PAID] == pytest.approx(1800 / (1.0 - cost), rel=1e-6)


def test_gpudesk_simulate_takes_it_by_name_and_says_so(tmp_path: Path) -> None:
    path = write_trace(tmp_path, [{"sm_pct": 10, "membw_pct": 0}] * 3)
    command = [sys.executable, "-m", "gpudesk", "simulate", str(path), "-p", "mps,auto"]
    done = subprocess.run(
        [*command, "--truth-form", "once-paid", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["truth_form"] == "once-paid"
    refused = subprocess.run(
        [*command, "--truth-form", "once-paid", "--lower-bound"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "model's own form only" in refused.stderr
    assert "Traceback" not in refused.stderr
