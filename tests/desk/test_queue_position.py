"""The queue keeps the job under the cursor, and where it is scrolled to, when its columns are
laid out again: a longer user name shown (USER widens) or the terminal resized. The job
actions act on the job under the cursor; a cursor sent back to the top would have `c` cancel
another job. On a recorded engine (replay)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec
from replay import opened, still_desk

from gpudesk.screens.app import FrameArrived
from gpudesk.screens.queue import QueueScreen
from gpudesk.screens.widgets.line_table import LineTable


async def near_the_end(pilot: Any) -> tuple[QueueScreen, LineTable]:
    """The queue, its cursor on the row before the last (scrolled, on a short terminal)."""
    screen = await opened(pilot, "2")
    assert isinstance(screen, QueueScreen)
    table = screen.query_one("#jobs", LineTable)
    assert table.row_count > 8
    for _ in range(table.row_count - 2):
        await pilot.press("down")
    await pilot.pause()
    return screen, table


def test_the_cursor_stays_on_its_job_when_a_longer_user_widens_the_user_column() -> None:
    app, last = still_desk()

    async def main() -> None:
        async with app.run_test(size=(100, 12)) as pilot:  # fewer rows than jobs: it scrolls
            screen, table = await near_the_end(pilot)
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
    app, _ = still_desk()

    async def main() -> None:
        async with app.run_test(size=(120, 12)) as pilot:
            screen, table = await near_the_end(pilot)
            chosen = screen.selected_id()
            width = screen.name_width
            await pilot.resize_terminal(80, 12)
            await pilot.pause()
            assert screen.name_width != width, "the resize did not lay the columns out again"
            assert screen.selected_id() == chosen
            assert table.scroll_y > 0

    asyncio.run(main())
