"""Session 54: what one named `jobs` request holds the engine's loop for, on a store of 100,000
jobs, before and after the store matched names in its listing index a slice of ids a turn.

    python bench/queue_name_turns.py --before-code DIR [--jobs 100000] [--rounds 5] [--json]

Builds the store of bench/store_scale.py once (as bench/queue_name.py does), then, `--rounds`
times in turn, runs the same measurement in a process of each side, on a copy of that store:
**before**, the gpudesk under `--before-code` (a folder holding an earlier `gpudesk/` package,
e.g. `git archive 2d4b97e6 gpudesk | tar -x -C DIR`: its store's `jobs_page`, one call on the
loop, its store at the schema it migrates to); **after**, this tree's (`jobs_page_in_slices`:
each step between two yields is one turn of the loop, the engine's `jobs` handler driving it
with `offloop.in_turns`). For each request (a page and its `count`, as `gpudesk queue --name`
asks where its limit cut, newest first) it reports the longest step (what the loop is held for
at once) and the sum of the steps (the request's own work, spread over turns), ms, median and
max over the rounds. Timed on the store alone: the engine adds its reply's encoding (~1 ms for
100 jobs) to the last step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_scale import build_store, run_header

from gpudesk.paths import Home

QUEUED = 100
# (name, limit): the rare names match the 10 jobs of one sweep (bench/queue_name.py), the others
# every job or none; `*[0-9]x` is the costliest to match a name that matches none (GLOB tries
# its set at every position of every name).
ASKED = [
    ("sweep{sweep}-*-?", 500),
    ("sweep{sweep}-lr*-[!-]", 500),
    ("sweep*", 100),
    ("*[0-9]", 100),
    ("*[!-]", 100),
    ("*x*", 100),
    ("*[0-9]x", 100),
    (None, 100),
]

SCHEMA_22 = (
    "DROP INDEX jobs_unarchived; CREATE INDEX jobs_unarchived ON jobs (id) WHERE archived = 0;"
    "PRAGMA user_version = 22;"
)


def one_side(db: str, sweep: int) -> dict[str, list[float]]:
    """In a process of one side: each request's steps on the loop, ms (longest, sum)."""
    from gpudesk.engine.store.database import Store

    store = Store.open(db)
    out: dict[str, list[float]] = {}
    for name, limit in ASKED:
        pattern = None if name is None else name.format(sweep=sweep)
        query = dict(limit=limit, newest=True, count=True, name=pattern)
        work = getattr(store, "jobs_page_in_slices", None)
        steps: list[float] = []
        if work is None:  # before: one call
            started = time.perf_counter()
            store.jobs_page(**query)
            steps.append(time.perf_counter() - started)
        else:
            slices = work(**query)
            while True:
                started = time.perf_counter()
                try:
                    next(slices)
                except StopIteration:
                    steps.append(time.perf_counter() - started)
                    break
                steps.append(time.perf_counter() - started)
        out[str(pattern)] = [max(steps) * 1000, sum(steps) * 1000, len(steps)]
    store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-code", type=Path, help="a folder holding the earlier gpudesk/")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--side", nargs=2, help=argparse.SUPPRESS)  # DB SWEEP: one side's run
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps(one_side(args.side[0], int(args.side[1]))))
        return 0
    if args.before_code is None or not (args.before_code / "gpudesk").is_dir():
        parser.error("--before-code must be a folder holding an earlier gpudesk/ package")
    sweep = (args.jobs - QUEUED) * 9 // 10 // 50  # as bench/queue_name.py's
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="gpudesk-name-turns-") as tmp:
        home = Home(Path(tmp) / "home")
        result: dict[str, Any] = {
            **run_header(),
            "store": build_store(home, args.jobs, QUEUED),
        }
        runs: dict[str, list[dict[str, list[float]]]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for side, code in (("before", args.before_code), ("after", here)):
                db = Path(tmp) / f"{side}.db"  # a fresh copy each time: each side's schema
                shutil.copy(home.db, db)
                if side == "before":  # the store as schema 22 left it (the code before knew no 23)
                    with closing(sqlite3.connect(db)) as conn:
                        conn.executescript(SCHEMA_22)
                env = {**os.environ, "PYTHONPATH": str(code.resolve())}
                done = subprocess.run(
                    [sys.executable, __file__, "--side", str(db), str(sweep)],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if done.returncode:
                    raise SystemExit(f"the {side} side failed: {done.stderr.strip()}")
                runs[side].append(json.loads(done.stdout))
        for side, done in runs.items():
            result[side] = {
                name: {
                    "longest_ms": [
                        round(statistics.median(r[name][0] for r in done), 1),
                        round(max(r[name][0] for r in done), 1),
                    ],
                    "sum_ms": round(statistics.median(r[name][1] for r in done), 1),
                    "steps": done[0][name][2],
                }
                for name in done[0]
            }
    print(json.dumps(result, indent=2 if args.json else None))
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
