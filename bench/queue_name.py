"""Session 54: `gpudesk queue --all --name GLOB` on a store of 100,000 jobs, the name matching 10
of them: the CLI matching the names itself (before) against the engine matching them (after).

    python bench/queue_name.py [--jobs 100000] [--rounds 5] [--json]

Builds the store of bench/store_scale.py (`--jobs` jobs, 100 of them queued behind 4 slots, the
rest finished over the last 60 days; names `sweepN-lrX-K`, 50 to a sweep), starts a personal
engine on it (GPUDESK_BACKEND=none, 4 slots, finished jobs never archived) and times, for three
patterns matching the same 10 jobs of one sweep (`sweepN-*-?` and `sweepN-lr*-[0-9]`, which
SQLite's GLOB matches alone, and `sweepN-lr*-[!-]`, whose set fnmatchcase decides on the rows
GLOB lets through: gpudesk.core.name_pattern), `--rounds` times each, in turn:

- before: `gpudesk queue`'s listing as it was until session 54 (cli/queue_listing.py's
  `fetch_listed` given the name as a filter of the CLI's own, `keep`): every job's page asked
  for, the names matched on the client, the newest 500 matches kept;
- after: the same function given the name to send (`jobs`' `name`): the engine's store picks
  the matches, their one page and the running jobs' listing asked for.

Both in this process, over one connection to the same engine, so the difference is the
listing's alone (a CLI process adds its start, ~0.3-0.5 s, to both); each side's `jobs`
requests are counted, and its result checked to be the same 10 jobs. Then the command itself,
`gpudesk queue --all --name PATTERN`, as a process (wall time, the new code); and single `jobs`
requests' round trips (a page and its count: the engine's loop is held for most of it), with
no name, with the rare names, and with names every job matches.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_scale import SLOTS, build_store, compile_gpudesk, gpudesk, run_header, stop

from gpudesk.api.client import Client
from gpudesk.api.connection import Connection, start_engine
from gpudesk.api.models import JobList
from gpudesk.cli.queue_listing import DEFAULT_LIMIT, fetch_listed
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home

QUEUED = 100
CLI_RUNS = 3


class CountingClient(Client):
    """A client that counts its `jobs` requests (each one page of at most 100 jobs)."""

    pages = 0

    def jobs_page(self, **query: Any) -> JobList:
        self.pages += 1
        return super().jobs_page(**query)


def listing(client: CountingClient, pattern: str, engine_side: bool) -> dict[str, Any]:
    """One `queue --all --name PATTERN` listing, the names matched by the engine or here."""
    client.pages = 0
    started = time.perf_counter()
    if engine_side:
        listed = fetch_listed(client, None, None, DEFAULT_LIMIT, None, None, pattern)
    else:
        keep = lambda job: fnmatch.fnmatchcase(job.name, pattern)  # noqa: E731 (as it was)
        listed = fetch_listed(client, None, None, DEFAULT_LIMIT, None, keep)
    seconds = time.perf_counter() - started
    return {"s": seconds, "requests": client.pages, "ids": [job.id for job in listed.jobs]}


def one_requests(client: Client, patterns: dict[str, str], rounds: int) -> dict[str, Any]:
    """One `jobs` request's round trip (ms: median, max of `rounds`), the engine's loop held for
    most of it: the store's query for a page and its count, with and without a name."""
    asked = {
        "no name: newest 100, counted": dict(limit=100),
        "10 matches (GLOB): newest 500, counted": dict(limit=500, name=patterns["glob"]),
        "10 matches (other set): newest 500, counted": dict(limit=500, name=patterns["other set"]),
        "every job (GLOB sweep*): newest 100, counted": dict(limit=100, name="sweep*"),
        "every job (plain set *[0-9]): newest 100, counted": dict(limit=100, name="*[0-9]"),
        "every job (other set *[!-]): newest 100, counted": dict(limit=100, name="*[!-]"),
    }
    result = {}
    for what, query in asked.items():
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            client.jobs_page(count=True, **query)  # type: ignore[arg-type]
            times.append((time.perf_counter() - started) * 1000)
        result[what] = {
            "median_ms": round(statistics.median(times), 1),
            "max_ms": round(max(times), 1),
        }
    return result


def measure(home: Home, jobs: int, rounds: int) -> dict[str, Any]:
    started = time.perf_counter()
    station = StationConfig(backend="none", slots=SLOTS, keep_finished_days=0)
    start_engine(home, station, timeout=300.0)
    result: dict[str, Any] = {"engine_start_s": round(time.perf_counter() - started, 2)}
    sweep = (jobs - QUEUED) * 9 // 10 // 50  # a sweep of the last days' finished jobs
    patterns = {
        "glob": f"sweep{sweep}-*-?",
        "plain set": f"sweep{sweep}-lr*-[0-9]",
        "other set": f"sweep{sweep}-lr*-[!-]",
    }
    client = CountingClient(Connection(home, timeout=300.0))
    with client:
        for kind, pattern in patterns.items():
            runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            for _ in range(rounds):
                for side in ("before", "after"):  # in turn: a drift weighs on both alike
                    runs[side].append(listing(client, pattern, side == "after"))
            ids = {tuple(run["ids"]) for side in runs.values() for run in side}
            assert len(ids) == 1 and len(next(iter(ids))) == 10, f"{pattern}: {ids}"
            result[kind] = {"pattern": pattern, "matches": 10}
            for side, done in runs.items():
                times = sorted(run["s"] for run in done)
                result[kind][side] = {
                    "median_s": round(statistics.median(times), 3),
                    "min_s": round(times[0], 3),
                    "max_s": round(times[-1], 3),
                    "requests": done[0]["requests"],
                }
            cli = []
            for _ in range(CLI_RUNS):
                seconds, out = gpudesk(home, "queue", "--all", "--name", pattern, timeout=300)
                assert seconds is not None and len(out.splitlines()) == 11, out
                cli.append(round(seconds, 3))
            result[kind]["cli_after_s"] = cli
        result["one_request"] = one_requests(client, patterns, rounds)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs in the store")
    parser.add_argument("--rounds", type=int, default=5, help="listings of each kind")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.jobs < 1000 or args.rounds < 1:
        parser.error("--jobs must be at least 1000, --rounds positive")
    compile_gpudesk()
    with tempfile.TemporaryDirectory(prefix="gpudesk-queue-name-") as tmp:
        home = Home(Path(tmp) / "home")
        result: dict[str, Any] = {
            **run_header(),
            "jobs": args.jobs,
            "store": build_store(home, args.jobs, QUEUED),
        }
        try:
            result.update(measure(home, args.jobs, args.rounds))
        finally:
            stop(home)
    print(json.dumps(result, indent=2 if args.json else None))
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
