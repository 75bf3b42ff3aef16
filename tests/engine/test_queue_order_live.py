"""`[station] queue_order = "shortest"` in a real engine (issue 39 item 5): once history says a
command family is short, a job of it waiting behind a long one goes first; without history, or
in submission order, the queue keeps its order. The run times are what the engine measured of
earlier runs (command-family history), not anything the job said."""

from __future__ import annotations

import sys

import pytest
from conftest import EngineHandle

from gpudesk.paths import Home


def job(name: str, seconds: float, marker: str) -> dict:
    # The family is the command without its numbers: `marker` keeps the two families apart.
    code = f"import time; time.sleep({seconds}); print('{marker}')"
    return {"name": name, "command": [sys.executable, "-c", code], "gpus": 0}


def started_order(engine: EngineHandle, ids: list[int]) -> list[int]:
    views = {i: engine.wait_state(i, "succeeded", timeout=60) for i in ids}
    return sorted(ids, key=lambda i: views[i].started_at or 0.0)


@pytest.mark.parametrize("order", ["shortest", "submission"])
def test_a_short_family_passes_a_long_one_only_in_shortest_order(home: Home, order: str) -> None:
    engine = EngineHandle(home)
    engine.start(slots=1, queue_order=order)
    try:
        # History: one run of each family, the long one measured longer.
        (short_once,) = engine.submit(job("short", 0.1, "short"))
        engine.wait_state(short_once, "succeeded", timeout=60)
        (long_once,) = engine.submit(job("long", 2.0, "long"))
        engine.wait_state(long_once, "succeeded", timeout=60)
        # One slot: a blocker runs while a long job and then a short one queue behind it.
        (blocker,) = engine.submit(job("blocker", 2.0, "block"))
        engine.wait_state(blocker, "running")
        long_job, short_job = engine.submit(job("long", 2.0, "long"), job("short", 0.1, "short"))
        first = started_order(engine, [long_job, short_job])[0]
    finally:
        engine.client.close()
    assert first == (short_job if order == "shortest" else long_job)
