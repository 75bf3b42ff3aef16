"""A shared loader's restarts are counted where status shows them (issue 36, finding 11c).

The engine restarts a producer that dies while jobs need it. Its count of restarts did two
jobs: the number status reports, and the count RESTART_LIMIT bounds, which starts afresh once
a consumer connects again. So a producer killed three times, each time back and serving, was
reported `restarts: 0`. Real daemon, real producer processes, a real consumer job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_loader_engine import consumer_job, loader_engine, producer_pid

from gpudesk.api.models import LoaderView

__all__ = ["loader_engine"]  # the fixture, used by name

KILLS = 3


def loader_view(engine: EngineHandle) -> LoaderView:
    """The `syn` loader as `status` shows it, its producer asked afresh."""
    (loader,) = engine.api.status(fresh_loaders=True).loaders
    return loader


def epochs_read(out: Path) -> int:
    """Whole epochs the consumer job has written out so far."""
    try:
        return out.read_text().count("\n")
    except FileNotFoundError:
        return 0


def serving(engine: EngineHandle, pid: int) -> bool:
    """Producer `pid` is the engine's and a consumer reads from it."""
    loader = loader_view(engine)
    status = loader.status
    return loader.pid == pid and status is not None and status.pid == pid and bool(status.consumers)


@pytest.mark.slow(21)
def test_a_producer_killed_three_times_is_reported_restarted_three_times(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    job, out = consumer_job(tmp_path, "long", 10_000, delay=0.02)  # reads until cancelled
    (job_id,) = loader_engine.submit(job)
    try:
        pid = wait_for(lambda: producer_pid(loader_engine), 30.0, what="the producer to start")
        for kill in range(1, KILLS + 1):
            # killed only once its consumer has read a whole epoch more from it: the restart
            # before this one worked, and the consumer is past its first connection (a
            # producer killed during that one fails the job: not what this test is about)
            epochs = epochs_read(out)
            wait_for(lambda n=epochs: epochs_read(out) > n, 30.0, what="an epoch read")
            wait_for(lambda p=pid: serving(loader_engine, p), 30.0, what="a consumer to read")
            os.kill(pid, signal.SIGKILL)
            pid = wait_for(
                lambda old=pid: (p := producer_pid(loader_engine)) and p != old and p,
                30.0,
                what=f"the engine to restart the producer after kill {kill}",
            )
        wait_for(lambda p=pid: serving(loader_engine, p), 30.0, what="the consumer to resume")
        assert loader_view(loader_engine).restarts == KILLS
        shown = subprocess.run(
            [sys.executable, "-m", "gpudesk", "engine", "status", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        (loader,) = json.loads(shown.stdout)["loaders"]
        assert loader["restarts"] == KILLS, loader
        assert loader_engine.job(job_id).state == "running"  # its consumer read on
    finally:
        loader_engine.api.cancel([job_id], grace=0)
