"""The queue order that lets short jobs through (gpudesk.policy.jct_order, `[station]
queue_order = "shortest"`): highest response ratio next within priority and fair share."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpudesk.policy.jct_order import response_ratio, shortest_first
from gpudesk.policy.simulator import Simulation, load_trace


@dataclass(frozen=True)
class Job:
    name: str
    expected: float | None
    waited: float
    priority: int = 0


def order(jobs: list[Job], group: bool = True) -> list[str]:
    ranked = shortest_first(
        jobs,
        lambda j: j.expected,
        lambda j: j.waited,
        (lambda j: (-j.priority,)) if group else (lambda j: ()),
    )
    return [j.name for j in ranked]


def test_a_short_job_passes_a_long_one_that_waited_as_long() -> None:
    assert order([Job("long", 3600, 60), Job("short", 60, 60)]) == ["short", "long"]


def test_a_long_job_that_waited_as_long_as_it_runs_goes_before_any_newcomer() -> None:
    # ratio 2 for the long job; a newcomer, however short, has ratio 1
    assert order([Job("new", 1, 0), Job("long", 3600, 3600)]) == ["long", "new"]
    assert response_ratio(3600, 3600) == 2.0 and response_ratio(0, 5) == 1.0


def test_no_job_starves_behind_a_stream_of_short_ones() -> None:
    """A long job among short ones arriving every minute: some newcomer goes first only while
    the long job's ratio is below theirs, and a waiting short job's ratio climbs fast; but the
    long one's climbs too, without bound, and it reaches the head within its own run time."""
    expected_long, short = 7200.0, 60.0
    for waited in range(0, 7201, 60):
        queue = [Job("long", expected_long, waited), Job("short", short, 30)]
        if order(queue)[0] == "long":
            break
    else:
        pytest.fail("the long job never reached the head of the queue")
    assert waited <= expected_long


def test_priority_stays_first_and_unknown_jobs_are_taken_as_typical() -> None:
    jobs = [Job("low-short", 10, 100, priority=0), Job("high-long", 9000, 0, priority=5)]
    assert order(jobs) == ["high-long", "low-short"]
    # no history: the median of the known (60 s) stands in, and the ratio decides
    jobs = [Job("a", 600, 0), Job("b", 60, 0), Job("c", None, 120)]
    assert order(jobs, group=False) == ["c", "a", "b"]  # c: (120 + 330) / 330; a, b: 1
    assert order([Job("x", None, 5), Job("y", None, 50)]) == ["x", "y"]  # none known: as given


def test_the_simulators_shortest_order_lowers_mean_jct_under_fifo() -> None:
    """SIMULATED, the H100 mixed day under fifo (one job per GPU: the queue is long): letting
    the short jobs through cuts the mean completion time; makespan is the same work."""
    from pathlib import Path

    trace = load_trace(
        Path(__file__).resolve().parents[2] / "gpudesk/examples/traces/h100-mixed-day.json"
    )
    base, shortest = (
        Simulation(trace, policy="fifo", station="sim:h100", queue_order=o).run()
        for o in ("submission", "shortest")
    )
    assert shortest.mean_jct_s < base.mean_jct_s
    assert shortest.makespan_s == pytest.approx(base.makespan_s, rel=0.05)


def test_the_station_setting_is_checked_by_name() -> None:
    from gpudesk.core.station import StationConfig

    assert StationConfig.from_dict({"queue_order": "shortest"}).queue_order == "shortest"
    assert StationConfig.from_dict({}).queue_order == "submission"
    with pytest.raises(ValueError, match=r"queue_order.*expected one of submission, shortest"):
        StationConfig.from_dict({"queue_order": "fastest"})
