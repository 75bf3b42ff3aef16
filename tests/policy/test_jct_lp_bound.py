"""bench/jct_lp_bound.py's mean-JCT program is a lower bound: no simulated run of the station
as given ends its jobs sooner on average, on the bundled traces and on random small ones (a
program that let a job run faster than alone, or lost a capacity row, would fail here), and it
is at least the mean run time alone; on the MIG-heavy day it is tighter than the SRPT server."""

from __future__ import annotations

import importlib.util
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from gpudesk.examples import folder, names
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.simulator import Simulation, load_trace
from gpudesk.policy.trace import Trace, TraceJob

pytest.importorskip("scipy", reason="the program is solved by SciPy's HiGHS (the test install)")

BENCH = Path(__file__).resolve().parents[2] / "bench"
PROGRAM = BENCH / "experiments" / "jct_lp_bound.py"
POLICIES = ("exclusive", "naive", "mps", "carma", "auto")


@pytest.fixture(scope="module")
def program(monkeypatch_module: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch_module.syspath_prepend(str(BENCH))  # its siblings: simulator_judge, quiet_pipe
    spec = importlib.util.spec_from_file_location("jct_lp_bound", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch_module.setitem(sys.modules, "jct_lp_bound", module)  # its dataclass needs it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _runs_above_the_bound(program: ModuleType, trace: Trace, mig: str | None, slot: float) -> float:
    """The program's figure, after checking every runnable policy's mean JCT is at least it."""
    sims = [
        Simulation(trace, policy=p, station=trace.sim_station, truth=DEFAULT_PARAMS, mig=mig)
        for p in POLICIES
    ]
    bound = program.mean_jct_program(sims[-1], slot).mean_jct_s
    assert bound >= bound_of(sims[-1]).mean_jct_s - 1e-6
    for sim in sims:
        result = sim.run()
        if result.lost or result.not_runnable is not None:
            continue  # it did less work, or ran a station other than the one given
        assert result.mean_jct_s >= bound - 1e-6, (trace.name, sim.policy_name, mig)
    return bound


@pytest.mark.parametrize("name", names("traces"))
def test_no_run_of_a_bundled_trace_beats_it(program: ModuleType, name: str) -> None:
    trace = load_trace(str(folder("traces") / name))
    for mig in (None, program.last_gpu_in_mig(trace.sim_station)):
        _runs_above_the_bound(program, trace, mig, program.SLOT_S)


def test_no_run_of_a_random_small_trace_beats_it(program: ModuleType) -> None:
    draw = random.Random(39)
    for case in range(6):
        jobs = tuple(
            TraceJob(
                i,
                f"j{i}",
                draw.uniform(0, 3600),
                2 if draw.random() < 0.15 else 1,
                draw.uniform(300, 5400),
                draw.uniform(500, 30_000),
                draw.choice((10.0, 30.0, 70.0, 90.0)),
                "medium",
                {},
            )
            for i in range(1, draw.randint(6, 14))
        )
        trace = Trace(f"random-{case}", "a100-40gbx2", jobs)
        mig = "1=3g.20gb,2g.10gb,1g.5gb,1g.5gb" if case % 2 else None
        _runs_above_the_bound(program, trace, mig, 60.0)


def test_it_is_tighter_than_the_srpt_server_where_jobs_overlap(program: ModuleType) -> None:
    trace = load_trace(str(folder("traces") / "mig-heavy-t1.json"))
    sim = Simulation(trace, policy="auto", station=trace.sim_station, truth=DEFAULT_PARAMS)
    bound = bound_of(sim)
    assert program.mean_jct_program(sim).mean_jct_s > 1.2 * bound.mean_jct_queue_s
