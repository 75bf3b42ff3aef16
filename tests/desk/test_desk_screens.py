"""The loaders screen's empty state, and the running processes' view at 80×24 (a long list
beside its scroll bar)."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import msgspec
import pytest
from replay import MPS_FAULT, STATION, opened, replay_feed, still_desk
from test_desk_snapshots import replayed
from textual.widgets import DataTable, Static

from gpudesk.api import JobView
from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import Frame
from gpudesk.screens.help import KEYS
from gpudesk.screens.widgets.strips import DeskHeader


def test_no_loaders_shows_the_hint_and_no_empty_table_header() -> None:
    async def main(path: object, expect_table: bool) -> None:
        app = DeskApp(replay_feed(path), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(80, 24)) as pilot:
            await replayed(pilot)
            await pilot.press("3")
            await pilot.pause()
            table = app.screen.query_one("#loaders", DataTable)
            note = str(app.screen.query_one("#loaders-note", Static).render())
            assert table.display is expect_table
            if not expect_table:
                assert note.startswith("no shared loaders")
            else:
                assert table.row_count >= 2

    asyncio.run(main(MPS_FAULT, False))  # recorded with no shared loader
    asyncio.run(main(STATION, True))


def test_the_running_jobs_have_a_screen_of_their_own_at_80x24() -> None:
    """nvitop's process table: at 80×24 the station's cards fill the screen, so the running
    jobs are one key away (5), each with its placement, mode, SM and GPU memory."""
    app = DeskApp(replay_feed(STATION), refresh_s=0.05)

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await replayed(pilot)
            # The list is fitted after each refresh (call_after_refresh): a loaded machine may
            # not have run the fit for the laid-out cards yet. Wait for it, then look.
            station_jobs = app.screen.query_one("#station-jobs")
            for _ in range(300):
                if not station_jobs.display:
                    break
                await pilot.pause(0.01)
            assert station_jobs.display is False
            await pilot.press("5")
            await pilot.pause()
            assert app.current_mode == "processes"
            text = str(app.screen.query_one("#processes", Static).render())
            running = [j for j in app.state.jobs if j.state == "running"]
            assert f"running jobs ({len(running)})" in text and len(running) >= 4
            for job in running:
                assert f"{job.id}  " in text
            assert "SM" in text and "GPU MEM" in text and "2g.10gb" in text
            assert any(row[1].startswith("running jobs") for _, rows in KEYS for row in rows)

    asyncio.run(main())


def more_running(frame: Frame, count: int = 30, name: str | None = None) -> Frame:
    """`frame` with `count` running jobs more (copies of its own, ids from 1000, named `name`
    and their number where given)."""
    running = [j for j in frame.jobs if j.state == "running"]
    many = [
        msgspec.structs.replace(
            running[n % len(running)],
            id=1000 + n,
            name=running[n % len(running)].name if name is None else f"{name}{n}",
        )
        for n in range(count)
    ]
    return dataclasses.replace(frame, jobs=[*frame.jobs, *many])


def test_a_long_list_of_running_jobs_fits_beside_its_scroll_bar() -> None:
    """More running jobs than the screen has lines (19 at 80×24): the list scrolls, and each
    job still takes one line (its width leaves room for the scroll bar, no line wraps)."""
    # names longer than the list has room for: its lines fill the width
    app, frame = still_desk(lambda last: more_running(last, name="pretrain-heavy-lr0.001-h1024-"))

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await opened(pilot, "5")
            await pilot.pause()
            body = screen.query_one("#processes-body")
            listing = screen.query_one("#processes", Static)
            lines = str(listing.render()).splitlines()
            assert len(lines) == 2 + sum(j.state == "running" for j in frame.jobs)
            assert len(lines) > body.size.height, "the list should need to scroll"
            assert listing.size.height == len(lines), "a line of the list wrapped"

    asyncio.run(main())


def test_a_sweeps_running_jobs_stay_apart_at_80_columns() -> None:
    """Two running jobs of a sweep, on MIG slices, whose names differ in the middle (lr 0.01
    and 0.001), among long-running jobs of a long user name: at 80 columns each name is cut
    where the two stay apart, as `gpudesk queue` cuts them (not both `lig…1-h512-1`)."""
    names = {5: "light-lr0.01-h512-1", 6: "light-lr0.001-h512-1"}

    def long_running(job: JobView) -> JobView:
        if job.state != "running":
            return job
        assert job.usage is not None and job.started_at is not None
        return msgspec.structs.replace(
            job,
            id=1234 if job.id == 9 else job.id,
            name=names.get(job.id, job.name),
            user="alexandra",
            started_at=job.started_at - 26 * 3600,
            usage=msgspec.structs.replace(job.usage, total_j=4.5e6, estimate=True),
        )

    app, frame = still_desk(
        lambda last: dataclasses.replace(last, jobs=[long_running(j) for j in last.jobs])
    )
    assert all(
        j.state == "running" and "2g.10gb" in (j.slot or "") for j in frame.jobs if j.id in names
    )

    async def main() -> list[str]:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await opened(pilot, "5")
            return str(screen.query_one("#processes", Static).render()).splitlines()

    lines = asyncio.run(main())
    assert all(len(line) <= 78 for line in lines), lines
    users = {line.split()[2] for line in lines[2:]}
    assert users == {"alexandra"}, lines  # the user whole: CPU gave way, not the user
    assert any("1.25 kWh" in line and "1234" in line for line in lines), lines
    shown = {int(line.split()[0]): line.split()[1] for line in lines[2:]}
    assert shown[5] != shown[6], lines


def test_the_cut_job_list_under_the_cards_names_the_key_that_lists_them_all() -> None:
    """More running jobs than fit under the cards (200×50): the list ends with how many more
    there are and the key of the screen that lists every running job (5), which does."""
    app, frame = still_desk(more_running)

    async def main() -> None:
        async with app.run_test(size=(200, 50)) as pilot:
            jobs = app.screen.query_one("#station-jobs", Static)
            for _ in range(200):
                if jobs.display and " more " in str(jobs.render()):
                    break
                await pilot.pause(0.02)
            end = str(jobs.render()).splitlines()[-1]
            assert re.fullmatch(r"… \d+ more \(5: every running job\)", end), end
            screen = await opened(pilot, "5")
            text = str(screen.query_one("#processes", Static).render())
            assert f"running jobs ({sum(j.state == 'running' for j in frame.jobs)})" in text

    asyncio.run(main())


def test_the_mig_screen_paints_again_only_what_changed() -> None:
    """The MIG screen redraws from the state each time it comes back and asks the engine for
    its plan again: neither the same layout nor the same plan is painted a second time (in its
    scrolling body each paint lays the screen out, and Textual repaints the scroll bars in a
    paint of its own, 30-60 ms after the switch's: the key then took 100-135 ms); a different
    answer is painted."""
    from gpudesk.screens.mig import MigScreen
    from gpudesk.screens.widgets.text_panel import TextPanel

    app, _ = still_desk()

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await opened(pilot, "4")
            assert isinstance(screen, MigScreen)
            for _ in range(200):
                if screen.plans is not None or screen.error is not None:
                    break
                await pilot.pause(0.02)
            painted: list[str] = []
            for panel in screen.query(TextPanel):
                original = panel.update

                def spy(
                    *a: object, _o: object = original, _id: object = panel.id, **k: object
                ) -> None:
                    painted.append(str(_id))
                    _o(*a, **k)  # type: ignore[operator]

                panel.update = spy  # type: ignore[method-assign]
            screen.redraw()
            screen._loaded(screen.plans, screen.error)
            assert painted == []
            await opened(pilot, "1")
            await opened(pilot, "4")
            assert painted == []
            screen._loaded(None, "no plan: the engine went away")
            assert painted == ["mig-plans"]

    asyncio.run(main())


@pytest.mark.parametrize("size", [(20, 8), (30, 10), (12, 6)])
def test_a_tiny_desk_still_says_simulated(size: tuple[int, int]) -> None:
    """Where the header is short of room the backend's name is cut, never the SIMULATED label
    (at 20x8 it read ` gpudesk  sim:dgx-…`, SIMULATED nowhere on screen)."""
    feed = replay_feed(STATION)
    app = DeskApp(feed, refresh_s=0.05)

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await replayed(pilot)
            shown = app.screen.query_one(DeskHeader).render_line(0).text
            assert "SIMULATED" in shown, shown

    asyncio.run(main())
