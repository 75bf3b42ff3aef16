"""The queue drawn as lines: coming back to it renders again only the rows whose jobs changed
and lays the screen out once (every visible cell rendered again through Rich, then the scroll
bar in a paint of its own, made a switch to a queue of 300 jobs take ~150 ms); and the table
still moves its cursor with the keys and the mouse, opens the job on Enter or a click on the
cursor's row, filters, shows whole ids and scrolls through 10,000 jobs. On a recorded engine
(replay)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from replay import opened, still_desk
from rich.text import Text
from test_desk_actions import until
from textual.screen import Screen

from gpudesk.screens.app import FrameArrived
from gpudesk.screens.feed import Frame
from gpudesk.screens.job import JobScreen
from gpudesk.screens.queue import QueueScreen


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of everything Rich renders from a `Text` (a table cell, a header, a footer key),
    in order: a job row's cells appear here only when the row is rendered."""
    seen: list[str] = []
    render = Text.render

    def counted(self: Text, *args: Any, **kwargs: Any) -> Any:
        seen.append(self.plain)
        return render(self, *args, **kwargs)

    monkeypatch.setattr(Text, "render", counted)
    yield seen


def test_coming_back_to_the_queue_renders_only_the_rows_that_changed(
    rendered: list[str],
) -> None:
    """Away on the station while a frame comes (the running jobs' times move on; the rest are
    the same views), then back: the running rows are rendered again, the waiting and
    finished ones are drawn from their rows as rendered before."""
    app, last = still_desk()
    later = dataclasses.replace(last, taken_at=last.taken_at + 5.0)

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            await opened(pilot, "2")
            await pilot.press("1")
            await pilot.pause()
            app.post_message(FrameArrived(later))
            await until(pilot, lambda: app.state.frame is later, what="the later frame")
            running = [j for j in last.jobs if j.state == "running"]
            others = [j for j in last.jobs if j.state != "running"]
            assert running and others
            rendered.clear()
            await pilot.press("2")
            await until(
                pilot,
                lambda: all(j.name in rendered for j in running),
                what="the running rows drawn again",
            )
            await pilot.pause(0.1)
            assert isinstance(app.screen, QueueScreen)
            again = [j.name for j in others if j.name in rendered]
            assert not again, f"rows with nothing new were rendered again: {again}"

    asyncio.run(main())


def test_coming_back_to_the_queue_lays_the_screen_out_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The switch lays the screen out (Textual's switch_mode); the header's new text asks for
    no second layout (it is one line whatever it says). A second layout redrew the table's
    scroll bar in a paint of its own, ~30 ms after the screen's, at every switch."""
    app, last = still_desk()
    later = dataclasses.replace(last, taken_at=last.taken_at + 5.0)
    layouts: list[str] = []
    refresh_layout = Screen._refresh_layout

    def counted(self: Screen[Any], *args: Any, **kwargs: Any) -> Any:
        layouts.append(type(self).__name__)
        return refresh_layout(self, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counted)

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            await opened(pilot, "2")
            # once more: the first time back, Textual brings the screen's CSS up to date too
            await pilot.press("1", "2", "1")
            await pilot.pause()
            app.post_message(FrameArrived(later))
            await until(pilot, lambda: app.state.frame is later, what="the later frame")
            await pilot.pause(0.2)
            layouts.clear()
            await pilot.press("2")
            await pilot.pause(0.3)
            assert isinstance(app.screen, QueueScreen)
            assert layouts == ["QueueScreen"], layouts

    asyncio.run(main())


def many_jobs(frame: Frame, count: int) -> Frame:
    """`frame` with `count` finished jobs more (copies of its first finished one)."""
    done = next(j for j in frame.jobs if j.state in ("succeeded", "failed", "cancelled"))
    top = max(j.id for j in frame.jobs)
    extra = [
        msgspec.structs.replace(done, id=top + n, name=f"bulk-{n}") for n in range(1, count + 1)
    ]
    return dataclasses.replace(frame, jobs=[*frame.jobs, *extra])


def shown_ids(screen: QueueScreen) -> list[int]:
    """The ids on the table's lines as drawn (the header line left out)."""
    table: Any = screen.query_one("#jobs")
    lines = [table.render_line(y).text for y in range(1, table.size.height)]
    return [int(line.split()[0]) for line in lines if line.strip()]


def test_keys_move_the_cursor_and_scroll_through_ten_thousand_jobs() -> None:
    app, frame = still_desk(lambda f: many_jobs(f, 10_000))

    async def main() -> None:
        async with app.run_test(size=(100, 24)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            await pilot.press("o", "home")  # by id: 1, 2, 3 ... (the cursor kept its job)
            await pilot.pause()
            table: Any = screen.query_one("#jobs")
            ids = sorted(j.id for j in frame.jobs)
            assert table.row_count == len(ids) > 10_000
            page = table.size.height - 1  # the header line stays
            assert shown_ids(screen) == ids[:page]
            await pilot.press("down", "down")
            assert screen.selected_id() == ids[2]
            await pilot.press("up")
            assert screen.selected_id() == ids[1]
            await pilot.press("pagedown")
            await pilot.pause()
            assert screen.selected_id() == ids[1 + page]
            assert ids[1 + page] in shown_ids(screen)
            await pilot.press("pageup")
            await pilot.pause()
            assert screen.selected_id() == ids[1]
            await pilot.press("end")
            await pilot.pause()
            assert screen.selected_id() == ids[-1]
            assert shown_ids(screen) == ids[-page:]  # the last row on the last line
            await pilot.press("down")  # past the end: stays
            assert screen.selected_id() == ids[-1]
            await pilot.press("home")
            await pilot.pause()
            assert screen.selected_id() == ids[0]
            assert shown_ids(screen) == ids[:page]
            await pilot.press("up")  # before the start: stays
            assert screen.selected_id() == ids[0]

    asyncio.run(main())


def test_ids_of_four_digits_and_more_are_shown_whole() -> None:
    """ID is as wide as the largest id shown: a station's 1,000th job reads 1000, not 100."""
    app, frame = still_desk(lambda f: many_jobs(f, 1_200))

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            await pilot.press("o", "O", "ctrl+home")  # by id, largest first; the top
            await pilot.pause()
            ids = sorted((j.id for j in frame.jobs), reverse=True)
            assert ids[0] >= 1_200
            assert shown_ids(screen) == ids[: len(shown_ids(screen))]
            assert len(shown_ids(screen)) == screen.query_one("#jobs").size.height - 1

    asyncio.run(main())


def test_sorting_otherwise_keeps_the_job_under_the_cursor_in_sight() -> None:
    """`O` turns 300 jobs upside down: the cursor stays on its job, and the table scrolls to
    where that job went (it was put back at the top, the cursor out of sight)."""
    app, _ = still_desk(lambda f: many_jobs(f, 300))

    async def main() -> None:
        async with app.run_test(size=(100, 24)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            await pilot.press("down", "down")
            chosen = screen.selected_id()
            assert chosen in shown_ids(screen)
            await pilot.press("O")  # reversed: the top goes to the bottom
            await pilot.pause()
            assert screen.selected_id() == chosen
            assert chosen in shown_ids(screen), "the cursor's job is out of sight"

    asyncio.run(main())


def test_the_mouse_moves_the_cursor_and_a_click_on_it_opens_the_job() -> None:
    app, _ = still_desk()

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            table = screen.table
            third = table.row_keys[2]
            await pilot.hover("#jobs", offset=(10, 1 + 2))  # the header is line 0
            await pilot.pause()
            assert table.hover_row == 2
            await pilot.click("#jobs", offset=(10, 1 + 2))
            await pilot.pause()
            assert screen.selected_id() == int(third)
            assert isinstance(app.screen, QueueScreen), "the first click only selects"
            await pilot.click("#jobs", offset=(10, 0))  # the header: nothing
            await pilot.pause()
            assert screen.selected_id() == int(third)
            await pilot.click("#jobs", offset=(10, 1 + 2))
            await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the job's screen")
            assert isinstance(app.screen, JobScreen) and app.screen.job_id == int(third)

    asyncio.run(main())


def test_enter_opens_the_job_under_the_cursor() -> None:
    app, _ = still_desk()

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            await pilot.press("down", "down", "down")
            chosen = screen.selected_id()
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the job's screen")
            assert isinstance(app.screen, JobScreen) and app.screen.job_id == chosen

    asyncio.run(main())


def test_the_filter_keeps_the_cursor_on_its_job() -> None:
    """`/state:queued`: the queued jobs alone, the cursor still on the queued job it was on;
    Esc: every job again, the cursor on that job still."""
    app, frame = still_desk()
    queued = [j for j in frame.jobs if j.state == "queued" and not j.held]

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            table = screen.table
            target = str(queued[-1].id)
            table.move_cursor(table.row_keys.index(target))
            await pilot.press("slash", *"state:queued")
            await pilot.pause()
            assert sorted(table.row_keys) == sorted(str(j.id) for j in queued)
            assert screen.selected_id() == int(target)
            await pilot.press("enter", "escape")
            await pilot.pause()
            assert table.row_count == len(frame.jobs)
            assert screen.selected_id() == int(target)

    asyncio.run(main())


def test_a_job_gone_from_under_the_cursor_leaves_it_at_its_place() -> None:
    """The job under the cursor leaves the list (cleared, say): the cursor stays at its line
    (on the job now there), as squeue's watchers expect, not back at the top."""
    app, frame = still_desk()

    async def main() -> None:
        async with app.run_test(size=(120, 32)) as pilot:
            screen = await opened(pilot, "2")
            assert isinstance(screen, QueueScreen)
            table = screen.table
            table.move_cursor(4)
            gone = screen.selected_id()
            fewer = dataclasses.replace(frame, jobs=[j for j in frame.jobs if j.id != gone])
            app.post_message(FrameArrived(fewer))
            await until(pilot, lambda: table.row_count == len(fewer.jobs), what="one row fewer")
            assert table.cursor_row == 4 and screen.selected_id() != gone

    asyncio.run(main())
