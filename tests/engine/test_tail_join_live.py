"""The tail rule in a real engine (gpudesk/policy/tail_join.py): on a one-GPU simulated station
under `auto`, three members of a sweep share the GPU; a fourth, the last job queued, would cost
the station work per second with sharing's costs at the top of their range, so the robust rule
alone leaves it waiting. With the family's run time measured by the engine (a first member that
ran alone) and the tenants' remaining times from that history, it joins at once, and `show`
says why: it finishes before waiting for the GPU to drain would."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from conftest import EngineHandle

from gpudesk.paths import Home

RUN_S = 12  # each member's run: long enough that the tenants have most of theirs left


def member(lr: str) -> dict:
    command = [sys.executable, "-c", f"import time; time.sleep({RUN_S})", "--lr", lr]
    return {"name": f"lr-{lr}", "command": command, "gpus": 1, "memory_gb": 8, "sm_pct": 30}


@pytest.fixture
def engine(home: Home) -> Iterator[EngineHandle]:
    handle = EngineHandle(home)
    handle.start(backend="sim:a100-40gb", policy="auto", sample_interval=0.2)
    yield handle
    handle.client.close()  # `home` stops the engine


def test_the_last_job_joins_three_tenants_where_waiting_would_finish_it_later(
    engine: EngineHandle,
) -> None:
    (first,) = engine.submit(member("1"))  # the family's run time, measured alone
    assert engine.wait_all_done([first], timeout=60)[0].state == "succeeded"
    tenants = engine.submit(member("0.1"), member("0.01"), member("0.001"))
    for job_id in tenants:
        engine.wait_state(job_id, "running")
    (last,) = engine.submit(member("0.0001"))
    engine.wait_state(last, "running", timeout=RUN_S / 2)
    assert all(engine.job(t).state == "running" for t in tenants)  # it joined them
    placement = engine.show(last).attempts[0].placement
    assert placement.mode == "mps"
    assert "at the queue's tail" in placement.reason, placement.reason
    assert "before waiting for GPU 0 to drain and running alone" in placement.reason
    assert all(j.state == "succeeded" for j in engine.wait_all_done([*tenants, last], timeout=90))
