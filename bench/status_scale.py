"""Issue 36: how long `status` holds the engine's loop with a large store, when fair-share usage
must be worked out afresh for each one (an attempt ended since the last `status`).

    python bench/status_scale.py [--jobs 20000] [--rounds 30] [--json]

Builds the store of bench/store_scale.py (`--jobs` jobs, all finished over the last 60 days, three
owners, none queued), starts a personal engine on it (GPUDESK_BACKEND=none, 4 slots, metrics on a
free loopback port) and times its start. Then, `--rounds` times: submit a job that exits at once,
wait for it to end, ask `status`. Each such `status` finds a new ended attempt, so its fair-share
usage cannot be the remembered one: this is the cost a busy station's desk pays, not the cached
one. The times are the engine's own (the metrics endpoint's gpudesk_engine_request_seconds for
op "status", and the loop record's slowest requests), not the bench's wall clock, which a loaded
machine would blur.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_scale import build_store, request_histograms, start_timed_engine, stop

from gpudesk.api.client import Client
from gpudesk.core.jobs import JobSpec
from gpudesk.paths import Home

JOB_END_TIMEOUT_S = 60.0  # a job of `true` ends in milliseconds; this is only a deadline


def wait_ended(client: Client, job_id: int) -> None:
    deadline = time.monotonic() + JOB_END_TIMEOUT_S
    while time.monotonic() < deadline:
        if client.show(job_id).job.state in ("succeeded", "failed", "cancelled"):
            return
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} did not end within {JOB_END_TIMEOUT_S:g} s")


def measure(home: Home, rounds: int) -> dict[str, Any]:
    result: dict[str, Any] = {"engine_start_s": start_timed_engine(home)}
    with Client.attach(home, timeout=120.0) as client:
        for _ in range(rounds):
            (job_id,) = client.submit([JobSpec(name="blip", command=("true",))])
            wait_ended(client, job_id)
            client.status()
        last = client.status()
    url = last.station.metrics_url
    result["status"] = request_histograms(url).get("status") if url else None
    if last.loop is not None:
        result["loop_slowest"] = [(r.op, r.ms) for r in last.loop.slowest]
        result["turn_slowest"] = [(t.step, t.step_ms) for t in last.loop.turns.slowest]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs in the store")
    parser.add_argument("--rounds", type=int, default=30, help="statuses after an attempt ended")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpudesk-status-") as tmp:
        home = Home(Path(tmp) / "home")
        result: dict[str, Any] = {"jobs": args.jobs, "store": build_store(home, args.jobs, 0)}
        try:
            result.update(measure(home, args.rounds))
        finally:
            stop(home)
    print(json.dumps(result, indent=2 if args.json else None))
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
