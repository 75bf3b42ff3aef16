"""The desk's closing line counts the engine's jobs as they are when it closes, not as the last
frame (a refresh old, or older) had them; a replay, which cannot ask, says as of when, and so
does a desk whose engine does not answer at once (frozen, or its connection busy): `q` closes
it at once all the same."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
import time
from collections.abc import Awaitable, Callable

import pytest
from conftest import EngineHandle
from replay import replay_feed
from test_desk_actions import SLEEP, until
from test_desk_snapshots import replayed

from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import EngineFeed


def closing_line(app: DeskApp, feed: EngineFeed, main: Callable[[], Awaitable[None]]) -> str:
    """What the desk says as it closes, once `main` has run it (its feed closed after)."""
    try:
        asyncio.run(main())
    finally:
        feed.close()
    return app.return_value or ""


def test_the_closing_line_counts_the_jobs_when_the_desk_closes(sim_engine: EngineHandle) -> None:
    # A long refresh: after its first frame the desk reads nothing more before it closes.
    feed = EngineFeed(sim_engine.home, interval=10.0)
    app = DeskApp(feed, refresh_s=10.0, workdir=sim_engine.home.root)

    async def main() -> None:
        async with app.run_test(size=(100, 32)) as pilot:
            await until(pilot, lambda: app.state.updates >= 1, what="the first frame")
            assert app.state.counts().get("running", 0) == 0
            ids = sim_engine.submit(
                *({"name": f"late{i}", "command": SLEEP, "gpus": 1} for i in range(2))
            )
            for job_id in ids:
                sim_engine.wait_state(job_id, "running")
            assert app.state.counts().get("running", 0) == 0  # the desk has not read them
            await pilot.press("q")

    said = closing_line(app, feed, main)
    assert "the engine goes on with 2 running and 0 queued job(s)." in said, said


def test_a_replay_says_as_of_when_its_counts_are() -> None:
    app = DeskApp(replay_feed(), refresh_s=0.05)

    async def main() -> None:
        async with app.run_test(size=(100, 32)) as pilot:
            await replayed(pilot)
            await pilot.press("q")

    asyncio.run(main())
    said = app.return_value or ""
    assert re.search(
        r"the engine goes on with 8 running and 3 queued job\(s\),\nas of \d\d:\d\d:\d\d, when",
        said,
    ), said
    assert all(len(line) <= 80 for line in said.splitlines())


@pytest.mark.slow(12)
def test_closing_on_an_engine_that_stopped_answering_is_at_once(sim_engine: EngineHandle) -> None:
    """The engine frozen (SIGSTOP): once the desk says ENGINE NOT ANSWERING, `q` does not ask
    it again (that waited out the connection's 10 s), and says the last frame's counts."""
    feed = EngineFeed(sim_engine.home, interval=0.2)
    app = DeskApp(feed, refresh_s=0.2, workdir=sim_engine.home.root)
    pid = sim_engine.pid
    assert pid is not None
    took: list[float] = []

    async def main() -> None:
        async with app.run_test(size=(100, 32)) as pilot:
            await until(pilot, lambda: app.state.updates >= 1, what="the first frame")
            os.kill(pid, signal.SIGSTOP)
            try:
                await until(
                    pilot, lambda: app.connection_note is not None, 30.0, "the engine's silence"
                )
                started = time.monotonic()
                await pilot.press("q")
                took.append(time.monotonic() - started)
            finally:
                os.kill(pid, signal.SIGCONT)

    said = closing_line(app, feed, main)
    assert "as of" in said, said
    assert took[0] < 1.0, f"q took {took[0]:.1f} s"


def test_closing_while_another_request_holds_the_connection_is_at_once(
    sim_engine: EngineHandle,
) -> None:
    """A request holding the desk's connection (a MIG repartition takes seconds): `q` does not
    wait for it (only `QUIT_BUSY_S`), and says the last frame's counts, as of when."""
    feed = EngineFeed(sim_engine.home, interval=0.2)
    app = DeskApp(feed, refresh_s=0.2, workdir=sim_engine.home.root)
    release = threading.Event()
    holding = threading.Event()

    def long_request() -> None:
        def hold(_client: object) -> None:
            holding.set()
            release.wait(120.0)

        feed._act(hold)

    holder = threading.Thread(target=long_request)
    still_holding: list[bool] = []

    async def main() -> None:
        async with app.run_test(size=(100, 32)) as pilot:
            await until(pilot, lambda: app.state.updates >= 1, what="the first frame")
            holder.start()
            await until(pilot, holding.is_set, what="the long request")
            await pilot.press("q")
            # the desk closed while the request still holds the connection: it did not wait
            # for it (a wall-clock bound would fail on a loaded machine: 2.1 s once beside
            # other work, for QUIT_BUSY_S's 0.3)
            still_holding.append(holder.is_alive() and not release.is_set())

    try:
        asyncio.run(main())
    finally:
        release.set()
        holder.join()
        feed.close()
    said = app.return_value or ""
    assert "as of" in said, said
    assert still_holding == [True]
