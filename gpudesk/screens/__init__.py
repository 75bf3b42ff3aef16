"""The Textual desk (`gpudesk` with no arguments). Screens talk to the engine only through a
`Feed` (gpudesk.screens.feed); `run_desk` wires one to a running engine. Textual is imported
only when the desk opens, so the other commands stay fast."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpudesk.screens.feed import Feed


class DeskFailed(Exception):
    """The desk stopped on an error Textual has already shown (a missing or broken stylesheet,
    an exception in a screen): the command must not exit 0 as if the user had left it."""

    def __init__(self, code: int) -> None:
        super().__init__(f"the desk stopped on an error (exit code {code})")
        self.code = code


class DeskSignalled(Exception):
    """SIGTERM or SIGHUP closed the desk (as `q` would, the terminal taken back): the command
    exits as a process that signal ended, 128 + its number, which is what a shell expects."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"closed by signal {signum}")
        self.signum = signum


def open_feed(refresh_s: float = 1.0, replay: Path | None = None) -> Feed:
    """The desk's feed: a recorded replay, or this home's engine (started if it is not
    running), whose first frame is being read already (EngineFeed.read_ahead): the engine
    answers while the caller loads Textual."""
    from gpudesk.paths import Home
    from gpudesk.screens.feed import EngineFeed, ReplayFeed

    if replay is not None:
        return ReplayFeed.load(replay)
    from gpudesk.api import Client

    home = Home.from_env()
    Client.connect(home).close()  # starts the engine when none runs
    feed = EngineFeed(home, interval=refresh_s)
    feed.read_ahead()
    return feed


def run_desk(
    readonly: bool = False, refresh_s: float = 1.0, replay: Path | None = None
) -> str | None:
    """Open the desk on this home's engine (started if it is not running), or on a recorded
    replay; returns the line to print when it closes."""
    feed = open_feed(refresh_s, replay)
    try:
        from gpudesk.screens.app import DeskApp  # Textual: loads while the feed reads

        app = DeskApp(feed, readonly=readonly, refresh_s=refresh_s)
        message = app.run()
    finally:
        feed.close()
    # Textual prints the error and returns normally; only its return code tells a crash apart.
    if app.return_code:
        raise DeskFailed(app.return_code)
    if app.closed_by_signal is not None:
        raise DeskSignalled(app.closed_by_signal)
    return message
