"""`gpudesk mig plan` on a one-GPU station says what the planned MIG layout costs the queue
against the whole GPU under MPS, with the figure (issue 39, item 7): a real daemon on a simulated
H100 in MIG mode (`sim:h100`, its whole-GPU 7g.80gb slice held by a running job, so the queue
stays queued and the plan is for it), queues like the issue's mixed day and like a day of small
light jobs. The figures are the simulator's replay of the queue (SIMULATED); the test checks the
engine's, the CLI's and the JSON's figures against each other and the verdict's direction, never
a number written down."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from conftest import EngineHandle, Run, wait_for

from gpudesk.paths import Home
from gpudesk.render import duration

SLEEP = ["sleep", "120"]  # killed by the home fixture's cleanup


def slices(engine: EngineHandle) -> list[str] | None:
    snapshot = engine.api.telemetry().snapshot
    return None if snapshot is None else [m.profile for m in snapshot.gpus[0].mig_devices]


@pytest.fixture
def h100(home: Home) -> Iterator[EngineHandle]:
    engine = EngineHandle(home)
    engine.start(backend="sim:h100", sample_interval=0.2, mig={"0": "7g.80gb"})
    wait_for(lambda: slices(engine) == ["7g.80gb"], what="the H100's MIG slice in telemetry")
    (blocker,) = engine.submit(
        {"name": "blocker", "command": SLEEP, "gpus": 1, "memory_gb": 70, "sm_pct": 100}
    )
    engine.wait_state(blocker, "running")
    yield engine
    engine.client.close()


def job(name: str, memory_gb: float, sm_pct: float) -> dict:
    return {"name": name, "command": SLEEP, "gpus": 1, "memory_gb": memory_gb, "sm_pct": sm_pct}


def test_a_mixed_day_is_told_mig_costs_it_queue_time(h100: EngineHandle, gpudesk: Run) -> None:
    queued = h100.submit(
        job("lora", 38, 60), job("vit", 14, 85), *(job(f"light{i}", 2, 10) for i in range(6))
    )
    (plan,) = h100.api.mig_plan(0).plans
    times = plan.queue_time
    assert times is not None and times.layout == plan.wanted and plan.wanted
    assert times.jobs == len(queued) and times.running_not_counted == 1
    assert times.run_time_unknown == len(queued)  # no history: each assumed, and said
    assert times.cost_s == pytest.approx(times.mig_s - times.mps_s)
    assert times.costs_queue_time and not times.recommended and times.cost_s > 0
    assert f"MIG costs the queue {duration(times.cost_s)}" in times.summary

    code, out, _ = gpudesk("mig", "plan", "--gpu", "0")
    said = " ".join(out.split())  # the plan wraps its paragraphs to the terminal
    assert code == 0
    assert f"queue time: {times.summary}" in said
    assert "not recommended for this queue" in said and "SIMULATED" in said
    assert "ASSUMED 24m00s alone" in said and "the 1 job(s) running on it now" in said
    code, out, _ = gpudesk("mig", "plan", "--json")
    assert code == 0
    shown = json.loads(out)["plans"][0]["queue_time"]
    assert shown["cost_s"] == pytest.approx(times.cost_s) and shown["recommended"] is False
    assert shown["mps_s"] == pytest.approx(times.mps_s)


def test_many_light_jobs_are_told_mig_saves_them_time(h100: EngineHandle, gpudesk: Run) -> None:
    """Jobs that barely use the GPU (5 % SM): by the model, the queue where 1g slices beat MPS."""
    h100.submit(*(job(f"light{i}", 2, 5) for i in range(14)))
    (plan,) = h100.api.mig_plan(0).plans
    times = plan.queue_time
    assert times is not None and times.layout == plan.wanted
    assert not times.costs_queue_time and times.recommended and times.cost_s < 0
    assert f"MIG saves the queue {duration(-times.cost_s)}" in times.summary
    code, out, _ = gpudesk("mig", "plan")
    said = " ".join(out.split())
    assert code == 0 and f"queue time: {times.summary}" in said
    assert "not recommended" not in said
