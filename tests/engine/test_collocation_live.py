"""Collocation in the live engine: real jobs placed by the `auto` policy on a simulated
station, out-of-memory deaths recovered, and the measured demand remembered."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle

from gpudesk.core.jobs import JobState
from gpudesk.core.mig_profiles import compute_slices
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.jobs import DemandView
from gpudesk.hw.mps import MpsManager
from gpudesk.hw.telemetry.backend import make_backend
from gpudesk.hw.telemetry.monitor import Monitor
from gpudesk.paths import Home
from gpudesk.policy.policies import make_policy
from gpudesk.policy.policy import GpuState, MigSlice, StationView
from gpudesk.profile import load_profile

FAKES = Path(__file__).resolve().parents[1] / "fakes"

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


@pytest.fixture
def engine(home: Home) -> Iterator[EngineHandle]:
    """A real engine on a simulated DGX Station A100 under the `auto` policy."""
    handle = EngineHandle(home)
    handle.start(backend=SIM, policy="auto", sample_interval=0.2)
    yield handle
    handle.client.close()  # `home` stops the engine


def test_idle_gpus_first_then_light_jobs_share_and_a_heavy_one_stays_alone(
    engine: EngineHandle,
) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(4)"]
    light = {"command": sleeper, "gpus": 1, "memory_gb": 4, "sm_pct": 20}
    ids = engine.submit(
        {"name": "heavy", "command": sleeper, "gpus": 1, "memory_gb": 20, "sm_pct": 90},
        *({"name": f"light-{i}", **light} for i in range(4)),
    )
    for job_id in ids:
        engine.wait_state(job_id, "running")
    placements = {i: engine.show(i).attempts[0].placement for i in ids}
    by_gpu: dict[int, list[int]] = {}
    for job_id, placement in placements.items():
        by_gpu.setdefault(placement.gpus[0], []).append(job_id)
    assert sorted(len(on) for on in by_gpu.values()) == [1, 1, 1, 2]  # one GPU shared
    heavy_gpu = placements[ids[0]].gpus[0]
    assert by_gpu[heavy_gpu] == [ids[0]]  # the light jobs share with each other, not it
    shared = next(on for on in by_gpu.values() if len(on) == 2)
    joined = placements[shared[1]]
    assert joined.mode == "mps"  # a simulated MPS server: no daemon is started
    assert "collocated on GPU" in joined.reason and "predicted speed" in joined.reason
    assert joined.alternatives[0].note == "chosen"
    assert {a.slot for a in joined.alternatives} >= {joined.slot, f"gpu:{heavy_gpu}/mps"}
    assert joined.demand == DemandView(
        memory_mib=4096,
        sm_pct=20.0,
        source="hint",
        exclusive=False,
    )
    events = [e.message for e in engine.show(shared[1]).events]
    assert any("collocated on GPU" in m for m in events)  # the reason is recorded
    assert all(j.state == "succeeded" for j in engine.wait_all_done(ids))


def test_an_out_of_memory_death_is_retried_alone_with_more_memory(engine: EngineHandle) -> None:
    (job_id,) = engine.submit(
        {
            "name": "oom",
            "command": [sys.executable, "-c", OOM_ONCE],
            "gpus": 1,
            "memory_gb": 2,
            "sm_pct": 30,
        }
    )
    (done,) = engine.wait_all_done([job_id])
    assert done.state == "succeeded" and done.attempts == 2
    shown = engine.show(job_id)
    first, second = shown.attempts
    assert first.exit_code == 1 and second.exit_code == 0
    assert second.placement.mode == "exclusive"
    assert second.placement.demand.memory_mib >= 1.5 * 2048
    assert "out-of-memory" in second.placement.reason
    messages = [e.message for e in shown.events]
    assert any("ran out of GPU memory (torch.OutOfMemoryError" in m for m in messages)


def test_other_failures_are_not_retried(engine: EngineHandle) -> None:
    (job_id,) = engine.submit(
        {"name": "bug", "gpus": 1, "command": [sys.executable, "-c", "raise SystemExit(3)"]}
    )
    (done,) = engine.wait_all_done([job_id])
    assert (done.state, done.attempts, done.exit_code) == ("failed", 1, 3)


def test_the_next_run_of_a_command_uses_what_the_last_one_measured(engine: EngineHandle) -> None:
    # The simulated memory fills in the 3 s after placement (ALLOCATION_S): the job outlives
    # that by 1.6 s, eight of the engine's 0.2-s samples, so that on a loaded machine a late
    # sample still sees it full (3.6 s left three, and the test ran with no other beside it)
    command = [sys.executable, "-c", "import time; time.sleep(4.6)"]
    (first,) = engine.submit({"name": "measure", "command": command, "gpus": 1})
    engine.wait_all_done([first])
    assert engine.show(first).attempts[0].placement.demand.source == "default"
    (second,) = engine.submit({"name": "measure", "command": command, "gpus": 1})
    engine.wait_all_done([second])
    demand = engine.show(second).attempts[0].placement.demand
    # the simulator gives a hint-less job 4 GiB plus a 512 MiB context
    assert demand.source == "history" and demand.memory_mib == 4608


def test_jobs_share_a_real_station_gpu_through_its_mps_server(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML (the faithful fake) and nvidia-cuda-mps-control (the faithful fake): the engine
    starts the GPU's MPS control daemon, gives each client its settings, stops it when the GPU
    drains."""
    scenario = tmp_path / "nvml.json"
    scenario.write_text(json.dumps({"gpus": [{"uuid": "GPU-mps-0", "memory_total_mib": 40960}]}))
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "nvml_shim"))
    monkeypatch.setenv("GPUDESK_FAKE_NVML", str(scenario))
    monkeypatch.setenv("GPUDESK_MPS_CONTROL", str(FAKES / "nvidia-cuda-mps-control"))
    engine = EngineHandle(home)
    engine.start(backend="nvml", policy="auto", sample_interval=0.2)
    show_env = (
        "import os, time; print(*(f'{k}={os.environ.get(k)}' for k in ("
        "'CUDA_VISIBLE_DEVICES', 'CUDA_MPS_PIPE_DIRECTORY', "
        "'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT')), "
        "sep='\\n', flush=True); time.sleep(1)"
    )
    try:
        ids = engine.submit(
            *(
                {
                    "name": f"mps-{i}",
                    "command": [sys.executable, "-c", show_env],
                    "gpus": 1,
                    "memory_gb": 4,
                    "sm_pct": 20,
                }
                for i in range(2)
            )
        )
        jobs = engine.wait_all_done(ids)
        assert all(j.state == "succeeded" for j in jobs)
        placements = [engine.show(i).attempts[0].placement for i in ids]
        assert [p.mode for p in placements] == ["mps", "mps"]
        second = Path(jobs[1].log).read_text()
        assert "CUDA_VISIBLE_DEVICES=GPU-mps-0" in second
        # no active-thread cap: it would outlive the co-tenant it was set for
        assert placements[1].mps_thread_pct is None
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=None" in second
        assert f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={placements[1].mps_memory_limit_mib}M" in second
        pipe = next(
            line.split("=", 1)[1]
            for line in second.splitlines()
            if line.startswith("CUDA_MPS_PIPE_DIRECTORY=")
        )
        assert Path(pipe, "control").exists()  # the control daemon is up
        status = engine.client.request("status")["station"]["mps"]
        assert status == {"available": True, "faults": []}
    finally:
        engine.stop()
        engine.client.close()
        MpsManager(home.root).stop_all()


def test_the_demo_profile_collocates_under_mps_and_on_mig_slices() -> None:
    """profiles/dgx-station-sweep.toml, placed by the real policy on its simulated station
    (the placement decision only: running the whole sweep is the README's demo)."""

    profile = load_profile(
        Path(__file__).resolve().parents[2] / "profiles" / "dgx-station-sweep.toml"
    )
    assert profile.station.backend == "sim:dgx-station-a100" and profile.station.policy == "auto"
    monitor = Monitor(make_backend(profile.station.backend, mig=profile.station.mig))
    view = monitor.ingest(monitor.collect())
    assert view.gpus[3].mig_enabled and len(view.gpus[3].mig_devices) == 3

    states = tuple(
        GpuState(
            g.index,
            g.uuid,
            g.memory_total_mib or 0.0,
            mps_usable=True,
            mig_enabled=bool(g.mig_enabled),
            mig_slices=tuple(
                MigSlice(m.uuid, m.profile, m.memory_total_mib or 0.0, compute_slices(m.profile))
                for m in g.mig_devices
                if m.uuid
            ),
        )
        for g in view.gpus
    )
    queue = [
        JobRecord(i + 1, spec, JobState.QUEUED, 0.0, None, None, 0, None, None, False)
        for i, spec in enumerate(profile.jobs)
    ]
    decision = make_policy("auto").place(
        queue,
        StationView(
            profile.station,
            cores=8,
            backend=profile.station.backend,
            simulated=True,
            gpu_states=states,
        ),
    )
    modes = {p.mode for p in decision.placements}
    assert {"mps", "mig"} <= modes and len(decision.placements) == len(queue)


def test_gpu_jobs_wait_for_the_first_reading_of_a_reconfigured_station(
    engine: EngineHandle,
) -> None:
    """A new MIG layout restarts telemetry; a job submitted at once must still see GPU 3's
    slices (before the first sample GPU 3 would look like a whole, idle GPU)."""
    engine.client.request(
        "configure",
        station={
            "backend": SIM,
            "policy": "auto",
            "sample_interval": 0.2,
            "mig": {"3": "3g.20gb,2g.10gb,2g.10gb"},
        },
    )
    busy = {"command": ["sleep", "30"], "gpus": 1, "memory_gb": 30, "sm_pct": 90}
    light = {"name": "light", "command": ["sleep", "30"], "gpus": 1, "memory_gb": 3, "sm_pct": 10}
    ids = engine.submit(*[{**busy, "name": f"busy{i}"} for i in range(3)], light)
    placed = engine.wait_state(ids[-1], "running")
    assert placed.slot.startswith("gpu:3/") and "g." in placed.slot, placed.slot
