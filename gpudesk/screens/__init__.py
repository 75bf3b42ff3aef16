"""The Textual desk (`gpudesk` with no arguments). Screens talk to the engine only through a
`Feed` (gpudesk.screens.feed); `run_desk` wires one to a running engine. Textual is imported
only when the desk opens, so the other commands stay fast."""

from __future__ import annotations

from pathlib import Path


def run_desk(
    readonly: bool = False, refresh_s: float = 1.0, replay: Path | None = None
) -> str | None:
    """Open the desk on this home's engine (started if it is not running), or on a recorded
    replay; returns the line to print when it closes."""
    from gpudesk.paths import Home
    from gpudesk.screens.app import DeskApp
    from gpudesk.screens.feed import EngineFeed, Feed, ReplayFeed

    feed: Feed
    if replay is not None:
        feed = ReplayFeed.load(replay)
    else:
        from gpudesk.api import Client

        home = Home.from_env()
        Client.connect(home).close()  # starts the engine when none runs
        feed = EngineFeed(home, interval=refresh_s)
    try:
        return DeskApp(feed, readonly=readonly, refresh_s=refresh_s).run()
    finally:
        feed.close()
