"""Telemetry benchmark: what sampling costs the engine, and how fast `gpudesk top` answers.

    python bench/telemetry.py [--seconds 20] [--runs 10] [--json]

1. Sampler CPU cost. For each interval (1 s and 0.1 s) a fresh engine watches a simulated station
   of 8 GPUs (`sim:h100x8`) with 8 jobs placed on them, one per GPU, so every sample lists GPU
   processes, reads 8 process groups through psutil and credits energy to 8 attempts. The
   engine's own CPU time (user + system, all threads) over `--seconds` is reported as % of one
   core. A third engine on the same station sampling every 60 s gives the engine's cost without
   sampling, measured the same way, so the difference is the sampler's.
   Also: the time one `collect()` + `ingest()` takes in-process (mean over 200 samples).
2. `gpudesk top --once --json` wall time (median of `--runs`), next to `python -c pass` and
   `gpudesk --help` in the same run: sampling directly (no engine; `none` and `sim:h100x8`) and
   reading from a running engine.

Targets: sampler <= 1% of one core at 1 Hz; `top --once --json` <= 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from gpudesk.api.connection import Connection, engine_pid, start_engine, submit_env
from gpudesk.core.station import StationConfig
from gpudesk.hw.telemetry.backend import make_backend
from gpudesk.hw.telemetry.monitor import Monitor, TrackedAttempt
from gpudesk.paths import Home

STATION = "sim:h100x8"
GPUS = 8


def engine_cpu(root: Path, interval: float, seconds: float) -> dict[str, float]:
    home = Home(root)
    env_backup = os.environ.get("GPUDESK_HOME")
    os.environ["GPUDESK_HOME"] = str(root)
    try:
        start_engine(home, StationConfig(backend=STATION, sample_interval=interval))
        with Connection(home, timeout=10.0) as client:
            jobs = [
                {
                    "name": f"hold-{i}",
                    "command": ["sleep", str(seconds + 30)],
                    "gpus": 1,
                    "memory_gb": 8.0,
                    "sm_pct": 60.0,
                    "workdir": str(root),
                }
                for i in range(GPUS)
            ]
            ids = client.request("submit", jobs=jobs, env=submit_env())["ids"]
            deadline = time.monotonic() + 20
            while client.request("status")["gpus"]["busy"] < GPUS:
                if time.monotonic() > deadline:
                    raise SystemExit("the 8 jobs did not start")
                time.sleep(0.05)
            time.sleep(max(2.0, 3 * min(interval, 1.0)))  # let the sampler settle
            proc = psutil.Process(engine_pid(home))
            before, start = proc.cpu_times(), time.monotonic()
            time.sleep(seconds)
            after, wall = proc.cpu_times(), time.monotonic() - start
            samples = len(client.request("telemetry", history=600)["history"])
            client.request("cancel", jobs=ids, grace=0)
            client.request("shutdown")
    finally:
        if env_backup is None:
            os.environ.pop("GPUDESK_HOME", None)
        else:
            os.environ["GPUDESK_HOME"] = env_backup
    cpu = (after.user - before.user) + (after.system - before.system)
    return {
        "interval_s": interval,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 3),
        "pct_of_one_core": round(100 * cpu / wall, 3),
        "history_points": samples,
    }


def in_process_cost(samples: int = 200) -> dict[str, float]:
    monitor = Monitor(make_backend(STATION))
    monitor.open()
    pgid = os.getpgid(0)
    attempts = [
        TrackedAttempt(i, i, f"hold-{i}", pgid, f"gpu:{i}", (i,), 8.0, 60.0, time.time())
        for i in range(GPUS)
    ]
    monitor.ingest(monitor.collect(attempts))
    collect = ingest = 0.0
    for _ in range(samples):
        t0 = time.perf_counter()
        raw = monitor.collect(attempts)
        t1 = time.perf_counter()
        monitor.ingest(raw)
        t2 = time.perf_counter()
        collect += t1 - t0
        ingest += t2 - t1
    return {
        "collect_ms": round(1000 * collect / samples, 3),
        "ingest_ms": round(1000 * ingest / samples, 3),
        "per_sample_ms": round(1000 * (collect + ingest) / samples, 3),
    }


def wall(argv: list[str], env: dict[str, str], runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
    }


def top_wall(root: Path, runs: int) -> dict[str, dict[str, float]]:
    gpudesk = [sys.executable, "-m", "gpudesk"]
    base = {**os.environ, "GPUDESK_HOME": str(root / "top-home")}
    base.pop("GPUDESK_BACKEND", None)
    results = {
        "python -c pass": wall([sys.executable, "-c", "pass"], base, runs),
        "gpudesk --help": wall([*gpudesk, "--help"], base, runs),
        "top --once --json, no engine, backend none": wall(
            [*gpudesk, "top", "--once", "--json"], {**base, "GPUDESK_BACKEND": "none"}, runs
        ),
        f"top --once --json, no engine, {STATION}": wall(
            [*gpudesk, "top", "--once", "--json"], {**base, "GPUDESK_BACKEND": STATION}, runs
        ),
    }
    home = Home(root / "top-home")
    os.environ["GPUDESK_HOME"] = str(home.root)
    start_engine(home, StationConfig(backend=STATION))
    try:
        with Connection(home, timeout=10.0) as client:
            while client.request("telemetry")["snapshot"] is None:
                time.sleep(0.05)
        results[f"top --once --json, engine running, {STATION}"] = wall(
            [*gpudesk, "top", "--once", "--json"], base, runs
        )
    finally:
        with Connection(home, timeout=10.0) as client:
            client.request("shutdown")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpudesk-bench-") as tmp:
        root = Path(tmp)
        cpu = [
            engine_cpu(root / f"engine-{i}", interval, args.seconds)
            for i, interval in enumerate((60.0, 1.0, 0.1))
        ]
        result = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"Python {platform.python_version()}",
            "date": time.strftime("%Y-%m-%d"),
            "station": STATION,
            "engine_cpu": cpu,
            "sampler_pct_of_one_core": {
                f"{c['interval_s']:g} s": round(c["pct_of_one_core"] - cpu[0]["pct_of_one_core"], 3)
                for c in cpu[1:]
            },
            "in_process": in_process_cost(),
            "top_wall": top_wall(root, args.runs),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['date']}  {result['machine']}  station {STATION}")
    for c in cpu:
        print(
            f"engine, sampling every {c['interval_s']:g} s: {c['cpu_s']:.3f} CPU s in "
            f"{c['wall_s']:.1f} s = {c['pct_of_one_core']:.3f}% of one core "
            f"({c['history_points']} samples in memory)"
        )
    for label, pct in result["sampler_pct_of_one_core"].items():
        print(f"sampler alone at {label}: {pct:.3f}% of one core")
    p = result["in_process"]
    print(f"one sample in-process: collect {p['collect_ms']} ms + ingest {p['ingest_ms']} ms")
    for label, t in result["top_wall"].items():
        print(
            f"{label:<48} median {t['median_s']:.3f} s (min {t['min_s']:.3f}, max {t['max_s']:.3f})"
        )


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
