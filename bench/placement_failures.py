"""GPU jobs failed by placement on a station with no GPUs, or jobs cancelled because a job they
run after was: how long the engine's loop is held while it ends them (every other client waits
that long).

    python bench/placement_failures.py [--jobs 3000] [--ids 500] [--rounds 10] [--after] [--json]

Builds a store as `bench/store_scale.py` does (`--jobs` finished jobs over 60 days, 60% of them
asking for one GPU) and starts a personal engine on it with no GPUs (backend none, 4 slots).
Then, `--rounds` times: the station drained, `--ids` of the finished GPU jobs requeued in one
request (an admin clearing up after the GPUs went away), and the station undrained. None of
them can ever run here, so the placement pass fails each ("asks for 1 GPU but this station
has none"). From the undrain until every one is failed again, another client, in a process of
its own, pings one ping after another. Measured: the time from the undrain until all are
failed (the slowest round's), the engine's slowest turns of its loop (`status` reply, "loop":
the turn's time and the step that took most of it), and the pings' p50, p99 and longest round
trip over all the rounds.

With `--after`, the same store and engine, and `--rounds` times: one job submitted held, `--ids`
jobs submitted to run after it (`after`, pueue's `--after`), and the first job cancelled. None
of the others can ever start now, so the engine cancels each ("job N (dep), which it runs after,
cancelled; this job never ran"). The pings run from the cancel until every one is cancelled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from job_actions import Pinger, _all, _flush_window
from store_scale import build_store, commit, start_timed_engine, stop

from gpudesk.api.connection import Connection
from gpudesk.paths import Home

DEADLINE_S = 120.0  # the jobs not all failed by then: said as such, not waited for


def measure(home: Home, ids: int, rounds: int) -> dict[str, Any]:
    result: dict[str, Any] = {"engine_start_s": start_timed_engine(home)}
    with Connection(home, timeout=300.0) as conn:
        finished = _all(conn, ["succeeded", "failed", "cancelled"], 1)
        gpu_jobs = [j["id"] for j in finished if j["spec"]["gpus"]][:ids]
        if len(gpu_jobs) < ids:
            raise SystemExit(f"only {len(gpu_jobs)} finished GPU jobs in the store; raise --jobs")
        _flush_window(conn)
        pings: list[float] = []
        failed: list[float | None] = []
        for _ in range(rounds):
            conn.request("drain")
            conn.request("requeue", jobs=gpu_jobs)
            with Pinger(home) as pinger:
                started = time.perf_counter()
                conn.request("undrain")
                failed.append(_wait_failed(conn, started))
            pings += pinger.seen
        done = [s for s in failed if s is not None]
        result["all_failed_s"] = max(done) if len(done) == len(failed) else None
        result["ping"] = _summary(pings)
        loop = conn.request("status").get("loop") or {}
        result["turns"] = (loop.get("turns") or {}).get("slowest") or []
        reasons = {j["reason"] for j in conn.request("jobs", ids=gpu_jobs)["jobs"]}
        result["reasons"] = sorted(r or "" for r in reasons)
    result["ids"], result["rounds"] = len(gpu_jobs), rounds
    return result


def measure_after(home: Home, ids: int, rounds: int) -> dict[str, Any]:
    """`--after`: `ids` queued jobs cancelled because the job they run after was cancelled."""
    from gpudesk.api.client import Client
    from gpudesk.core.jobs import JobSpec

    result: dict[str, Any] = {"engine_start_s": start_timed_engine(home)}
    workdir = str(home.root)
    with Connection(home, timeout=300.0) as conn:
        client = Client(conn)
        _flush_window(conn)
        pings: list[float] = []
        cancelled: list[float | None] = []
        for _ in range(rounds):
            spec = JobSpec(name="dep", command=("true",), workdir=workdir)
            (first,) = client.submit_jobs([spec], hold=True).ids
            after = [
                JobSpec(name=f"a{k}", command=("true",), workdir=workdir, after=(first,))
                for k in range(ids)
            ]
            waiting = client.submit_jobs(after).ids
            with Pinger(home) as pinger:
                started = time.perf_counter()
                conn.request("cancel", jobs=[first])
                cancelled.append(_wait_failed(conn, started))
            pings += pinger.seen
        done = [s for s in cancelled if s is not None]
        result["all_failed_s"] = max(done) if len(done) == len(cancelled) else None
        result["ping"] = _summary(pings)
        loop = conn.request("status").get("loop") or {}
        result["turns"] = (loop.get("turns") or {}).get("slowest") or []
        jobs = conn.request("jobs", ids=waiting)["jobs"]
        result["reasons"] = sorted({f"{j['state']}: {j['reason'] or ''}" for j in jobs})
    result["ids"], result["rounds"] = len(waiting), rounds
    return result


def _wait_failed(conn: Connection, started: float) -> float | None:
    """Seconds from `started` until no job is queued (the store holds no other); None past
    DEADLINE_S."""
    while time.perf_counter() - started < DEADLINE_S:
        if not conn.request("status")["counts"].get("queued", 0):
            return round(time.perf_counter() - started, 3)
        time.sleep(0.005)
    return None


def _summary(seen: list[float]) -> dict[str, float]:
    ordered = sorted(seen) or [0.0]

    def at(share: float) -> float:
        return round(ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] * 1000, 2)

    return {"p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0), "pings": len(seen)}


def report(result: dict[str, Any]) -> str:
    ping = result["ping"]
    done = result["all_failed_s"]
    what = (
        f"{result['ids']} queued jobs that run after a job then cancelled, {result['rounds']} "
        "times: all cancelled "
        if result["after"]
        else f"{result['ids']} GPU jobs requeued on a station with no GPUs, {result['rounds']} "
        "times: all failed again "
    )
    lines = [
        f"{result['date']}, {result['machine']}, commit {result['commit']}",
        f"store: {result['jobs']:,} finished jobs; engine start {result['engine_start_s']} s",
        what
        + (f"{done} s" if done is not None else f"not within {DEADLINE_S:.0f} s")
        + (" after the cancel" if result["after"] else " after the undrain")
        + " (the slowest round's)",
        f"reasons: {'; '.join(result['reasons'])}",
        f"another client's ping meanwhile: p50 {ping['p50_ms']} ms, p99 {ping['p99_ms']} ms, "
        f"max {ping['max_ms']} ms ({ping['pings']} pings)",
        "the loop's slowest turns: "
        + ", ".join(f"{t['ms']} ms ({t['step']} {t['step_ms']})" for t in result["turns"]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3_000, help="finished jobs in the store")
    parser.add_argument("--ids", type=int, default=500, help="GPU jobs requeued")
    parser.add_argument("--rounds", type=int, default=10, help="requeues of them, one by one")
    parser.add_argument(
        "--after", action="store_true", help="jobs cancelled as the job they run after was"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.ids <= args.jobs or args.rounds < 1:
        parser.error("need 0 < --ids <= --jobs and --rounds >= 1")
    with tempfile.TemporaryDirectory(prefix="gpudesk-placement-") as tmp:
        home = Home(Path(tmp) / "home")
        result: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}",
            "commit": commit(),
            "jobs": args.jobs,
            "after": args.after,
        }
        result["store"] = build_store(home, args.jobs, 0)
        try:
            result.update((measure_after if args.after else measure)(home, args.ids, args.rounds))
        finally:
            stop(home)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
