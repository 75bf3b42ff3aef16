"""Job control of many jobs at once on a large store: how long one request naming them holds
the engine's loop (every other client waits that long), and `gpudesk wait` on them.

    python bench/job_actions.py [--jobs 103000] [--queued 3000] [--ids 1000] [--json]

Builds the store as `bench/store_scale.py` does (`--jobs` jobs over 60 days, `--queued` of them
waiting behind 4 slots, all of them `sleep`), starts a personal engine on it (no GPUs, 4 slots)
and, one request each, as a sysadmin clearing up a sweep would: cancels `--ids` queued jobs,
requeues them, requeues the `--ids` oldest finished jobs (archived: older than 30 days), holds
and releases `--ids` queued jobs; then `gpudesk wait --timeout 0` on every queued job (as a
process, wall time: what it costs before it begins to wait). For each request: its round trip
and the engine's own time on the loop for it (the `status` reply's slowest requests).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from store_scale import build_store, commit, start_timed_engine, stop, user_env

from gpudesk.api.connection import Connection
from gpudesk.paths import Home


def timed(conn: Connection, op: str, ids: list[int]) -> dict[str, Any]:
    """One `op` request naming `ids`: its round trip, the loop's time for it, what it did."""
    before = _slowest(conn, op)
    started = time.perf_counter()
    reply = conn.request(op, jobs=ids)
    round_trip = time.perf_counter() - started
    held = list((_slowest(conn, op) - before).elements())  # this request's: the one new entry
    ok = sum(1 for r in reply["results"] if r["ok"])
    return {
        "op": op,
        "ids": len(ids),
        "ok": ok,
        "round_trip_ms": round(round_trip * 1000, 1),
        "loop_ms": max(held) if held else None,
    }


def _slowest(conn: Connection, op: str) -> Counter[float]:
    """The loop's slowest requests of `op` in its window, as the `status` reply lists them."""
    loop = conn.request("status").get("loop") or {}
    return Counter(r["ms"] for r in loop.get("slowest", []) if r.get("op") == op)


def measure(home: Home, ids: int) -> dict[str, Any]:
    result: dict[str, Any] = {"engine_start_s": start_timed_engine(home)}
    with Connection(home, timeout=300.0) as conn:
        queued = [j["id"] for j in _all(conn, ["queued"])]
        finished = [j["id"] for j in _all(conn, ["succeeded", "failed", "cancelled"], 1)][:ids]
        picked = queued[-ids:]
        result["queued"] = len(queued)
        result["requests"] = [
            timed(conn, "cancel", picked),
            timed(conn, "requeue", picked),
            timed(conn, "requeue", finished),
            timed(conn, "hold", picked),
            timed(conn, "release", picked),
        ]
        waiting = [j["id"] for j in _all(conn, ["queued"])]
    result["wait"] = timed_wait(home, waiting)
    return result


def timed_wait(home: Home, ids: list[int]) -> dict[str, Any]:
    """`gpudesk wait --timeout 0` on `ids` as a process: what it costs before it begins to
    wait (it then gives up at once, exit 124)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", "wait", "--timeout", "0", *map(str, ids)],
        env=user_env(home),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    wall = round(time.perf_counter() - started, 2)
    return {"ids": len(ids), "wall_s": wall, "exit": done.returncode}


def _all(conn: Connection, states: list[str], archived: int = 0) -> list[dict[str, Any]]:
    """Every job in `states` (archived ones too with `archived`), oldest first, page by page."""
    jobs: list[dict[str, Any]] = []
    after = None
    while True:
        page = conn.request("jobs", states=states, after_id=after, archived=bool(archived))
        jobs += page["jobs"]
        if not page.get("more") or page.get("after_id") is None:
            return jobs
        after = page["after_id"]


def report(result: dict[str, Any]) -> str:
    lines = [
        f"{result['date']}, {result['machine']}, commit {result['commit']}",
        f"store: {result['jobs']:,} jobs, {result['queued']:,} queued at the start; "
        f"engine start {result['engine_start_s']} s",
        "",
        "| request | jobs | done | round trip | engine's loop |",
        "|---|---|---|---|---|",
    ]
    for r in result["requests"]:
        loop = "?" if r["loop_ms"] is None else f"{r['loop_ms']:.1f} ms"
        lines.append(
            f"| {r['op']} | {r['ids']:,} | {r['ok']:,} | {r['round_trip_ms']:.1f} ms | {loop} |"
        )
    wait = result["wait"]
    lines.append(f"\n`gpudesk wait --timeout 0` on {wait['ids']:,} queued jobs: {wait['wall_s']} s")
    if wait["exit"] != 124:
        lines.append(f"  (exit {wait['exit']}, not 124: it did not reach its --timeout)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=103_000, help="jobs in the store")
    parser.add_argument("--queued", type=int, default=3_000, help="of them, waiting")
    parser.add_argument("--ids", type=int, default=1_000, help="jobs named by each request")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.ids <= args.queued <= args.jobs - args.ids:
        parser.error("need 0 < --ids <= --queued <= --jobs - --ids")
    with tempfile.TemporaryDirectory(prefix="gpudesk-actions-") as tmp:
        home = Home(Path(tmp) / "home")
        result: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}",
            "commit": commit(),
            "jobs": args.jobs,
        }
        result["store"] = build_store(home, args.jobs, args.queued)
        try:
            result.update(measure(home, args.ids))
        finally:
            stop(home)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
