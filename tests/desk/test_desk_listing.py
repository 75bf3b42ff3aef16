"""The desk over a store of more finished jobs than a page, one of them damaged, on a real
engine: it says (a notice) which job row cannot be read and that older finished jobs are left
out, and `b` in the queue loads them a page at a time (issue 36, findings 4 and 11)."""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import EngineHandle
from store_fill import corrupt_spec, fill_jobs

from gpudesk.engine.store.database import Store
from gpudesk.paths import Home
from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import EngineFeed
from gpudesk.screens.queue import QueueScreen

SIZE = (100, 32)


async def until(pilot: Any, predicate: Any, what: str, timeout: float = 20.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := predicate()):
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)
    return value


def notices(app: DeskApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def test_the_desk_says_what_it_left_out_and_loads_older_jobs_on_b(
    home: Home, engine: EngineHandle
) -> None:
    engine.stop()
    home.ensure()
    Store.open(home.db).close()
    ids = fill_jobs(home.db, finished=250, name="done")
    corrupt_spec(home.db, ids[-1])
    engine.start()

    feed = EngineFeed(home, interval=0.2)
    app = DeskApp(feed, refresh_s=0.2, workdir=home.root)

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(
                pilot,
                lambda: any(f"job {ids[-1]}:" in n for n in notices(app)),
                "a notice naming the damaged job",
            )
            assert any("older finished jobs" in n for n in notices(app))
            await pilot.press("2")
            screen = await until(
                pilot, lambda: isinstance(app.screen, QueueScreen) and app.screen, "the queue"
            )
            table = screen.query_one("#jobs")
            first = await until(pilot, lambda: table.row_count, "the queue's rows")
            assert first < len(ids) - 1, "only the newest finished jobs at first"
            await pilot.press("b")
            await until(pilot, lambda: table.row_count > first, "older finished jobs")

    try:
        asyncio.run(main())
    finally:
        feed.close()
