"""Engine benchmark: submission throughput and submit-to-start latency on a CPU-only station.

    python bench/engine.py [--jobs 1000] [--latency-samples 1000] [--slots N] [--json]

Phase 1 submits --jobs no-op jobs (`true`), one `submit` request each, exactly as
`gpudesk submit` does (the submitter's environment travels with every request), and reports
submissions/s while the engine starts those jobs on the free slots at the same time; then it
waits for all of them to finish and reports how fast the engine drained the queue. It repeats the
submissions with every slot held by a sleeping job (the submission path alone), and once more as
a single request carrying every job (what `gpudesk run` does).

Phase 2 measures latency with a free slot: it submits one job at a time whose command is
`date +%s.%N`, and takes the time from `submit` returning to the timestamp the job's own process
printed; the next job is submitted once the previous one has finished.

Runs against a fresh GPUDESK_HOME in a temporary folder.
Targets: >= 500 submissions/s, p99 start latency <= 100 ms.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from gpudesk.api.connection import Connection, engine_pid, start_engine, submit_env
from gpudesk.core.jobs import TERMINAL_STATE_NAMES
from gpudesk.core.station import StationConfig, host_cores
from gpudesk.paths import Home


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def wait_done(client: Connection, ids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = list(ids)
    while pending:
        jobs = client.request("jobs", ids=pending[:500])["jobs"]
        done = {j["id"] for j in jobs if j["state"] in TERMINAL_STATE_NAMES}
        pending = [i for i in pending if i not in done]
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(pending)} jobs still not finished after {timeout:g} s")
        if pending:
            time.sleep(0.05)


def throughput(client: Connection, jobs: int, workdir: str) -> dict[str, float]:
    env = submit_env()
    spec = {"name": "noop", "command": ["true"], "workdir": workdir}
    ids = []
    start = time.perf_counter()
    for _ in range(jobs):
        ids.extend(client.request("submit", jobs=[spec], env=env)["ids"])
    submitted = time.perf_counter() - start
    wait_done(client, ids, timeout=600)
    drained = time.perf_counter() - start
    failed = client.request("jobs", ids=ids, states=["failed", "cancelled"])["jobs"]
    return {
        "jobs": jobs,
        "submit_s": round(submitted, 3),
        "submissions_per_s": round(jobs / submitted, 1),
        "drain_s": round(drained, 3),
        "jobs_finished_per_s": round(jobs / drained, 1),
        "failed": len(failed),
    }


def throughput_slots_busy(client: Connection, jobs: int, workdir: str) -> dict[str, float]:
    """The submission path alone: every slot is held by a sleeping job, so nothing launches."""
    env = submit_env()
    slots = client.request("status")["slots"]["total"]
    blockers = client.request(
        "submit",
        env=env,
        jobs=[{"name": "blocker", "command": ["sleep", "600"], "workdir": workdir}] * slots,
    )["ids"]
    spec = {"name": "noop", "command": ["true"], "workdir": workdir}
    start = time.perf_counter()
    ids = [client.request("submit", jobs=[spec], env=env)["ids"][0] for _ in range(jobs)]
    elapsed = time.perf_counter() - start
    client.request("cancel", jobs=ids + blockers, grace=0)
    wait_done(client, ids + blockers, timeout=60)
    return {
        "jobs": jobs,
        "submit_s": round(elapsed, 3),
        "submissions_per_s": round(jobs / elapsed, 1),
    }


def batch_submit(client: Connection, jobs: int, workdir: str) -> dict[str, float]:
    """One request with every job, as `gpudesk run` does for a profile."""
    env = submit_env()
    specs = [{"name": f"noop-{i}", "command": ["true"], "workdir": workdir} for i in range(jobs)]
    start = time.perf_counter()
    ids = client.request("submit", jobs=specs, env=env)["ids"]
    elapsed = time.perf_counter() - start
    wait_done(client, ids, timeout=600)
    return {"jobs": jobs, "submit_s": round(elapsed, 4), "jobs_per_s": round(jobs / elapsed, 1)}


def latency(client: Connection, home: Home, samples: int, workdir: str) -> dict[str, float]:
    env = submit_env()
    spec = {"name": "stamp", "command": ["date", "+%s.%N"], "workdir": workdir}
    delays: list[float] = []
    for _ in range(samples):
        (job_id,) = client.request("submit", jobs=[spec], env=env)["ids"]
        returned = time.time()
        log = home.attempt_dir(job_id, 1) / "output.log"
        wait_done(client, [job_id], timeout=30)
        delays.append(float(log.read_text().strip()) - returned)
    ms = [d * 1000 for d in delays]
    return {
        "samples": samples,
        "p50_ms": round(statistics.median(ms), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "min_ms": round(min(ms), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--latency-samples", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=None, help="default: number of cores")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gpudesk-bench-") as tmp:
        home = Home(Path(tmp) / "home")
        start_engine(home, StationConfig(backend="none", slots=args.slots))
        client = Connection(home, timeout=60)
        try:
            result = {
                "machine": f"{platform.node()} {platform.machine()}, {host_cores()} cores, "
                f"Python {platform.python_version()}",
                "date": time.strftime("%Y-%m-%d"),
                "slots": client.request("status")["slots"]["total"],
                "throughput": throughput(client, args.jobs, tmp),
                "throughput_slots_busy": throughput_slots_busy(client, args.jobs, tmp),
                "batch_submit": batch_submit(client, args.jobs, tmp),
                "latency_free_slot": latency(client, home, args.latency_samples, tmp),
            }
        finally:
            client.request("shutdown")
            client.close()
            while engine_pid(home) is not None:  # let it exit before its folder goes
                time.sleep(0.05)

    if args.json:
        print(json.dumps(result, indent=2))
    else:
        t, b, lat = result["throughput"], result["batch_submit"], result["latency_free_slot"]
        print(f"machine: {result['machine']}; slots {result['slots']}; {result['date']}")
        print(
            f"submit (one request per job): {t['jobs']} jobs in {t['submit_s']} s = "
            f"{t['submissions_per_s']} submissions/s (target >= 500)"
        )
        print(
            f"  queue drained in {t['drain_s']} s = {t['jobs_finished_per_s']} jobs/s; "
            f"{t['failed']} failed"
        )
        busy = result["throughput_slots_busy"]
        print(
            f"submit while every slot is busy (nothing launches): "
            f"{busy['submissions_per_s']} submissions/s"
        )
        print(
            f"submit (one request, {b['jobs']} jobs): {b['submit_s']} s = {b['jobs_per_s']} jobs/s"
        )
        print(
            f"submit -> job process start, free slot, {lat['samples']} samples: "
            f"p50 {lat['p50_ms']} ms, p90 {lat['p90_ms']} ms, p99 {lat['p99_ms']} ms "
            f"(target <= 100), max {lat['max_ms']} ms"
        )
    ok = (
        result["throughput"]["submissions_per_s"] >= 500
        and result["latency_free_slot"]["p99_ms"] <= 100
        and result["throughput"]["failed"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
