"""bench/experiments/gang_sharing.py measures what letting a multi-GPU job share its GPUs would
give `auto`; its figures are only worth reading if its truth does what it says: a gang beside a
tenant runs at the slower of its GPUs' time-sliced rates and slows the tenant, a gang alone
runs as fast as alone, and a trace without multi-GPU jobs plays out exactly as under `auto`."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from gpudesk.examples import folder
from gpudesk.policy.interference import DEFAULT_PARAMS
from gpudesk.policy.simulator import Simulation, load_trace
from gpudesk.policy.trace import Trace, TraceJob

BENCH = Path(__file__).resolve().parents[2] / "bench"
EXPERIMENT = BENCH / "experiments" / "gang_sharing.py"


@pytest.fixture(scope="module")
def experiment() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH))  # its siblings: simulator_judge, quiet_pipe
        spec = importlib.util.spec_from_file_location("gang_sharing", EXPERIMENT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        patch.setitem(sys.modules, "gang_sharing", module)
        spec.loader.exec_module(module)
        yield module


def _job(i: int, arrival: float, gpus: int, alone: float, sm: float) -> TraceJob:
    return TraceJob(i, f"j{i}", arrival, gpus, alone, 4_000.0, sm, "medium", {})


def _play(experiment: ModuleType, trace: Trace, share: str | None) -> Simulation:
    sim = Simulation(trace, policy="auto", station=trace.sim_station, truth=DEFAULT_PARAMS)
    sim.policy = experiment.GangAuto(share) if share else experiment.SharingPolicy("auto")
    with pytest.MonkeyPatch.context() as patch:
        if share:
            patch.setattr(experiment.simulator, "true_rates", experiment.gang_true_rates)
            patch.setattr(experiment.sim_preemption, "true_rates", experiment.gang_true_rates)
        sim.run()
    return sim


def test_a_gang_beside_a_tenant_runs_at_its_slowest_gpu_and_slows_the_tenant(
    experiment: ModuleType,
) -> None:
    # two A100s: a light one-GPU job for two hours on one, then a two-GPU job of an hour
    trace = Trace(
        "gang", "a100-40gbx2", (_job(1, 0.0, 1, 7200.0, 20.0), _job(2, 60.0, 2, 3600.0, 20.0))
    )
    plain, gang = _play(experiment, trace, None), _play(experiment, trace, "naive")
    plain_runs = {r.job.id: r for r in plain.runs}
    gang_runs = {r.job.id: r for r in gang.runs}
    # under auto the gang waits for the tenant's GPU; shared, it starts at its arrival
    assert plain_runs[2].first_start == pytest.approx(7200.0, abs=1.0)
    assert gang_runs[2].first_start == pytest.approx(60.0, abs=1.0)
    assert gang.policy.gangs >= 1
    # time-sliced on one of its GPUs, alone on the other: the slower GPU sets its pace
    gang_took = gang_runs[2].finished_at - gang_runs[2].first_start
    assert 3600.0 * 1.05 < gang_took < 3600.0 * 2.5
    # and the tenant it joined lost time too, against its two hours alone under auto
    assert plain_runs[1].finished_at == pytest.approx(7200.0, abs=1.0)
    assert gang_runs[1].finished_at > 7200.0 + 60.0


def test_a_gang_alone_runs_as_fast_as_alone(experiment: ModuleType) -> None:
    trace = Trace("alone", "a100-40gbx2", (_job(1, 0.0, 2, 3600.0, 70.0),))
    gang = _play(experiment, trace, "naive")
    run = gang.runs[0]
    assert run.finished_at - run.first_start == pytest.approx(3600.0, abs=1.0)


def test_a_trace_without_multi_gpu_jobs_plays_out_as_under_auto(experiment: ModuleType) -> None:
    trace = load_trace(str(folder("traces") / "sweep-day-a100x4.json"))
    plain, gang = _play(experiment, trace, None), _play(experiment, trace, "naive")
    assert [(r.job.id, r.first_start, r.finished_at) for r in plain.runs] == [
        (r.job.id, r.first_start, r.finished_at) for r in gang.runs
    ]
