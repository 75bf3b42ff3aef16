"""Write the SYNTHETIC MIG-heavy trace (`traces/mig-heavy-t1.json`): many light jobs.

    python bench/mig_heavy_trace.py traces/mig-heavy-t1.json

Seeded, so the file is the same each time. 60 one-GPU jobs arriving every 45 s on average: 80 %
light (10 % SM, 1-4 GB peak, 10-40 min alone), 20 % medium (30 % SM, 6-14 GB, 20-60 min);
each job's memory hint (as "gpumemnet") is 1.2x its peak. No published trace of this shape
exists: it is an assumption made to judge MIG repartitioning (`gpudesk simulate --mig ...
--mig-repartition`), not a measurement.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SOURCE = (
    "SYNTHETIC (bench/mig_heavy_trace.py, seed 15): 60 jobs, 80 % light (10 % SM, 1-4 GB, "
    "10-40 min), 20 % medium (30 % SM, 6-14 GB, 20-60 min), arrivals every 45 s on average; "
    "memory hints 1.2x the peak"
)


def trace() -> dict[str, object]:
    rng = random.Random(15)
    jobs = []
    t = 0.0
    for i in range(1, 61):
        t += rng.expovariate(1 / 45.0)
        light = rng.random() < 0.8
        peak = rng.uniform(1.0, 4.0) if light else rng.uniform(6.0, 14.0)
        minutes = rng.uniform(10, 40) if light else rng.uniform(20, 60)
        kind = "light" if light else "medium"
        jobs.append(
            {
                "id": i,
                "arrival_s": round(t),
                "task": f"{kind}-{i}",
                "class": kind,
                "gpus": 1,
                "exclusive_minutes": round(minutes, 2),
                "peak_memory_mb": round(peak * 1024),
                "estimate_gpumemnet_mb": round(peak * 1024 * 1.2),
                "sm_pct": 10.0 if light else 30.0,
            }
        )
    return {"name": "mig-heavy-t1", "station": "a100-40gbx2", "source": SOURCE, "jobs": jobs}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Write the SYNTHETIC MIG-heavy trace (seeded).")
    parser.add_argument("output", type=Path, help="the file, e.g. traces/mig-heavy-t1.json")
    output = parser.parse_args().output
    try:
        output.write_text(json.dumps(trace(), indent=1) + "\n")
    except OSError as exc:
        sys.exit(f"cannot write {output}: {exc.strerror}")
