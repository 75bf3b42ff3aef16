"""The loaders screen's empty state, and the running processes' view at 80×24."""

from __future__ import annotations

import asyncio

from replay import MPS_FAULT, STATION, replay_feed
from test_desk_snapshots import replayed
from textual.widgets import DataTable, Static

from gpudesk.screens.app import DeskApp


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
