"""A deterministic desk replay for snapshot tests: a SIMULATED DGX Station A100 (4 GPUs, the
last in MIG mode with three slices) running a sweep: jobs queued, held, running under MPS and on
MIG slices, finished, failed; one shared loader with two consumers. Every figure is fixed, so
the screens render the same on every run. Shaped like the engine's real replies (status, jobs,
telemetry, show, mig_plan)."""

from __future__ import annotations

import math
from typing import Any

from gpudesk.screens.feed import Frame, ReplayFeed

T0 = 1_790_000_000.0  # a fixed "now" (2026-09-21)
GPU_NAME = "NVIDIA A100-SXM4-40GB"
TOTAL_MIB = 40960.0


def _spec(
    gpus: int, memory: float | None, sm: float | None, priority: int = 0, dataset: str | None = None
) -> dict[str, Any]:
    return {
        "name": "",
        "command": ["python", "train.py"],
        "shell": False,
        "workdir": "/w",
        "gpus": gpus,
        "memory_gb": memory,
        "sm_pct": sm,
        "dataset": dataset,
        "priority": priority,
        "max_attempts": 1,
        "group": "sweep@demo",
    }


def _job(
    job_id: int,
    name: str,
    state: str,
    slot: str | None = None,
    started: float | None = None,
    ended: float | None = None,
    gpus: int = 1,
    memory: float | None = 8.0,
    sm: float | None = 40.0,
    energy: float | None = None,
    held: bool = False,
    priority: int = 0,
    exit_code: int | None = None,
    dataset: str | None = None,
) -> dict[str, Any]:
    spec = _spec(gpus, memory, sm, priority, dataset)
    spec["name"] = name
    usage = (
        None
        if energy is None
        else {
            "total_j": energy,
            "gpu_j": energy * 0.9,
            "cpu_j": energy * 0.1,
            "estimate": slot is not None and "/" in (slot or ""),
            "cpu_s": energy / 50,
            "carbon_g": energy / 3.6e6 * 475,
        }
    )
    return {
        "id": job_id,
        "name": name,
        "state": state,
        "group": "sweep@demo",
        "submitted_at": T0 - 900 + job_id,
        "started_at": started,
        "ended_at": ended,
        "attempts": 0 if state == "queued" else 1,
        "max_attempts": 1,
        "exit_code": exit_code,
        "reason": "exit code 1" if state == "failed" else None,
        "cancel_requested": False,
        "spec": spec,
        "slot": slot,
        "pgid": None,
        "log": f"/home/demo/.local/state/gpudesk/jobs/{job_id}/1/output.log"
        if state != "queued"
        else None,
        "held": held,
        "usage": usage,
    }


JOBS = [
    _job(1, "resnet-lr0.1", "succeeded", None, T0 - 880, T0 - 400, energy=412_000, exit_code=0),
    _job(2, "resnet-lr0.05", "failed", None, T0 - 870, T0 - 600, energy=98_000, exit_code=1),
    _job(
        3,
        "resnet-lr0.01",
        "running",
        "gpu:0/mps",
        T0 - 380,
        memory=12,
        sm=35,
        energy=61_000,
        dataset="images",
    ),
    _job(
        4,
        "vit-small-a",
        "running",
        "gpu:0/mps",
        T0 - 300,
        memory=9,
        sm=30,
        energy=44_000,
        dataset="images",
    ),
    _job(5, "vit-large", "running", "gpu:1", T0 - 600, memory=31, sm=85, energy=190_000),
    _job(6, "bert-ft-1", "running", "gpu:2/mps", T0 - 120, memory=6, sm=25, energy=12_000),
    _job(7, "dlrm-small", "running", "gpu:3/3g.20gb", T0 - 500, memory=14, sm=20, energy=33_000),
    _job(8, "mlp-sweep-3", "running", "gpu:3/2g.10gb", T0 - 200, memory=5, sm=15, energy=9_000),
    _job(9, "vit-small-b", "queued", gpus=1, memory=9, sm=30, priority=1),
    _job(10, "ablation-x", "queued", gpus=1, memory=18, sm=60, held=True),
    _job(11, "two-gpu-ddp", "queued", gpus=2, memory=30, sm=90),
    _job(12, "cpu-eval", "queued", gpus=0, memory=None, sm=None),
]

LOADER = {
    "name": "images",
    "pid": 4242,
    "running": True,
    "restarts": 0,
    "spec": {
        "name": "images",
        "factory": "gpudesk.workloads.images:make_dataset",
        "args": {"size": 1024},
        "batch_size": 32,
        "workers": 2,
        "seed": 0,
        "slots": 16,
        "shuffle": True,
    },
    "cpu_s": 84.2,
    "unshared_cpu_s": 166.9,
    "saved_cpu_s": 82.7,
    "status": {
        "name": "images",
        "pid": 4242,
        "stream": [3, 17],
        "batches_per_epoch": 32,
        "slots": 16,
        "slots_used": 5,
        "produced": 121,
        "makeups_produced": 9,
        "consumers_total": 2,
        "delivered_total": 240,
        "consumers": [
            {
                "pid": 5001,
                "batch_size": 32,
                "epoch": 3,
                "position": [3, 17],
                "delivered": 121,
                "batches_per_s": 41.3,
                "held_slots": 2,
                "makeups_left": 0,
            },
            {
                "pid": 5002,
                "batch_size": 64,
                "epoch": 2,
                "position": [3, 14],
                "delivered": 119,
                "batches_per_s": 20.6,
                "held_slots": 3,
                "makeups_left": 4,
            },
        ],
    },
}


def _gpu(
    index: int,
    step: int,
    used: float,
    sm: float,
    ka: float,
    power: float,
    energy: float,
    processes: list[dict[str, Any]],
    mig: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-SIM-{index}",
        "name": GPU_NAME,
        "lost": False,
        "memory_used_mib": used,
        "memory_total_mib": TOTAL_MIB,
        "kernel_active_pct": ka,
        "sm_activity_pct": sm,
        "power_w": power,
        "power_limit_w": 400.0,
        "energy_j": energy + step * power,
        "energy_source": "counter",
        "idle_power_w": 55.0,
        "temperature_c": 48.0,
        "sm_clock_mhz": 1410.0,
        "memory_clock_mhz": 1215.0,
        "mig_enabled": mig is not None,
        "mig_devices": mig or [],
        "processes": processes,
        "jobs": [],
        "unavailable": [],
    }


def _proc(pid: int, job_id: int, mib: float, sm: float | None = None) -> dict[str, Any]:
    return {"pid": pid, "used_memory_mib": mib, "sm_pct": sm, "mig_device": None, "job_id": job_id}


def telemetry(step: int) -> dict[str, Any]:
    wave = 0.5 + 0.5 * math.sin(step / 4.0)
    mig = [
        {
            "index": 0,
            "uuid": "MIG-SIM-3-0",
            "name": "MIG 3g.20gb",
            "gpu_instance_id": 1,
            "compute_instance_id": 0,
            "memory_used_mib": 14336.0,
            "memory_total_mib": 19968.0,
            "sm_count": 42,
            "processes": [_proc(7007, 7, 14336.0)],
        },
        {
            "index": 1,
            "uuid": "MIG-SIM-3-1",
            "name": "MIG 2g.10gb",
            "gpu_instance_id": 5,
            "compute_instance_id": 0,
            "memory_used_mib": 5120.0,
            "memory_total_mib": 9856.0,
            "sm_count": 28,
            "processes": [_proc(7008, 8, 5120.0)],
        },
        {
            "index": 2,
            "uuid": "MIG-SIM-3-2",
            "name": "MIG 2g.10gb",
            "gpu_instance_id": 6,
            "compute_instance_id": 0,
            "memory_used_mib": 0.0,
            "memory_total_mib": 9856.0,
            "sm_count": 28,
            "processes": [],
        },
    ]
    gpus = [
        _gpu(
            0,
            step,
            21504.0,
            round(55 + 20 * wave),
            round(78 + 10 * wave),
            255.0,
            1_100_000.0,
            [_proc(7003, 3, 12288.0, 35.0), _proc(7004, 4, 9216.0, 30.0)],
        ),
        _gpu(1, step, 31744.0, 84.0, 97.0, 372.0, 1_900_000.0, [_proc(7005, 5, 31744.0)]),
        _gpu(
            2,
            step,
            6144.0,
            round(20 + 10 * wave),
            round(40 + 10 * wave),
            120.0,
            600_000.0,
            [_proc(7006, 6, 6144.0)],
        ),
        _gpu(3, step, 19456.0, 31.0, 52.0, 160.0, 800_000.0, [], mig),
    ]
    jobs = [
        {
            "id": j["id"],
            "attempt_id": j["id"],
            "name": j["name"],
            "slot": j["slot"],
            "gpus": [],
            "runtime_s": None,
            "processes": 1,
            "cpu_pct": 95.0 - j["id"],
            "cpu_s": 100.0,
            "rss_mib": 2048.0,
            "io_read_mib": 1.0,
            "io_write_mib": 0.5,
            "gpu_memory_mib": (j["spec"]["memory_gb"] or 0) * 1024,
            "gpu_sm_pct": (j["spec"]["sm_pct"] or 0) * (0.8 + 0.2 * wave),
            "energy": j["usage"],
        }
        for j in JOBS
        if j["state"] == "running"
    ]
    return {
        "taken_at": T0 - 60 + step,
        "backend": "sim:dgx-station-a100",
        "simulated": True,
        "banner": None,
        "sampling_since": T0 - 1000,
        "host": {
            "cpu_pct": 37.0,
            "cores": 64,
            "memory_used_mib": 98304,
            "memory_total_mib": 515072,
            "load_avg": [12.4, 11.8, 10.2],
            "cpu_energy_j": None,
            "cpu_energy_note": None,
            "grid_g_per_kwh": 475.0,
            "gpu_energy_carbon_g": 580.0,
        },
        "gpus": gpus,
        "jobs": jobs,
    }


STATUS = {
    "pid": 999,
    "version": "0.1.0",
    "protocol": 1,
    "home": "/home/demo/.local/state/gpudesk",
    "started_at": T0 - 3600,
    "station": {
        "backend": "sim:dgx-station-a100",
        "policy": "auto",
        "slots": None,
        "sample_interval": 1.0,
        "grid_intensity": 475.0,
        "mig": {"3": "3g.20gb,2g.10gb,2g.10gb"},
        "effective_backend": "sim:dgx-station-a100",
        "simulated": True,
        "gpu_problem": None,
        "effective_slots": 64,
        "cores": 64,
        "gpus": 4,
        "mps": {"available": True, "faults": []},
    },
    "slots": {"total": 64, "busy": 0},
    "gpus": {"total": 4, "busy": 4, "lost": 0},
    "counts": {"queued": 4, "running": 6, "succeeded": 1, "failed": 1, "cancelled": 0},
    "loaders": [LOADER],
}

SHOW_3 = {
    "job": JOBS[2],
    "attempts": [
        {
            "number": 1,
            "state": "running",
            "placement": "gpu:0/mps",
            "pid": 7003,
            "started_at": T0 - 380,
            "ended_at": None,
            "exit_code": None,
            "signal": None,
            "reason": None,
            "log": JOBS[2]["log"],
        }
    ],
    "events": [
        {
            "id": 1,
            "ts": T0 - 890,
            "job_id": 3,
            "attempt": None,
            "kind": "job",
            "state": "queued",
            "message": "submitted",
        },
        {
            "id": 2,
            "ts": T0 - 381,
            "job_id": 3,
            "attempt": 1,
            "kind": "placement",
            "state": None,
            "message": "collocated on GPU 0 under mps: 27.5 GiB free for 12.0 GiB "
            "+ 2.0 GiB margin, SM demand 65% with its 1 tenant(s), measured 31%",
        },
        {
            "id": 3,
            "ts": T0 - 380,
            "job_id": 3,
            "attempt": 1,
            "kind": "job",
            "state": "running",
            "message": "attempt 1 started on gpu:0/mps",
        },
    ],
    "waiting": None,
    "usage": JOBS[2]["usage"],
}

MIG_PLAN = {
    "simulated": True,
    "plans": [
        {
            "gpu": 3,
            "mig_enabled": True,
            "current": ["3g.20gb", "2g.10gb", "2g.10gb"],
            "wanted": ["3g.20gb", "3g.20gb"],
            "slices": [{"profile": "3g.20gb", "jobs": [7]}, {"profile": "3g.20gb", "jobs": [10]}],
            "commands": [
                "nvidia-smi mig -i 3 -dci",
                "nvidia-smi mig -i 3 -dgi",
                "nvidia-smi mig -i 3 -cgi 9,9 -C",
                "nvidia-smi -L",
            ],
            "allowed": False,
            "reason": "GPU 3 is busy: jobs 7 and 8 run on its slices",
        },
    ],
}


def frames(count: int = 40) -> list[Frame]:
    out = []
    for step in range(count):
        snapshot = telemetry(step)
        out.append(
            Frame(
                status=STATUS,
                jobs=JOBS,
                telemetry=snapshot,
                energy_today_j={0: 5_400_000.0, 1: 7_900_000.0, 2: 2_100_000.0, 3: 3_300_000.0},
                progress={3: (2, 5), 4: (1, 5), 5: (7, 10), 7: (3, 3)},
                taken_at=snapshot["taken_at"],
            )
        )
    return out


def replay_feed(readonly_reason: str | None = None) -> ReplayFeed:
    return ReplayFeed(
        frames(), {"show:3": SHOW_3, "mig_plan": MIG_PLAN}, readonly_reason=readonly_reason
    )
