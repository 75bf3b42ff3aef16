"""The queue keeps the job under the cursor, and where it is scrolled to, when its columns are
laid out again: a longer user name shown (USER widens) or the terminal resized. The job
actions act on the job under the cursor; a cursor sent back to the top would have `c` cancel
another job. On a recorded engine (replay)."""

from __future__ import annotations

import asyncio
import dataclasses

import msgspec
from replay import replay_feed
from textual.widgets import DataTable

from gpudesk.screens.app import DeskApp, FrameArrived
from gpudesk.screens.feed import ReplayFeed
from gpudesk.screens.queue import QueueScreen


def test_the_cursor_stays_on_its_job_when_a_longer_user_widens_the_user_column() -> None:
    recorded = replay_feed()
    last = recorded.frames[-1]
    feed = ReplayFeed([last], recorded.shows, recorded.plan)
    app = DeskApp(feed, refresh_s=60.0)

    async def main() -> None:
        async with app.run_test(size=(100, 12)) as pilot:  # fewer rows than jobs: it scrolls
            while not app.state.jobs:
                await pilot.pause(0.05)
            await pilot.press("2")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, QueueScreen)
            table = screen.query_one("#jobs", DataTable)
            assert table.row_count > 8
            for _ in range(table.row_count - 2):
                await pilot.press("down")
            await pilot.pause()
            chosen = screen.selected_id()
            scroll_y = table.scroll_y
            assert chosen is not None and scroll_y > 0
            width = screen.user_width
            other = next(j for j in last.jobs if j.id != chosen)
            renamed = [
                msgspec.structs.replace(j, user="alexandra") if j.id == other.id else j
                for j in last.jobs
            ]
            app.post_message(FrameArrived(dataclasses.replace(last, jobs=renamed)))
            for _ in range(100):
                if screen.user_width != width:
                    break
                await pilot.pause(0.02)
            await pilot.pause()
            assert screen.user_width > width, "the user column did not widen"
            assert screen.selected_id() == chosen
            assert table.scroll_y == scroll_y

    asyncio.run(main())


def test_the_cursor_stays_on_its_job_when_a_resize_lays_the_columns_out_again() -> None:
    recorded = replay_feed()
    feed = ReplayFeed([recorded.frames[-1]], recorded.shows, recorded.plan)
    app = DeskApp(feed, refresh_s=60.0)

    async def main() -> None:
        async with app.run_test(size=(120, 12)) as pilot:
            while not app.state.jobs:
                await pilot.pause(0.05)
            await pilot.press("2")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, QueueScreen)
            table = screen.query_one("#jobs", DataTable)
            for _ in range(table.row_count - 2):
                await pilot.press("down")
            await pilot.pause()
            chosen = screen.selected_id()
            width = screen.name_width
            await pilot.resize_terminal(80, 12)
            await pilot.pause()
            assert screen.name_width != width, "the resize did not lay the columns out again"
            assert screen.selected_id() == chosen
            assert table.scroll_y > 0

    asyncio.run(main())
