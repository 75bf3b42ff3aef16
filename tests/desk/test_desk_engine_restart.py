"""The engine stopped while the desk is open (`gpudesk engine stop`, an upgrade, a crash its
unit restarts): the desk says ENGINE NOT ANSWERING, and follows the engine again once it is
back, its jobs and all (it said ENGINE NOT ANSWERING for ever, on the stopped engine's event
stream, until the desk was reopened)."""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import EngineHandle
from test_desk_actions import SLEEP, run_desk, until

from gpudesk.screens.app import DeskApp
from gpudesk.screens.widgets.strips import DeskHeader


def test_the_desk_follows_an_engine_that_stopped_and_came_back(sim_engine: EngineHandle) -> None:
    async def scenario(app: DeskApp, pilot: Any) -> None:
        await until(pilot, lambda: app.state.updates >= 1, what="the first frame")
        await asyncio.to_thread(sim_engine.stop)
        await until(pilot, lambda: app.connection_note is not None, what="the engine's absence")
        await asyncio.to_thread(
            sim_engine.start, backend="sim:dgx-station-a100", sample_interval=0.2
        )
        (job,) = await asyncio.to_thread(
            sim_engine.submit, {"name": "after-restart", "command": SLEEP}
        )
        await until(
            pilot,
            lambda: app.connection_note is None and app.state.job(job) is not None,
            timeout=20.0,
            what="the engine followed again",
        )
        header = str(app.screen.query_one(DeskHeader).render())
        assert "NOT ANSWERING" not in header, header

    run_desk(sim_engine, scenario)
