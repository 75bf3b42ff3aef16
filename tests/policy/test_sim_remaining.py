"""The simulator gives placement each running job's remaining time as the engine would know it
(gpudesk/policy/sim_view.py, policy/remaining.py): from its progress lines where the trace says it
prints them, else from its model's finished runs, else unknown; so `auto`'s choice of the GPU to
hold for a waiting job by when it drains is judged as the engine makes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_simulator import write_trace

from gpudesk.policy.policy import StationView
from gpudesk.policy.simulator import Simulation, TraceError, load_trace, with_progress_lines

ONE, TWO = "sim:a100-40gb", "sim:a100-40gbx2"
Seen = tuple[float, StationView, dict[int, tuple[float, float]]]


def _views(sim: Simulation) -> list[Seen]:
    """Every view the policy was given, with its time and each running job's work done and
    current rate then (through the simulator's own pass hook)."""
    seen: list[Seen] = []
    place = sim._place

    def spy(view: StationView) -> object:
        state = {r.job.id: (r.work_done, r.segment.rate if r.segment else 0.0) for r in sim.running}
        seen.append((sim.now, view, state))
        return place(view)

    sim._place = spy  # type: ignore[method-assign]
    sim.run()
    return seen


def _tenant(view: StationView, job_id: int) -> tuple[float | None, float | None]:
    """Its remaining time as placement sees it, and the engine's own figure beside it."""
    for gpu in view.gpu_states:
        for t in gpu.tenants:
            if t.job_id == job_id:
                return t.remaining_s, t.measured_remaining_s
    raise AssertionError(f"job {job_id} is not running")


def test_a_job_printing_progress_tells_its_remaining_work_at_its_current_rate(
    tmp_path: Path,
) -> None:
    # two light jobs share one GPU; a third comes at 5 min. Job 1 prints progress: its
    # remaining time is its remaining work at its current rate; job 2 prints nothing and no
    # run of its model has finished: unknown
    trace = load_trace(
        write_trace(
            tmp_path,
            [{"progress": True}, {"exclusive_minutes": 60}, {"arrival_s": 300}],
        )
    )
    assert [j.progress for j in trace.jobs] == [True, False, False]
    view, state = next(
        (v, s) for t, v, s in _views(Simulation(trace, policy="auto", station=ONE)) if t == 300
    )
    work, rate = state[1]
    assert 0.0 < rate < 1.0  # it shares the GPU with job 2
    # from its progress; no run of its model has finished, so the engine has no figure of its own
    assert _tenant(view, 1) == (pytest.approx((30 * 60 - work) / rate), None)
    assert _tenant(view, 2) == (None, None)


def test_without_progress_a_job_is_known_by_its_models_finished_runs(tmp_path: Path) -> None:
    # job 1 (model m, 10 min) finishes alone; job 2, the same model, starts at 20 min: its
    # remaining time is the model's mean run time less how long it has run; job 3's model
    # never finished a run (unknown)
    trace = load_trace(
        write_trace(
            tmp_path,
            [
                {"model": "m", "exclusive_minutes": 10},
                {"model": "m", "arrival_s": 1200, "exclusive_minutes": 40},
                {"model": "n", "arrival_s": 1200, "sm_pct": 80},
                {"arrival_s": 1500},
            ],
        )
    )
    at, view = next(
        (t, v) for t, v, _ in _views(Simulation(trace, policy="auto", station=TWO)) if t == 1500
    )
    left = pytest.approx(600.0 - (at - 1200.0))
    assert _tenant(view, 2) == (left, left)  # from the history: the engine's figure itself
    assert _tenant(view, 3) == (None, None)


def test_progress_lines_for_every_job_and_a_bad_flag(tmp_path: Path) -> None:
    trace = with_progress_lines(load_trace(write_trace(tmp_path, [{}, {"arrival_s": 60}])))
    assert all(j.progress for j in trace.jobs)
    views = _views(Simulation(trace, policy="auto"))
    busy = [g for _, v, _ in views for g in v.gpu_states if g.tenants]
    assert busy and all(g.drains_in_s is not None for g in busy)
    with pytest.raises(TraceError, match="progress"):
        load_trace(write_trace(tmp_path, [{"progress": "yes"}]))
