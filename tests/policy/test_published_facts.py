"""The published facts the interference model and `auto` are built on, as checks on one
simulated A100 40GB (../shared/design.md): the collocation study's ordering for small jobs,
"a compute-heavy job gains nothing", the seed's DLRM + ResNet152 pair, and idle GPUs first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpudesk.policy.simulator import SimResult, Simulation, load_trace

GB = 1024.0  # trace memory is in MB as the CARMA material gives it; hints say GB meaning GiB


def run(tmp_path: Path, jobs: list[dict[str, Any]], policy: str, **options: Any) -> SimResult:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"name": "facts", "station": "a100-40gb", "jobs": jobs}))
    options.setdefault("station", "sim:a100-40gb")
    return Simulation(load_trace(path), policy=policy, **options).run()


def job(i: int, minutes: float, sm: float, peak_gb: float, **extra: Any) -> dict[str, Any]:
    return {
        "id": i,
        "arrival_s": 0,
        "task": f"job{i}",
        "exclusive_minutes": minutes,
        "peak_memory_mb": peak_gb * GB,
        "estimate_gpumemnet_mb": peak_gb * GB,
        "sm_pct": sm,
        **extra,
    }


def test_four_small_jobs_finish_mps_then_mig_then_naive_then_exclusive(tmp_path: Path) -> None:
    small = [job(i, 60, 10, 2) for i in range(1, 5)]
    makespan = {
        mode: run(tmp_path, small, mode, estimator="measured").makespan_s
        for mode in ("mps", "mig", "naive", "exclusive")
    }
    assert makespan["mps"] < makespan["mig"] < makespan["naive"] < makespan["exclusive"]
    # MPS: four at 0.88 (three co-tenants at 4 % each); exclusive: one after the other
    assert abs(makespan["mps"] - 3600 / 0.88) < 5
    assert abs(makespan["exclusive"] - 4 * 3600) < 5


def test_two_compute_heavy_jobs_are_never_collocated(tmp_path: Path) -> None:
    heavy = [job(1, 60, 82, 8.47), job(2, 60, 82, 8.47)]
    result = run(tmp_path, heavy, "auto", estimator="measured")
    assert result.makespan_s >= 2 * 3600 - 5  # one after the other: sharing gains nothing
    assert result.modes == {"mps": 2}  # each alone on the GPU, as an MPS client


def test_dlrm_and_resnet152_with_known_peaks_share_almost_for_free(tmp_path: Path) -> None:
    # One DLRM training block (5.36 h, 5 % SM, 29.14 GB) beside five ResNet152 epochs
    # (5 x 1.05 h, 82 % SM, 8.47 GB): the seed measured +5 % / +4 % under MPS.
    pair = [job(1, 5.36 * 60, 5, 29.14, model="DLRM"), job(2, 5.25 * 60, 82, 8.47)]
    shared = run(tmp_path, pair, "auto", estimator="measured")
    sequential = (5.36 + 5.25) * 3600
    assert shared.makespan_s <= 0.6 * sequential
    assert shared.oom_crashes == 0
    # with an estimator's guess the 2 GiB margin keeps them apart
    guessed = run(tmp_path, pair, "auto")
    assert guessed.makespan_s > 0.9 * sequential


def test_four_light_jobs_on_four_idle_gpus_go_one_per_gpu(tmp_path: Path) -> None:
    light = [job(i, 30, 30, 4) for i in range(1, 5)]
    result = run(tmp_path, light, "auto", station="sim:a100-40gbx4", estimator="measured")
    assert abs(result.makespan_s - 1800) < 5  # nobody shared: each ran at full speed


def test_on_a_mig_heavy_trace_repartitioning_beats_a_fixed_layout() -> None:
    trace = load_trace(Path(__file__).resolve().parents[2] / "traces" / "mig-heavy-t1.json")
    layout = "0=7g.40gb,1=7g.40gb"  # one whole-GPU instance each: one light job at a time
    fixed, recarved = (
        Simulation(
            trace, policy="auto", station="sim:a100-40gbx2", mig=layout, mig_repartition=again
        ).run()
        for again in (False, True)
    )
    assert recarved.makespan_s < 0.6 * fixed.makespan_s and recarved.repartitions > 0
    # GPUs in MIG mode run jobs on slices only (MIG mode is never toggled)
    assert set(fixed.modes) == set(recarved.modes) == {"mig"}
    assert fixed.lost == recarved.lost == 0
