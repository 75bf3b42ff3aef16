"""A multi-GPU job that could start now goes before a one-GPU job ahead of it, in a real engine
(gpudesk/policy/multi_first.py): on a simulated four-GPU station under `auto`, two long
compute-heavy jobs hold GPUs 0 and 1 and a two-GPU job GPUs 2 and 3; behind it wait a heavy
one-GPU job and then another two-GPU job. When the first two-GPU job ends, both its GPUs free at
once: the second two-GPU job takes them, where in queue order the one-GPU job would have taken
one and left the other idle, held, until a long job ended."""

from __future__ import annotations

import sys

from conftest import EngineHandle, wait_for


def sleeper(name: str, seconds: float, gpus: int = 1) -> dict:
    command = [sys.executable, "-c", f"import time; time.sleep({seconds})"]
    return {"name": name, "command": command, "gpus": gpus, "memory_gb": 10, "sm_pct": 90}


def test_the_freed_pair_goes_to_the_two_gpu_job_behind(sim_engine: EngineHandle) -> None:
    longs = sim_engine.submit(sleeper("long-0", 60), sleeper("long-1", 60))
    (pair,) = sim_engine.submit(sleeper("pair", 2, gpus=2))
    for job_id in (*longs, pair):
        sim_engine.wait_state(job_id, "running")
    one, two = sim_engine.submit(sleeper("one", 60), sleeper("two", 60, gpus=2))
    assert sim_engine.wait_all_done([pair], timeout=30)[0].state == "succeeded"
    sim_engine.wait_state(two, "running", timeout=15)
    assert sim_engine.show(two).attempts[0].placement.gpus == [2, 3]
    assert sim_engine.job(one).state == "queued"  # it takes the next GPU to drain
    sim_engine.client.request("cancel", jobs=[*longs, one, two], grace=0)


def test_show_names_the_gpus_held_for_a_waiting_job(sim_engine: EngineHandle) -> None:
    # each GPU's heavy job leaves too little memory for the light one beside it
    heavies = sim_engine.submit(*({**sleeper(f"heavy-{i}", 60), "memory_gb": 30} for i in range(4)))
    for job_id in heavies:
        sim_engine.wait_state(job_id, "running")
    (pair,) = sim_engine.submit(sleeper("pair", 5, gpus=2))
    light = {**sleeper("light", 5), "sm_pct": 20, "memory_gb": 20}
    (waiting,) = sim_engine.submit(light)
    # the two-GPU job is held for from its first wait; the light job is kept off those GPUs
    said = wait_for(
        lambda: (
            (text := sim_engine.show(waiting).waiting or "") and "held for job" in text and text
        ),
        10.0,
        what="show to name the held GPUs",
    )
    assert said.count(f"held for job {pair} (waiting ahead of it) until that one starts") == 2
    assert sim_engine.show(pair).waiting.count("held for it until it starts") == 2
    sim_engine.client.request("cancel", jobs=[*heavies, pair, waiting], grace=0)
