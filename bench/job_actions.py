"""Job control of many jobs at once on a large store: how long one request naming them holds
the engine's loop (every other client waits that long), and `gpudesk wait` on them.

    python bench/job_actions.py [--jobs 103000] [--queued 3000] [--ids 1000] [--big N] [--json]

Builds the store as `bench/store_scale.py` does (`--jobs` jobs over 60 days, `--queued` of them
waiting behind 4 slots, all of them `sleep`), starts a personal engine on it (no GPUs, 4 slots)
and, one request each, as a sysadmin clearing up a sweep would: cancels `--ids` queued jobs,
requeues them, requeues the `--ids` oldest finished jobs (archived: older than 30 days), holds
and releases `--ids` queued jobs, raises their priority (+1); submits `--ids` jobs held, as a
program does (`Client.submit_jobs`: one request, or parts where the engine bounds one), then
cancels them; with `--big N`, a cancel naming N queued jobs in one request (`--queued` must be
at least N). Then `gpudesk wait --timeout 0` on every queued job (as a process, wall time: what
it costs before it begins to wait). For each request: its round trip, the engine's own time on
the loop for it (the `status` reply's slowest requests: the longest one hold of the loop, where
the engine acts on a request a slice a turn), and another client's ping meanwhile (a second
connection pinging every 5 ms: the longest any waited).
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
from gpudesk.metrics.loop_timing import WINDOW
from gpudesk.paths import Home


def timed(conn: Connection, op: str, ids: list[int], **args: Any) -> dict[str, Any]:
    """One `op` request naming `ids`: its round trip, the loop's time for it, what it did."""
    _flush_window(conn)
    before = _slowest(conn, op)
    with Pinger(conn.home) as pinger:
        started = time.perf_counter()
        reply = conn.request(op, jobs=ids, **args)
        round_trip = time.perf_counter() - started
    ok = sum(1 for r in reply["results"] if r["ok"])
    entry = _entry(op, len(ids), ok, round_trip, _slowest(conn, op) - before, pinger)
    return {**entry, "turn": _slowest_turn(conn)}


def timed_submit(conn: Connection, count: int, workdir: str) -> dict[str, Any]:
    """`count` jobs submitted held by the typed client, as a program does: one request where
    the engine takes them so, else its parts; the loop's longest hold among them."""
    from gpudesk.api.client import Client
    from gpudesk.core.jobs import JobSpec

    specs = [JobSpec(name=f"sub{k}", command=("true",), workdir=workdir) for k in range(count)]
    _flush_window(conn)
    before = _slowest(conn, "submit")
    with Pinger(conn.home) as pinger:
        started = time.perf_counter()
        ids = Client(conn).submit_jobs(specs, hold=True).ids
        round_trip = time.perf_counter() - started
    entry = _entry("submit", count, len(ids), round_trip, _slowest(conn, "submit") - before, pinger)
    entry["turn"] = _slowest_turn(conn)
    conn.request("cancel", jobs=ids)
    return entry


def _entry(
    op: str, ids: int, ok: int, round_trip: float, held: Counter[float], pinger: Pinger
) -> dict[str, Any]:
    slowest = list(held.elements())  # this request's holds among the window's slowest
    return {
        "op": op,
        "ids": ids,
        "ok": ok,
        "round_trip_ms": round(round_trip * 1000, 1),
        "loop_ms": max(slowest) if slowest else None,
        "ping_max_ms": pinger.max_ms,
        "pings": pinger.count,
    }


class Pinger:
    """Another client, in a process of its own (no GIL shared with this one): it pings, one
    ping after another, while the block runs (the block starts once it has its first answer);
    each round trip (seconds) in `seen`, the longest (`max_ms`) and how many (`count`)."""

    SCRIPT = (
        "import sys, time, select\n"
        "from pathlib import Path\n"
        "from gpudesk.api.connection import Connection\n"
        "from gpudesk.paths import Home\n"
        "conn = Connection(Home(Path(sys.argv[1])), timeout=300.0)\n"
        "conn.request('ping'); print('ready', flush=True)\n"
        "seen = []\n"
        "while not select.select([sys.stdin], [], [], 0)[0]:\n"
        "    started = time.perf_counter(); conn.request('ping')\n"
        "    seen.append(time.perf_counter() - started)\n"
        "print(*seen)\n"
    )

    def __init__(self, home: Home) -> None:
        self.home = home
        self.seen: list[float] = []

    @property
    def max_ms(self) -> float:
        return round(max(self.seen, default=0.0) * 1000, 1)

    @property
    def count(self) -> int:
        return len(self.seen)

    def __enter__(self) -> Pinger:
        self._process = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, str(self.home.root)],
            env=user_env(self.home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        assert self._process.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *_exc: object) -> None:
        out, _ = self._process.communicate("stop\n", timeout=300)
        self.seen = [float(x) for x in out.split()]


def _slowest(conn: Connection, op: str) -> Counter[float]:
    """The loop's slowest requests of `op` in its window, as the `status` reply lists them."""
    loop = conn.request("status").get("loop") or {}
    return Counter(r["ms"] for r in loop.get("slowest", []) if r.get("op") == op)


def _slowest_turn(conn: Connection) -> str:
    """The loop's slowest turn's steps in its window, and the step that took most of it."""
    turns = ((conn.request("status").get("loop") or {}).get("turns") or {}).get("slowest") or []
    return f"{turns[0]['ms']} ms ({turns[0]['step']} {turns[0]['step_ms']})" if turns else "-"


def _flush_window(conn: Connection) -> None:
    """Pings, one window's worth: the requests before leave the `status` window, so that its
    slowest are the next request's (a request acted on a slice a turn counts each slice)."""
    for _ in range(WINDOW):
        conn.request("ping")


def measure(home: Home, ids: int, big: int) -> dict[str, Any]:
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
            timed(conn, "priority", picked, delta=1),
            timed_submit(conn, ids, str(home.root)),
        ]
        if big:
            result["requests"].append(timed(conn, "cancel", queued[-big - ids : -ids]))
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
        "| request | jobs | done | round trip | engine's loop, longest hold | another's ping, "
        "longest | slowest turn's steps (the step) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["requests"]:
        loop = "?" if r["loop_ms"] is None else f"{r['loop_ms']:.1f} ms"
        ping = f"{r['ping_max_ms']:.1f} ms ({r['pings']} pings)"
        lines.append(
            f"| {r['op']} | {r['ids']:,} | {r['ok']:,} | {r['round_trip_ms']:.1f} ms | {loop} "
            f"| {ping} | {r['turn']} |"
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
    parser.add_argument("--big", type=int, default=0, help="then a cancel naming this many")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.ids <= args.queued <= args.jobs - args.ids:
        parser.error("need 0 < --ids <= --queued <= --jobs - --ids")
    if args.big and args.big + args.ids > args.queued:
        parser.error("need --big + --ids <= --queued")
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
            result.update(measure(home, args.ids, args.big))
        finally:
            stop(home)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
