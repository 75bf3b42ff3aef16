"""How long requests hold the engine's one loop (issue 36), end to end: a real engine counts
each request it answers, by op and caller, in the `status` reply and in `gpudesk engine status`."""

from __future__ import annotations

import os

import pytest
from conftest import EngineHandle, Run, wait_for

from gpudesk.api.client import Client
from gpudesk.api.errors import EngineError
from gpudesk.api.models import LoopTurns
from gpudesk.core import protocol
from gpudesk.metrics.loop_timing import WINDOW


def test_status_carries_the_loops_times_and_counts_each_request(engine: EngineHandle) -> None:
    with Client.attach(engine.home, timeout=10.0) as client:
        before = client.status().loop
        assert before is not None
        for _ in range(5):
            client.ping()
        client.jobs()
        # an op the engine does not know is counted too, under one label (the raw wire: the
        # typed client has no method for it)
        with pytest.raises(EngineError) as refused:
            engine.client.request("no-such-op")
        assert refused.value.code == protocol.UNKNOWN_OP
        after = client.status().loop
    assert after is not None
    # the status request that read `before`, 5 pings, a jobs, the unknown op
    assert after.requests >= before.requests + 8
    assert after.window == min(after.requests, WINDOW)
    assert after.p50_ms is not None and after.p99_ms is not None and after.max_ms is not None
    assert 0 <= after.p50_ms <= after.p99_ms <= after.max_ms
    assert after.slowest and all(r.uid == os.getuid() for r in after.slowest)
    assert after.slowest[0].ms == after.max_ms
    assert {r.op for r in after.slowest} <= {"ping", "status", "jobs", "unknown", "submit"}
    # the loop's periodic steps turned at least once since start
    turns = wait_for(
        lambda: (loop := engine.api.status().loop) and loop.turns.turns and loop.turns,
        10.0,
        what="a turn of the loop's periodic steps",
    )
    assert isinstance(turns, LoopTurns) and turns.max_ms is not None
    assert turns.slowest[0].step in {
        "attempts",
        "containment",
        "schedule",
        "fairshare",
        "telemetry",
        "tracking",
        "slurm",
        "metrics",
        "learning",
        "family",
        "mps",
        "loaders",
        "logcap",
        "archive",
        "hooks",
        "home",
    }  # every step of Engine._steps: a loaded machine may make any one the slowest


def test_engine_status_prints_the_loops_line(engine: EngineHandle, gpudesk: Run) -> None:
    engine.api.ping()
    code, out, _ = gpudesk("engine", "status")
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("loop:")]
    assert " requests, p99 " in line and " ms, max " in line and "; turns p99 " in line
