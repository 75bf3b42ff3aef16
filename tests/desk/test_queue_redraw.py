"""The queue draws its rows again only when what it shows from changed: a new frame, the
filter, the sort or the columns. Coming back to the queue with nothing new skips going over
every row (a busy station's desk has 500 of them at its first paint), and a resize that
changes the columns draws every row again in the new ones. On a recorded engine (replay)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from replay import opened, replay_feed, still_desk

from gpudesk.screens import queue as queue_screen
from gpudesk.screens.app import DeskApp, FrameArrived
from gpudesk.screens.queue import QueueScreen
from gpudesk.screens.widgets.line_table import LineTable


@pytest.fixture
def cells_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The id of each job the queue makes cells for, in order (queue_screen.job_cells)."""
    made: list[int] = []
    job_cells = queue_screen.job_cells

    def counted(job: Any, *args: Any) -> Any:
        made.append(job.id)
        return job_cells(job, *args)

    monkeypatch.setattr(queue_screen, "job_cells", counted)
    return made


def test_the_queue_goes_over_its_rows_only_when_what_it_shows_from_changed(
    cells_made: list[int],
) -> None:
    feed = replay_feed()
    app = DeskApp(feed, refresh_s=60.0)  # one frame, the replay's first, for the whole test

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            while not app.state.jobs:
                await pilot.pause(0.05)
            await pilot.press("2")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, QueueScreen)
            table = screen.query_one("#jobs", LineTable)
            shown = len(app.state.jobs)
            assert table.row_count == shown and len(cells_made) >= shown
            before = len(cells_made)
            await pilot.press("1", "2")  # away and back: the same frame
            await pilot.pause()
            assert len(cells_made) == before, "the same frame went over every row again"
            await pilot.press("o")  # sorted otherwise: drawn again
            await pilot.pause()
            assert len(cells_made) > before
            before = len(cells_made)
            await pilot.resize_terminal(80, 32)  # a narrower name column: new columns
            await pilot.pause()
            assert len(cells_made) > before
            assert table.row_count == shown
            assert screen.name_width < 40
            name = next(c for c in table.columns if c.key == "name")
            assert name.width == screen.name_width

    try:
        asyncio.run(main())
    finally:
        feed.close()


def test_a_new_frame_goes_over_the_running_rows_only(cells_made: list[int]) -> None:
    """A frame with the same job views (the feed re-reads the table every few refreshes) makes
    new cells for the running jobs alone: their time moves; the others' cells are as drawn.
    Going over every row made a switch to the queue of 300 jobs ~0.2 s."""
    app, last = still_desk()
    later = dataclasses.replace(last, taken_at=last.taken_at + 5.0)  # the same views, later

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            cells_made.clear()
            app.post_message(FrameArrived(later))
            await pilot.pause(0.2)
            running = sorted(j.id for j in last.jobs if j.state == "running")
            assert sorted(cells_made) == running and len(running) < len(last.jobs)
            table = screen.query_one("#jobs", LineTable)
            row = table.get_row(str(running[0]))
            assert str(row[[c.key for c in screen.columns].index("runtime")]) != "27.0s"

    asyncio.run(main())


def test_the_queue_keeps_the_cells_of_the_jobs_it_lists_only() -> None:
    """Jobs that left the list (here: gone from the frame) take their cells with them: a desk
    open for weeks, paging through older finished jobs, does not keep every job ever shown."""
    app, last = still_desk()
    fewer = dataclasses.replace(last, jobs=last.jobs[: len(last.jobs) // 2])

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            table = screen.query_one("#jobs", LineTable)
            app.post_message(FrameArrived(fewer))
            for _ in range(100):
                if table.row_count == len(fewer.jobs):
                    break
                await pilot.pause(0.02)
            listed = {int(key) for key in table.row_keys}
            assert listed == {j.id for j in fewer.jobs}
            assert set(screen._cells) == listed

    asyncio.run(main())
