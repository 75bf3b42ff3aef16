"""Preemption on a full station, SIMULATED (issue 39, docs/preemption.md): one H100 80GB, a long
low-priority preemptible job that fills it, and short high-priority jobs arriving through the
day. The same trace replayed with the engine's preemption rule (gpudesk.policy.preemption) and
without it; each short job's start delay and slowdown (its completion time over its run time
alone), and the long job's own completion.

    python bench/preemption.py [--checkpoint-s 60] [--write-trace PATH]

The trace is SYNTHETIC and ours: an 8-hour pre-training run (60 GB, 95 % SM) submitted at
priority 0 and marked preemptible, saving a checkpoint in `--checkpoint-s` seconds (resuming is
taken to take as long); twelve 15-minute evaluation jobs (50 GB, 90 % SM: they cannot share the
GPU with it) at priority 10, one every 35 minutes from minute 30. The memory and SM figures are
assumptions chosen to make sharing impossible, which is the case preemption is for.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from gpudesk.policy.simulator import Simulation, load_trace

STATION = "sim:h100"
LONG_MIN = 480.0
SHORT_MIN = 15.0
SHORTS = 12
FIRST_SHORT_S = 1800.0
SHORT_GAP_S = 2100.0


def trace(checkpoint_s: float) -> dict[str, Any]:
    jobs: list[dict[str, Any]] = [
        {
            "id": 1,
            "arrival_s": 0,
            "task": "pretrain",
            "class": "heavy",
            "gpus": 1,
            "exclusive_minutes": LONG_MIN,
            "peak_memory_mb": 60000,
            "sm_pct": 95,
            "priority": 0,
            "preemptible": True,
            "checkpoint_s": checkpoint_s,
        }
    ]
    for k in range(SHORTS):
        jobs.append(
            {
                "id": 2 + k,
                "arrival_s": FIRST_SHORT_S + k * SHORT_GAP_S,
                "task": f"eval-{k + 1}",
                "class": "heavy",
                "gpus": 1,
                "exclusive_minutes": SHORT_MIN,
                "peak_memory_mb": 50000,
                "sm_pct": 90,
                "priority": 10,
            }
        )
    return {
        "name": "preempt-h100",
        "source": "SYNTHETIC (bench/preemption.py): one long preemptible job, short "
        "high-priority ones",
        "station": "h100",
        "jobs": jobs,
    }


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def replay(path: Path, preempt: bool) -> dict[str, float]:
    sim = Simulation(
        load_trace(path), policy="auto", station=STATION, estimator="measured", preempt=preempt
    )
    result = sim.run()
    shorts = [r for r in sim.runs if r.job.id != 1]
    (long_run,) = [r for r in sim.runs if r.job.id == 1]
    delays = [r.first_start - r.job.arrival_s for r in shorts]  # type: ignore[operator]
    slowdowns = [
        (r.finished_at - r.job.arrival_s) / r.job.exclusive_s  # type: ignore[operator]
        for r in shorts
    ]
    assert long_run.finished_at is not None and result.lost == 0
    return {
        "short_start_delay_mean_s": statistics.fmean(delays),
        "short_start_delay_max_s": max(delays),
        "short_slowdown_p95": p95(slowdowns),
        "long_jct_h": long_run.finished_at / 3600.0,
        "long_slowdown": long_run.finished_at / long_run.job.exclusive_s,
        "makespan_h": result.makespan_s / 3600.0,
        "mean_jct_min": result.mean_jct_s / 60.0,
        "preemptions": float(sim.preemptions),
        "preempted_class": float(result.placement_classes.get("preempted", 0)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint-s", type=float, default=60.0)
    parser.add_argument("--write-trace", type=Path, default=None)
    args = parser.parse_args(argv)
    data = trace(args.checkpoint_s)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.write_trace or Path(tmp) / "preempt-h100.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        rows = {"with preemption": replay(path, True), "without": replay(path, False)}
    keys = list(next(iter(rows.values())))
    print(f"SIMULATED: {STATION}, checkpoint {args.checkpoint_s:g} s")
    print(f"{'':28}" + "".join(f"{name:>18}" for name in rows))
    for key in keys:
        print(f"{key:28}" + "".join(f"{row[key]:>18.3f}" for row in rows.values()))
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
