"""Collocation in the live engine: real jobs placed by the `auto` policy on a simulated
station, out-of-memory deaths recovered, and the measured demand remembered."""

from __future__ import annotations

import sys

from conftest import EngineHandle

from gpudesk.paths import Home

SIM = "sim:dgx-station-a100"
# Dies like torch does on its first attempt, then succeeds.
OOM_ONCE = (
    "import os, sys\n"
    "if os.environ['GPUDESK_ATTEMPT'] == '1':\n"
    "    print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 39.39 GiB', flush=True)\n"
    "    sys.exit(1)\n"
    "print('trained')\n"
)


def start(home: Home) -> EngineHandle:
    handle = EngineHandle(home)
    handle.start(backend=SIM, policy="auto", sample_interval=0.2)
    return handle


def test_light_jobs_share_a_gpu_and_a_heavy_one_gets_its_own(home: Home) -> None:
    engine = start(home)
    try:
        sleeper = [sys.executable, "-c", "import time; time.sleep(3)"]
        ids = engine.submit(
            {"name": "light-a", "command": sleeper, "gpus": 1, "memory_gb": 4, "sm_pct": 20},
            {"name": "light-b", "command": sleeper, "gpus": 1, "memory_gb": 4, "sm_pct": 20},
            {"name": "heavy", "command": sleeper, "gpus": 1, "memory_gb": 20, "sm_pct": 90},
        )
        for job_id in ids:
            engine.wait_state(job_id, "running")
        placements = [engine.show(i)["attempts"][0]["placement"] for i in ids]
        assert placements[0]["gpus"] == placements[1]["gpus"]  # packed together
        assert placements[1]["mode"] == "naive"  # no MPS server on a simulated station
        assert "collocated on GPU" in placements[1]["reason"]
        assert placements[2]["gpus"] != placements[0]["gpus"]
        assert placements[1]["demand"] == {"memory_mib": 4096, "sm_pct": 20.0,
                                           "source": "hint", "exclusive": False}
        events = [e["message"] for e in engine.show(ids[1])["events"]]
        assert any("collocated on GPU" in m for m in events)  # the reason is recorded
        assert all(j["state"] == "succeeded" for j in engine.wait_all_done(ids))
    finally:
        engine.stop()
        engine.client.close()


def test_an_out_of_memory_death_is_retried_alone_with_more_memory(home: Home) -> None:
    engine = start(home)
    try:
        (job_id,) = engine.submit({"name": "oom", "command": [sys.executable, "-c", OOM_ONCE],
                                   "gpus": 1, "memory_gb": 2, "sm_pct": 30})
        (done,) = engine.wait_all_done([job_id])
        assert done["state"] == "succeeded" and done["attempts"] == 2
        shown = engine.show(job_id)
        first, second = shown["attempts"]
        assert first["exit_code"] == 1 and second["exit_code"] == 0
        assert second["placement"]["mode"] == "exclusive"
        assert second["placement"]["demand"]["memory_mib"] >= 1.5 * 2048
        assert "out-of-memory" in second["placement"]["reason"]
        messages = [e["message"] for e in shown["events"]]
        assert any("ran out of GPU memory (torch.OutOfMemoryError" in m for m in messages)
    finally:
        engine.stop()
        engine.client.close()


def test_other_failures_are_not_retried(home: Home) -> None:
    engine = start(home)
    try:
        (job_id,) = engine.submit({"name": "bug", "gpus": 1,
                                   "command": [sys.executable, "-c", "raise SystemExit(3)"]})
        (done,) = engine.wait_all_done([job_id])
        assert (done["state"], done["attempts"], done["exit_code"]) == ("failed", 1, 3)
    finally:
        engine.stop()
        engine.client.close()


def test_the_next_run_of_a_command_uses_what_the_last_one_measured(home: Home) -> None:
    engine = start(home)
    try:
        command = [sys.executable, "-c", "import time; time.sleep(3.6)"]  # memory fills in 3 s
        (first,) = engine.submit({"name": "measure", "command": command, "gpus": 1})
        engine.wait_all_done([first])
        assert engine.show(first)["attempts"][0]["placement"]["demand"]["source"] == "default"
        (second,) = engine.submit({"name": "measure", "command": command, "gpus": 1})
        engine.wait_all_done([second])
        demand = engine.show(second)["attempts"][0]["placement"]["demand"]
        # the simulator gives a hint-less job 4 GiB plus a 512 MiB context
        assert demand["source"] == "history" and demand["memory_mib"] == 4608
    finally:
        engine.stop()
        engine.client.close()
