"""Asking the shared loaders for their status never stalls the engine (issue 36).

The engine asks each producer for its status every STATUS_EVERY_S, and at once for a `status`
request with `fresh_loaders` (`gpudesk run`'s report, `gpudesk compare`). A producer that does
not answer is waited for up to STATUS_TIMEOUT_MS; that wait was in the engine's loop, so every
other client waited a second with it, every two seconds. Real daemon, a real producer stopped
with SIGSTOP (a producer that does not answer), a real consumer job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineHandle, wait_for
from test_loader_engine import consumer_job, loader_engine, producer_pid

from gpudesk.api.connection import Connection
from gpudesk.engine.services.loaders import STATUS_EVERY_S
from gpudesk.loader.protocol import process_alive
from gpudesk.loader.status import STATUS_TIMEOUT_MS

__all__ = ["loader_engine"]  # the fixture, used by name

# A ping answered by a loop that is not waiting takes milliseconds, a few hundred on a loaded
# test machine. Assumption: half of STATUS_TIMEOUT_MS (the wait each status ask made) tells them
# apart.
PING_BOUND_S = STATUS_TIMEOUT_MS / 1000 / 2
# The pause between two pings: a stall of the loop is met by a ping sent within this of its
# start, which then waits out nearly all of it (a second's ask: well past PING_BOUND_S). Pings
# back to back kept this process and the engine's loop busy on both of CI's cores for seconds.
PING_GAP_S = 0.02


@pytest.mark.slow(13)
def test_a_producer_that_does_not_answer_never_stalls_other_requests(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    job, out = consumer_job(tmp_path, "long", 10_000, delay=0.02)  # reads until cancelled
    (job_id,) = loader_engine.submit(job)
    pid = wait_for(lambda: producer_pid(loader_engine), 30.0, what="the producer to start")
    assert isinstance(pid, int)
    wait_for(lambda: out.exists() and out.read_text(), 30.0, what="a first epoch")
    os.kill(pid, signal.SIGSTOP)
    try:
        fresh: list[dict[str, Any]] = []

        def ask_fresh() -> None:  # another client asks the producers now: it waits, alone
            with Connection(loader_engine.home, timeout=60.0) as other:
                fresh.append(other.request("status", fresh_loaders=True))

        asker = threading.Thread(target=ask_fresh)
        pings: list[float] = []
        with Connection(loader_engine.home, timeout=60.0) as mine:
            asker.start()
            # pings across two periodic asks and the fresh one, whichever ends last
            until = time.monotonic() + 2 * STATUS_EVERY_S + 0.5
            while time.monotonic() < until or asker.is_alive():
                started = time.monotonic()
                mine.request("ping")
                pings.append(time.monotonic() - started)
                time.sleep(PING_GAP_S)
        asker.join(60)
        assert max(pings) < PING_BOUND_S, f"the slowest pings took {sorted(pings)[-3:]} s"
        (loader,) = fresh[0]["loaders"]
        assert loader["name"] == "syn" and loader["running"]
    finally:
        os.kill(pid, signal.SIGCONT)
        loader_engine.client.request("cancel", jobs=[job_id], grace=0)


@pytest.mark.slow(15)
def test_stopping_a_producer_that_does_not_answer_never_stalls_other_requests(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    """Once no job needs it, a producer is asked for its final figures, told to stop and, still
    there STOP_WAIT_S later, killed: the loop had waited through all of it (a second's ask, then
    up to five for the process)."""
    job, out = consumer_job(tmp_path, "long", 10_000, delay=0.02)
    (job_id,) = loader_engine.submit(job)
    pid = wait_for(lambda: producer_pid(loader_engine), 30.0, what="the producer to start")
    assert isinstance(pid, int)
    wait_for(lambda: out.exists() and out.read_text(), 30.0, what="a first epoch")
    os.kill(pid, signal.SIGSTOP)  # SIGTERM waits, pending, for a SIGCONT that never comes
    try:
        loader_engine.client.request("cancel", jobs=[job_id], grace=0)
        pings: list[float] = []
        with Connection(loader_engine.home, timeout=60.0) as mine:
            # the grace (1 s here), the ask, STOP_WAIT_S, the kill: well within a minute
            until = time.monotonic() + 60.0
            while time.monotonic() < until and process_alive(pid):
                started = time.monotonic()
                mine.request("ping")
                pings.append(time.monotonic() - started)
                time.sleep(PING_GAP_S)
        assert not process_alive(pid), "the producer was never killed"
        assert max(pings) < PING_BOUND_S, f"the slowest pings took {sorted(pings)[-3:]} s"
        stopped = "shared loader 'syn' stopped: no queued or running job needs it"
        wait_for(
            lambda: stopped in loader_engine.home.engine_log.read_text(errors="replace"),
            10.0,
            what="the engine to say the producer stopped",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
