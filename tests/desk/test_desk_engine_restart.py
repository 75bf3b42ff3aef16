"""The engine stopped while the desk is open (`gpudesk engine stop`, an upgrade, a crash its
unit restarts): the desk says ENGINE NOT ANSWERING, and follows the engine again once it is
back, its jobs and all (it said ENGINE NOT ANSWERING for ever, on the stopped engine's event
stream, until the desk was reopened)."""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import EngineHandle
from test_desk_actions import SLEEP, run_desk, until

from gpudesk.screens import app as app_module
from gpudesk.screens.app import DeskApp, FeedTrouble
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


def test_one_outage_is_one_notice(sim_engine: EngineHandle, monkeypatch: Any) -> None:
    """The feed says the engine is not answering at every retry; the desk says it once an
    outage (the header keeps saying it), and again only for a new outage after the engine
    came back. It stacked a toast every retry (three within 8 s)."""
    monkeypatch.setattr(app_module, "RETRY_S", 0.05)
    heard: list[str | None] = []
    told = DeskApp.on_feed_trouble

    def counted(app: DeskApp, message: FeedTrouble) -> None:
        heard.append(message.problem)
        told(app, message)

    monkeypatch.setattr(DeskApp, "on_feed_trouble", counted)
    notified: list[str] = []  # every notice, the ones expired since too
    notify = DeskApp.notify

    def kept(app: DeskApp, message: str, **how: Any) -> None:
        notified.append(message)
        notify(app, message, **how)

    monkeypatch.setattr(DeskApp, "notify", kept)

    def lost() -> int:
        return sum(1 for problem in heard if problem)

    def said() -> int:
        return sum("engine not answering" in notice for notice in notified)

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await until(pilot, lambda: app.state.updates >= 1, what="the first frame")
        await asyncio.to_thread(sim_engine.kill9)
        await until(pilot, lambda: lost() >= 5, what="the feed's retries")
        assert said() == 1
        await asyncio.to_thread(
            sim_engine.start, backend="sim:dgx-station-a100", sample_interval=0.2
        )
        await until(pilot, lambda: app.connection_note is None, what="the engine back")
        await asyncio.to_thread(sim_engine.kill9)
        before = lost()
        await until(pilot, lambda: lost() >= before + 5, what="the second outage's retries")
        assert said() == 2

    run_desk(sim_engine, scenario)
