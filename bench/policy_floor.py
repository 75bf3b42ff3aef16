"""The lower bound under `bench/policy.py`'s figure: one pass over the queue that only reads each
GPU job's demand (its GPUs, memory and SM hints, its entry in the station's demands), timed as
that script times `place()`: a new seeded queue each round, garbage collected before the timed
loop. Any placement pass that looks at every queued job costs at least this.

    python bench/policy_floor.py [--jobs 1000] [--gpus 8] [--rounds 200]
"""

from __future__ import annotations

import argparse
import gc
import random
import time

from policy import percentile, queue, station  # same folder: this is run as a script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(42)
    timings = []
    read = 0
    for _ in range(args.rounds):
        jobs = queue(rng, args.jobs)
        demands = station(rng, args.gpus, jobs).demands
        gc.collect()
        start = time.perf_counter()
        for job in jobs:
            spec = job.spec
            if spec.gpus:
                read += (
                    (demands.get(job.id) is None) + (spec.memory_gb is None) + (spec.sm_pct is None)
                )
        timings.append((time.perf_counter() - start) * 1000)
    print(
        f"{args.jobs} queued jobs: reading every demand p50 {percentile(timings, 50):.3f} ms, "
        f"p99 {percentile(timings, 99):.3f} ms ({read} fields unset)"
    )


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
