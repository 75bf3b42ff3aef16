"""The loop's timing record stays bounded whatever the uptime and whatever op names clients
send, and its figures are the window's."""

from __future__ import annotations

import time

from gpudesk.core.wire.station import LoopRequest, LoopTurn
from gpudesk.metrics.loop_timing import BUCKETS_S, MAX_LABELS, OTHER, LoopTiming


def test_the_window_keeps_the_latest_requests_and_names_the_slowest() -> None:
    timing = LoopTiming(window=100)
    timing.request("jobs", 2.0, 1001)  # a stall, then pushed out of the window
    for i in range(200):
        timing.request("ping", 0.001 + i * 1e-6, 1000)
    timing.request("status", 0.040, 1002)
    summary = timing.summary()
    assert summary.requests == 202 and summary.window == 100
    assert summary.max_ms == 40.0
    assert summary.slowest[0] == LoopRequest(op="status", ms=40.0, uid=1002)
    assert all(r.op != "jobs" for r in summary.slowest)
    assert summary.p50_ms is not None and 1.0 < summary.p50_ms < 1.3
    # the histogram since start still has the stall: Prometheus sees every request
    by_op, _ = timing.histograms()
    jobs = dict(by_op)["jobs"]
    assert jobs.count == 1 and jobs.sum_s == 2.0
    assert jobs.cumulative[BUCKETS_S.index(1.0)] == 0 and jobs.cumulative[-1] == 1


def test_a_request_answered_within_anothers_hold_is_its_own_not_the_others() -> None:
    """A step whose posted reply lets its connection's next requests through: each of those is
    counted as its own op, and the step's own time is its hold less theirs (not both, twice)."""
    timing = LoopTiming()
    outer = timing.hold()
    time.sleep(0.01)
    for _ in range(2):
        inner = timing.hold()
        nested = timing.hold()  # a request answered within that one, in turn
        time.sleep(0.03)
        timing.held(nested, "status", 1001)
        timing.held(inner, "ping", 1001)
    timing.held(outer, "cancel", 1000)
    by_op = dict(timing.histograms()[0])
    assert by_op["status"].count == 2 and by_op["status"].sum_s >= 0.06
    assert by_op["ping"].count == 2 and by_op["ping"].sum_s < 0.01
    assert by_op["cancel"].count == 1 and 0.01 <= by_op["cancel"].sum_s < 0.06  # not 0.07+
    assert timing.summary().requests == 5


def test_no_request_yet_has_no_figures() -> None:
    summary = LoopTiming().summary()
    assert summary.requests == 0 and summary.window == 0
    assert summary.p50_ms is None and summary.p99_ms is None and summary.max_ms is None
    assert summary.slowest == [] and summary.turns.max_ms is None


def test_made_up_op_names_cannot_grow_the_labels() -> None:
    timing = LoopTiming(window=10)
    for i in range(1000):
        timing.request(f"op-{i}", 0.001, 1000)
    by_op, _ = timing.histograms()
    assert len(by_op) == MAX_LABELS
    assert dict(by_op)[OTHER].count == 1000 - (MAX_LABELS - 1)


def test_a_turn_is_its_steps_sum_and_names_its_slowest_step() -> None:
    timing = LoopTiming()
    timing.turn([("attempts", 0.001), ("schedule", 0.030), ("metrics", 0.002)])
    turns = timing.summary().turns
    assert turns.turns == 1 and turns.max_ms == 33.0
    assert turns.slowest == [LoopTurn(ms=33.0, step="schedule", step_ms=30.0)]
    _, by_step = timing.histograms()
    assert [name for name, _ in by_step] == ["attempts", "metrics", "schedule"]


def test_bucket_bounds_are_the_one_two_five_series_a_scrape_shows() -> None:
    from gpudesk.engine.activity import DECISION_BUCKETS_S

    # the decision times' and the loop's bounds, as they were written out before, and as a
    # scrape prints them (`le="0.00025"`, never 0.00025000000000000006)
    decisions = "0.0001 0.00025 0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1.0"
    assert " ".join(map(repr, DECISION_BUCKETS_S)) == decisions
    loop = "0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1.0 2.5 5.0 10.0"
    assert " ".join(map(repr, BUCKETS_S)) == loop
    # ends that are not on the series bound it all the same (it looped for ever past 2.5 < 3)
    from gpudesk.metrics.histogram import one_two_five

    assert one_two_five(0.0003, 3.0) == (
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
    )
