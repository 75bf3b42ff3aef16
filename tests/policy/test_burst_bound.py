"""bench/experiments/burst_bound.py's packing bound for a trace's last burst is a lower bound:
no policy the simulator has ends the bundled sweep day sooner, with its last GPU in MIG mode or
whole, under the model's defaults or the H100 calibration as the truth. (It says the sweep day
with a MIG GPU cannot reach 0.93 × CARMA's makespan: a wrong bound would say so wrongly.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from gpudesk.examples import folder
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import Simulation, load_trace, load_truth

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _experiment():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))  # it imports the judge's layouts
    spec = importlib.util.spec_from_file_location(
        "burst_bound", BENCH / "experiments" / "burst_bound.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["burst_bound"] = module  # (its dataclass looks itself up there)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("truth_file", [None, "calibrate-h100-8s.json"])
@pytest.mark.parametrize("layout", ["3=3g.20gb,2g.10gb,1g.5gb,1g.5gb", None])
def test_no_policy_ends_the_sweep_day_before_its_burst_bound(
    truth_file: str | None, layout: str | None
) -> None:
    experiment = _experiment()
    trace = load_trace(str(folder("traces") / "sweep-day-a100x4.json"))
    truth = load_truth(str(BENCH / "results" / truth_file)) if truth_file else DEFAULT_PARAMS
    bound = None
    for policy in experiment.POLICIES:
        sim = Simulation(trace, policy=policy, station=trace.sim_station, truth=truth, mig=layout)
        if bound is None:
            bound = experiment.burst_bound(sim)
            assert bound.jobs == 12 and bound.whole_gpus == (3 if layout else 4)
            if layout:  # what it is for: above LB's figure there, where LB is fluid
                assert bound.end_s > bound_of(sim).makespan_s
        assert sim.run().makespan_s >= bound.end_s, policy


def test_a_trace_of_many_classes_is_refused() -> None:
    experiment = _experiment()
    trace = load_trace(str(folder("traces") / "carma-philly-t1.json"))
    sim = Simulation(trace, policy="auto", station=trace.sim_station, truth=DEFAULT_PARAMS)
    with pytest.raises(ValueError, match="one workload class"):
        experiment.burst_bound(sim)
