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
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, wait_for

from gpudesk.paths import Home
from gpudesk.render import duration

FAKES = Path(__file__).resolve().parents[1] / "fakes"
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


def test_a_real_h200_with_mig_off_is_told_what_mig_would_cost(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpudesk: Run
) -> None:
    """A real station (NVML and nvidia-smi the faithful fakes: tests/fakes) with one H200 whose
    MIG mode is off, as the one lent to this project was: nothing is changed on it, and the plan
    says what the layout the queue would want on its table would cost the queue."""
    name, uuid = "NVIDIA H200", "GPU-5a3c1d2e-0000-4000-8000-000000000200"
    smi_state = tmp_path / "smi.json"
    gpu = {"name": name, "uuid": uuid, "pci_bus_id": "00000000:19:00.0", "mig_mode": "disabled"}
    smi_state.write_text(json.dumps({"root": True, "gpus": [{**gpu, "gpu_instances": []}]}))
    nvml = tmp_path / "nvml.json"
    nvml.write_text(
        json.dumps(
            {
                "follow_nvidia_smi": True,
                "gpus": [{"name": name, "uuid": uuid, "memory_total_mib": 143771}],
            }
        )
    )
    monkeypatch.setenv("GPUDESK_NVIDIA_SMI", str(FAKES / "nvidia-smi"))
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_STATE", str(smi_state))
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_LOG", str(tmp_path / "smi-calls.jsonl"))
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "nvml_shim"))
    monkeypatch.setenv("GPUDESK_FAKE_NVML", str(nvml))
    engine = EngineHandle(home)
    # exclusive: the blocker holds the GPU, the day's jobs stay queued for the plan
    engine.start(backend="nvml", sample_interval=0.2, policy="exclusive")
    try:
        (blocker,) = engine.submit(job("blocker", 8, 50))
        engine.wait_state(blocker, "running")
        engine.submit(
            job("lora", 38, 60), job("vit", 14, 85), *(job(f"light{i}", 2, 10) for i in range(6))
        )
        (plan,) = engine.api.mig_plan(0).plans
        assert (plan.simulated, plan.mig_enabled, plan.wanted) == (False, False, [])
        times = plan.queue_time
        assert times is not None and times.layout and times.costs_queue_time
        assert any("MIG mode is off" in note for note in times.notes)
        code, out, _ = gpudesk("mig", "plan")
        said = " ".join(out.split())
        assert code == 0 and f"queue time: {times.summary}" in said
        assert json.loads(smi_state.read_text())["gpus"][0]["mig_mode"] == "disabled"
    finally:
        engine.stop()
        engine.client.close()


def test_the_plans_replays_run_off_the_engines_loop(h100: EngineHandle) -> None:
    """Replaying the queue under a plan is the slow part of `mig_plan` (seconds for a long
    queue on several GPUs): it runs on a worker thread, so the loop, which answers every
    client, is held only for reading the GPUs and planning."""
    import time

    h100.submit(*(job(f"j{i}", 2 + i % 30, 10 + 3 * (i % 25)) for i in range(120)))
    started = time.perf_counter()
    (plan,) = h100.api.mig_plan(0).plans
    answered_s = time.perf_counter() - started
    assert plan.queue_time is not None  # the replay ran, and its result came back
    held = [r.ms for r in h100.api.status().loop.slowest if r.op == "mig_plan"]
    assert held, "the loop's slowest requests name mig_plan"
    # On the loop, the request would have held it for about as long as it took to answer.
    assert max(held) / 1000 < 0.5 * answered_s, (held, answered_s)
