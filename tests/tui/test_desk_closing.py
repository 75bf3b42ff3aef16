"""The desk's closing line counts the engine's jobs as they are when it closes, not as the last
frame (a refresh old, or older) had them; a replay, which cannot ask, says as of when."""

from __future__ import annotations

import asyncio
import re

from conftest import EngineHandle
from replay import replay_feed
from test_desk_actions import SLEEP, until
from test_desk_snapshots import replayed

from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import EngineFeed


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

    try:
        asyncio.run(main())
    finally:
        feed.close()
    said = app.return_value or ""
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
