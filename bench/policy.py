"""Placement decision time: one `place()` call of the collocation-aware policy over a long queue.

    python bench/policy.py [--jobs 1000] [--gpus 8] [--rounds 200] [--repeat K] [--json]

Each round builds a station of `--gpus` A100 40GB GPUs with a random mix of tenants (some idle,
some shared, some nearly full), and a queue of `--jobs` GPU jobs with random memory and SM
demands (1 to 2 GPUs, a few after an OOM), then times `SharingPolicy("auto").place()`; the CARMA
baseline is timed on the same inputs. Seeded, so runs are comparable. Before each timed call the
garbage left by building the inputs is collected. Targets (issue 39): p99 <= 5 ms for 1,000 jobs
on 8 GPUs, <= 20 ms for 10,000.

Each call is timed by the wall clock (what the targets are) and by the calling thread's CPU time
(`cpu_p50_ms`, `cpu_p99_ms`: without the time other processes took the core, which on a shared
machine is most of a wall-clock tail). On a small VM even the CPU time has a tail of its own: a
call a hiccup of the VM stretched by milliseconds, counted in the thread's CPU time as well.
`--repeat K` times each input K times and also reports the p50 and p99 of each input's fastest
call (`min_p50_ms`, `min_p99_ms`): what the code itself costs on its slowest inputs, without
those hiccups. The K calls of an input are K passes apart (every input is built again, from
the same seed, for each pass): the VM's slow spells last longer than a few calls (the same
input timed five times in a row was slow all five times, and the fastest-of-five p99 moved from
3.2 to 5.0 ms between two runs a minute apart), so calls in a row do not escape them. The
targets are on the single calls (those of the first pass). The script times
whichever `gpudesk` it imports, so one tree's copy times another's code: `PYTHONPATH=../other-tree
python bench/policy.py`.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import time
from pathlib import Path

import gpudesk
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.policy.carma import CarmaPolicy
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.demand import Demand
from gpudesk.policy.policy import GpuState, StationView, Tenant
from gpudesk.units import MIB_PER_GIB

GIB = MIB_PER_GIB


def station(rng: random.Random, gpus: int, queue: list[JobRecord]) -> StationView:
    states = []
    for index in range(gpus):
        tenants = tuple(
            Tenant(
                10_000 + index * 10 + t,
                "mps",
                rng.uniform(1, 12) * GIB,
                rng.choice((10.0, 30.0, 70.0)),
            )
            for t in range(rng.choice((0, 0, 1, 2, 3)))
        )
        used = sum(t.memory_mib for t in tenants) * rng.uniform(0.6, 1.1)
        states.append(
            GpuState(
                index,
                f"GPU-{index}",
                40 * GIB,
                memory_used_mib=used,
                sm_activity_pct=rng.uniform(0, 95) if tenants else 0.0,
                tenants=tenants,
                mps_usable=True,
            )
        )
    demands = {
        job.id: Demand(
            job.spec.memory_gb * GIB * 1.5, job.spec.sm_pct or 50.0, "after OOM", exclusive=True
        )
        for job in queue
        if job.id % 50 == 0
    }
    return StationView(
        StationConfig(backend="sim:h100x8"),
        cores=64,
        backend="sim:h100x8",
        simulated=True,
        gpu_states=tuple(states),
        demands=demands,
        overtaken={queue[0].id: rng.choice((0, 3, 8))},
    )


def queue(rng: random.Random, jobs: int) -> list[JobRecord]:
    records = []
    for i in range(1, jobs + 1):
        spec = JobSpec(
            name=f"j{i}",
            command=("true",),
            gpus=1 if rng.random() < 0.95 else 2,
            memory_gb=rng.uniform(0.5, 30.0),
            sm_pct=rng.choice((5, 10, 30, 70, 90)),
            priority=rng.choice((0, 0, 0, 1)),
        )
        records.append(
            JobRecord(i, spec, JobState.QUEUED, float(i), None, None, 0, None, None, False)
        )
    records.sort(key=lambda r: (-r.spec.priority, r.id))
    return records


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1, help="time each input K times (default 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat: at least 1, not {args.repeat}")
    placed: dict[str, int] = {"auto": 0, "carma": 0}
    policies = {"auto": SharingPolicy("auto"), "carma": CarmaPolicy()}
    # per policy, per input: its calls' (wall, CPU) ms, one a pass
    calls: dict[str, list[list[tuple[float, float]]]] = {name: [] for name in policies}
    for done in range(args.repeat):
        rng = random.Random(42)  # the same inputs each pass
        for round_ in range(args.rounds):
            jobs = queue(rng, args.jobs)
            view = station(rng, args.gpus, jobs)
            for name, policy in policies.items():
                # Collect the garbage this script made building the inputs (1,000 new job
                # records a round), so a timed call pays only for collections its own
                # allocations cause. The engine keeps its queue between passes; it does not
                # rebuild it each time.
                gc.collect()
                start, start_cpu = time.perf_counter(), time.thread_time()
                decision = policy.place(jobs, view)
                call = (
                    (time.perf_counter() - start) * 1000,
                    (time.thread_time() - start_cpu) * 1000,
                )
                if done == 0:
                    calls[name].append([call])
                    placed[name] += len(decision.placements)
                else:
                    calls[name][round_].append(call)
    # the targets are on the single calls, the first pass's; beside them each input's fastest
    timings = {name: [each[0][0] for each in per_input] for name, per_input in calls.items()}
    cpu = {name: [each[0][1] for each in per_input] for name, per_input in calls.items()}
    fastest = {name: [min(w for w, _ in each) for each in per] for name, per in calls.items()}
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "gpudesk": str(Path(gpudesk.__file__).parent),
        "jobs": args.jobs,
        "gpus": args.gpus,
        "rounds": args.rounds,
        "repeat": args.repeat,
        "policies": {
            name: {
                "p50_ms": round(statistics.median(t), 3),
                "p99_ms": round(percentile(t, 99), 3),
                "max_ms": round(max(t), 3),
                "cpu_p50_ms": round(statistics.median(cpu[name]), 3),
                "cpu_p99_ms": round(percentile(cpu[name], 99), 3),
                "min_p50_ms": round(statistics.median(fastest[name]), 3),
                "min_p99_ms": round(percentile(fastest[name], 99), 3),
                "placed_per_round": round(placed[name] / args.rounds, 1),
            }
            for name, t in timings.items()
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['date']}  {result['machine']}  {args.jobs} queued jobs, {args.gpus} GPUs, "
        f"{args.rounds} rounds"
    )
    for name, r in result["policies"].items():
        print(
            f"{name:6} p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  max {r['max_ms']:.3f} "
            f"ms  (CPU p50 {r['cpu_p50_ms']:.3f}, p99 {r['cpu_p99_ms']:.3f} ms; "
            f"{r['placed_per_round']} placed per decision)"
        )
        if args.repeat > 1:
            print(
                f"{'':6} each input's fastest of {args.repeat}: p50 {r['min_p50_ms']:.3f} ms  "
                f"p99 {r['min_p99_ms']:.3f} ms"
            )


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
