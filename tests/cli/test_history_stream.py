"""`gpudesk history` written as the listing's pages arrive, on the real daemon watching a SIMULATED
station and a store of thousands of finished jobs: its table, CSV and JSON the same, to the
byte, as the rows gathered whole and written as history wrote them before; its memory flat
however many jobs it lists (it held every job's reply, 0.4-0.9 GiB for 100,000)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, fields

import pytest
from conftest import EngineHandle
from store_fill import corrupt_spec, fill_jobs

from gpudesk.api.models import JobStateName
from gpudesk.cli.common import simulated_banner
from gpudesk.cli.history_output import TIMES, HistoryRow, history_row, history_table, iso_utc

GPUDESK = [sys.executable, "-m", "gpudesk"]
FINISHED: list[JobStateName] = ["succeeded", "failed", "cancelled"]


def gpudesk(engine: EngineHandle, *args: str, columns: str | None) -> tuple[str, str]:
    env = {**os.environ, "GPUDESK_HOME": str(engine.home.root)}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run(
        [*GPUDESK, "history", *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def gathered(
    engine: EngineHandle, limit: int, fmt: str, width: int | None, start: float | None
) -> str:
    """What history printed before it streamed: every job of the listing gathered first (the
    API's job_listing), then written whole as it wrote them (asdict; print_json; csv.writer
    on stdout; the table with its banner, and the cut after it)."""
    listing = engine.api.job_listing(states=FINISHED, limit=limit, usage=True, archived=True)
    jobs = [j for j in listing.jobs if start is None or (j.ended_at or 0) >= start]
    rows = [history_row(job, listing.simulated) for job in jobs]
    out = io.StringIO()
    if fmt == "json":
        data = {"jobs": [asdict(row) for row in rows], "simulated": listing.simulated}
        print(json.dumps(data, indent=2, default=str), file=out)
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([f.name for f in fields(HistoryRow)])
        for row in rows:
            writer.writerow(
                [
                    "" if v is None else iso_utc(v) if k in TIMES else v
                    for k, v in asdict(row).items()
                ]
            )
    else:
        if listing.simulated:
            print(simulated_banner(listing.simulated), file=out)
        print(history_table(rows, width), file=out)
        if listing.more and len(jobs) == len(listing.jobs):
            total = engine.api.jobs_page(states=FINISHED, limit=1, archived=True, count=True).total
            assert total is not None
            older = f"{total - len(jobs) - len(listing.damaged)} older jobs"
            if start is None:
                print(f"… and {older} not shown; --limit N shows more", file=out)
            else:
                cut = "not looked at (some may have ended since); --limit N looks further"
                print(f"… and {older} {cut}", file=out)
    return out.getvalue()


@pytest.mark.slow(12)
def test_history_streams_the_same_bytes_as_it_printed_whole(sim_engine: EngineHandle) -> None:
    engine = sim_engine
    on_gpu, failed = engine.submit(
        {"name": "on-gpu", "command": ["sleep", "0.3"], "gpus": 1},
        {"name": "ça-échoue", "command": ["sh", "-c", "exit 3"], "comment": 'lr=3e-4 ✓ "a"'},
    )
    for job in (on_gpu, failed):
        engine.wait_state(job, {"succeeded", "failed"})
    an_hour_ago = time.time() - 3600  # the table's ENDED shows a time, not a date, for these
    two_days_ago = time.time() - 2 * 86400
    old = fill_jobs(engine.home.db, finished=160, ended_at=two_days_ago, name="old-sweep-ø")
    fill_jobs(engine.home.db, finished=340, ended_at=an_hour_ago, name="sweep-lr-1e-3")
    corrupt_spec(engine.home.db, old[5])  # a row the store cannot read: left out, said
    recent = time.time() - 86400  # --since 1d: the old sweep is dropped

    for fmt in ("csv", "json", "table"):
        for limit in (100_000, 200):  # all, oldest first; the newest 200 of 502 (2 pages)
            for since, start in ((None, None), ("1d", recent)):
                for columns, width in ((None, None), ("80", 80)):
                    if columns and fmt != "table":
                        continue
                    args = ["--format", fmt, "--limit", str(limit)]
                    args += ["--since", since] if since else []
                    printed, said = gpudesk(engine, *args, columns=columns)
                    expected = gathered(engine, limit, fmt, width, start)
                    assert printed == expected, (fmt, limit, since, columns)
                    unread = "job record(s) in the engine's store cannot be read" in said
                    assert unread == (limit > 502), said


# `gpudesk ARGS` that says its peak RSS last, on stderr: the kernel's high-water mark of this
# process's own memory (VmHWM). Not the rusage a parent reads, which counts what the child
# shared with pytest between its fork and its exec (some 70 MiB).
PEAK_RSS = """
import atexit, runpy, sys
def said():
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(f"peak-rss-kib {kib}", file=sys.stderr)
atexit.register(said)
sys.argv = ["gpudesk", *sys.argv[1:]]
runpy.run_module("gpudesk", run_name="__main__")
"""


def peak_rss_of(args: list[str], env: dict[str, str]) -> tuple[int, int]:
    """`gpudesk ARGS` run to its end: (its peak RSS in bytes, bytes it printed)."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *args], capture_output=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    kib = int(done.stderr.decode().rsplit("peak-rss-kib ", 1)[1])
    return kib * 1024, len(done.stdout)


@pytest.mark.slow(20)
def test_history_lists_20000_jobs_in_the_memory_it_lists_100(sim_engine: EngineHandle) -> None:
    """CSV and JSON of 20,000 jobs (200 pages) in about the memory of one page: the rows go
    out as they come (before, 20,000 took some 35 MiB (CSV) and 130 MiB (JSON) more than 100,
    and 100,000 jobs with their usage 0.4-0.9 GiB)."""
    engine = sim_engine
    fill_jobs(engine.home.db, finished=20_000, ended_at=time.time() - 3600, name="sweep")
    env = {**os.environ, "GPUDESK_HOME": str(engine.home.root)}
    for fmt in ("csv", "json"):
        few, few_bytes = peak_rss_of(["history", "-f", fmt, "--limit", "100"], env)
        many, many_bytes = peak_rss_of(["history", "-f", fmt, "--limit", "100000"], env)
        assert many_bytes > 150 * few_bytes  # it did list them all
        assert many - few < 12 * 2**20, (fmt, few >> 20, many >> 20)
