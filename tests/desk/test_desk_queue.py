"""The queue on a sweep's jobs (tests/desk/replay.py `sweep_feed`): what is running comes first,
and each job's distinguishing end of name shows at 80 columns and at 200; a running job's time
left, as a cell and as a sort key."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from replay import replay_feed, sweep_feed
from test_desk_snapshots import replayed, screen_steps

from gpudesk import render
from gpudesk.api.models import RemainingView
from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import Feed
from gpudesk.screens.queue import SORTS, QueueScreen, job_cells, sort_value
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.line_table import LineTable

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}


def sweep_desk() -> DeskApp:
    return DeskApp(sweep_feed(), refresh_s=0.05)


def queue_rows(app: DeskApp) -> list[dict[str, str]]:
    """The queue's rows as drawn on the terminal (what the user reads, not the cells' data):
    id, name and state cut out of each line by the header's column positions."""
    table = app.screen.query_one("#jobs", LineTable)
    lines = [table.render_line(y).text for y in range(table.size.height)]
    header = lines[0]
    name_at, state_at = header.index("NAME"), header.index("STATE")
    after_state = state_at + len("STATE") + 4 + 1
    rows = []
    for line in lines[1 : 1 + table.row_count]:
        rows.append(
            {
                "id": line[:name_at].split()[0],
                "name": line[name_at:state_at].strip(),
                "state": line[state_at:after_state].split()[0],
            }
        )
    return rows


def on_the_queue(size: tuple[int, int], keys: tuple[str, ...] = ()) -> list[dict[str, str]]:
    app = sweep_desk()

    async def main() -> list[dict[str, str]]:
        async with app.run_test(size=size) as pilot:
            await replayed(pilot)
            for key in ("2", *keys):
                await pilot.press(key)
                await pilot.pause()
            assert isinstance(app.screen, QueueScreen)
            return queue_rows(app)

    return asyncio.run(main())


def on_the_queue_of(feed: Feed, size: tuple[int, int]) -> list[str]:
    """The queue's lines as drawn, on `feed`."""
    app = DeskApp(feed, refresh_s=0.05)

    async def main() -> list[str]:
        async with app.run_test(size=size) as pilot:
            await replayed(pilot)
            await pilot.press("2")
            await pilot.pause()
            table = app.screen.query_one("#jobs", LineTable)
            return [table.render_line(y).text for y in range(table.size.height)]

    return asyncio.run(main())


def test_running_jobs_come_first_then_waiting_then_finished_newest_first() -> None:
    rows = on_the_queue(SIZES["80x24"])
    states = [r["state"] for r in rows]
    running = states.count("running")
    assert running >= 4 and states[:running] == ["running"] * running
    waiting = [s for s in states[running:] if s in ("queued", "held")]
    assert states[running : running + len(waiting)] == waiting and len(waiting) >= 2
    finished = rows[running + len(waiting) :]
    ended = {j.id: j.ended_at for j in sweep_feed().frames[-1].jobs}
    assert len(finished) == 3
    assert [int(r["id"]) for r in finished] == sorted(  # newest first
        (int(r["id"]) for r in finished), key=lambda i: -(ended[i] or 0)
    )
    # `o` still cycles the sort keys: by id next
    by_id = on_the_queue(SIZES["80x24"], ("o",))
    assert [int(r["id"]) for r in by_id] == sorted(int(r["id"]) for r in by_id)


@pytest.mark.parametrize("size", sorted(SIZES))
def test_each_sweep_name_keeps_its_distinguishing_end(size: str) -> None:
    """light-lr0.01-h512-1 and light-lr0.01-h512-3 differ in their last characters: at 80
    columns the name is cut in the middle, never at its end; USER takes only what its names
    need."""
    rows = on_the_queue(SIZES[size])
    feed = sweep_feed()
    names = {j.id: j.name for j in feed.frames[-1].jobs}
    for row in rows:
        full = names[int(row["id"])]
        shown = row["name"]
        assert shown == full or (
            "…" in shown and full.endswith(shown.split("…")[1]) and len(shown.split("…")[1]) >= 4
        ), (shown, full)
        assert full.endswith(shown[-4:]), (shown, full)
    if size == "200x50":
        assert all(row["name"] == names[int(row["id"])] for row in rows)
    assert len({row["name"] for row in rows}) == len(rows)  # every row tells its job apart


@pytest.mark.parametrize("size", sorted(SIZES))
def test_queue_snapshot_of_a_sweep(snap_compare: Any, size: str) -> None:
    """The queue of a sweep at 80×24 and 200×50: running jobs first, each name's end visible."""
    assert snap_compare(sweep_desk(), terminal_size=SIZES[size], run_before=screen_steps(("2",)))


def test_the_queue_shows_a_running_jobs_time_left_as_queue_long_does() -> None:
    """The queue's LEFT cell: `~12m00s` from the job's remaining time, `?` where it is unknown,
    blank for a job with none (waiting, finished, or in a listing from before the field);
    `gpudesk queue --long` writes the same (render.time_left), with "-" for none."""
    feed = replay_feed()
    state = DeskState(frame=feed.frames[-1])
    job = next(j for j in feed.frames[-1].jobs if j.state == "running")
    known = RemainingView(seconds=720.0, source="progress", done=480.0, total=1000.0)
    unknown = RemainingView(seconds=None, source="unknown", elapsed_s=30.0)
    cells = [
        job_cells(msgspec.structs.replace(job, remaining=r), state)["left"]
        for r in (known, unknown)
    ]
    assert [str(c) for c in cells] == ["~12m00s", "?"]
    assert str(job_cells(msgspec.structs.replace(job, remaining=None), state)["left"]) == ""
    assert [render.time_left(r) for r in (known, unknown, None)] == ["~12m00s", "?", "-"]


def test_the_queue_sorts_by_time_left_the_soonest_done_first() -> None:
    assert SORTS.index("left") == SORTS.index("runtime") + 1
    feed = replay_feed()
    job = next(j for j in feed.frames[-1].jobs if j.state == "running")
    soon, later = (
        msgspec.structs.replace(job, id=i, remaining=RemainingView(seconds=s, source="progress"))
        for i, s in ((1, 60.0), (2, 600.0))
    )
    unknown = msgspec.structs.replace(job, id=3, remaining=RemainingView(None, "unknown"))
    waiting = msgspec.structs.replace(job, id=4, state="queued", remaining=None)
    ordered = sorted([waiting, unknown, later, soon], key=lambda j: sort_value(j, "left"))
    assert [j.id for j in ordered] == [1, 2, 3, 4]
