"""A memory hint is a hint, in the live engine on a simulated A100 40GB (issue 39): `submit
--gpus 1 --mem 40` runs rather than being refused; a job whose hint is taken as unknown starts
beside a tenant under an MPS limit of the room left and, when it runs out of memory there,
reruns alone; only a job that runs out of memory alone on the whole GPU fails, saying its
measured need is beyond every GPU."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_cli import gpudesk

from gpudesk.core.gpu_models import STATIONS
from gpudesk.paths import Home
from gpudesk.policy.policy import RESERVE_MIB

SIM = "sim:a100-40gb"  # one A100 40GB: 40,536 MiB as the card reports it
TOTAL_MIB = STATIONS["a100-40gb"][0].memory_total_mib
TORCH_OOM = (
    "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 39.39 GiB', flush=True); sys.exit(1)"
)
# Runs out of memory on its first attempt only (past the room it was given), then succeeds.
OOM_FIRST = f"import os, sys\nif os.environ['GPUDESK_ATTEMPT'] == '1':\n    {TORCH_OOM}\n"
OOM_ALWAYS = f"import sys\n{TORCH_OOM}\n"


@pytest.fixture
def engine(home: Home) -> Iterator[EngineHandle]:
    handle = EngineHandle(home)
    handle.start(backend=SIM, policy="auto", sample_interval=0.2)
    yield handle
    handle.client.close()  # `home` stops the engine


def test_submit_mem_40_on_a_40_gb_gpu_runs(engine: EngineHandle) -> None:
    result = gpudesk("submit", "--gpus", "1", "--mem", "40", "--", sys.executable, "-c", "pass")
    assert result.returncode == 0, result.stdout + result.stderr
    (job,) = engine.api.jobs()
    (done,) = engine.wait_all_done([job.id])
    assert done.state == "succeeded" and done.attempts == 1
    (attempt,) = engine.show(job.id).attempts
    assert attempt.placement.mps_memory_limit_mib == int(TOTAL_MIB - RESERVE_MIB)  # all of it
    assert "memory taken as unknown: its hint of 40.0 GiB is above what the largest GPU" in (
        attempt.placement.reason
    )
    shown = gpudesk("show", str(job.id))
    assert shown.returncode == 0 and "memory taken as unknown" in shown.stdout, shown.stdout


def test_past_the_room_it_got_it_reruns_alone_rather_than_being_lost(
    engine: EngineHandle, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    wait_gate = (
        f"import pathlib, time\nwhile not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.05)"
    )
    (tenant,) = engine.submit(
        {
            "name": "tenant",
            "command": [sys.executable, "-c", wait_gate],
            "gpus": 1,
            "memory_gb": 10,
            "sm_pct": 20,
        }
    )
    engine.wait_state(tenant, "running")
    (big,) = engine.submit(
        {
            "name": "big",
            "command": [sys.executable, "-c", OOM_FIRST],
            "gpus": 1,
            "memory_gb": 40,
            "sm_pct": 30,
        }
    )
    # beside the tenant under a limit of the room it left, then out of memory: back in the
    # queue for a GPU of its own, which it gets once the tenant is done
    first = wait_for(
        lambda: (a := engine.show(big).attempts) and a[0].exit_code is not None and a[0],
        20.0,
        what="the first attempt to run out of memory",
    )
    assert engine.job(big).state == "queued"  # for a GPU of its own: the tenant holds it
    placement = first.placement
    assert placement.mode == "mps" and tuple(placement.gpus) == (0,)
    room = TOTAL_MIB - 10 * 1024 - RESERVE_MIB
    assert placement.mps_memory_limit_mib is not None
    assert placement.mps_memory_limit_mib <= int(room)
    assert "its co-tenants left free" in placement.reason
    gate.touch()
    done = {j.id: j for j in engine.wait_all_done([tenant, big])}
    assert done[big].state == "succeeded" and done[big].attempts == 2
    second = engine.show(big).attempts[1].placement
    assert second.mode == "exclusive" and "out-of-memory death it runs alone" in second.reason


def test_out_of_memory_alone_on_the_whole_gpu_is_a_clear_failure(engine: EngineHandle) -> None:
    (job,) = engine.submit(
        {"name": "huge", "command": [sys.executable, "-c", OOM_ALWAYS], "gpus": 1, "memory_gb": 40}
    )
    (done,) = engine.wait_all_done([job])
    # alone under an MPS limit, then alone on the whole GPU: measured beyond it, not retried
    assert done.state == "failed" and done.attempts == 2
    modes = [a.placement.mode for a in engine.show(job).attempts]
    assert modes == ["mps", "exclusive"]
    assert "its need, measured, is beyond every GPU of this station" in (done.reason or "")


def test_show_says_why_a_job_with_an_unknown_hint_waits(
    engine: EngineHandle, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    wait_gate = (
        f"import pathlib, time\nwhile not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.05)"
    )
    (tenant,) = engine.submit(
        {
            "name": "tenant",
            "command": [sys.executable, "-c", wait_gate],
            "gpus": 1,
            "memory_gb": 35,
            "sm_pct": 20,
        }
    )
    engine.wait_state(tenant, "running")
    (big,) = engine.submit({"name": "big", "command": ["true"], "gpus": 1, "memory_gb": 40})
    waiting = wait_for(lambda: engine.show(big).waiting, 10.0, what="a waiting reason")
    assert "memory taken as unknown: its hint of 40.0 GiB is above what the largest GPU" in str(
        waiting
    )
    assert "reruns alone if it runs out of memory" in str(waiting)
    gate.touch()
    done = {j.id: j for j in engine.wait_all_done([tenant, big])}
    assert done[big].state == "succeeded"
