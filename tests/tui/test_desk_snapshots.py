"""Snapshots of every desk screen at 80×24 and 160×48, from a deterministic replay
(tests/tui/replay.py). Update them after a deliberate change with
`python -m pytest tests/tui --snapshot-update` and look at the report before committing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from replay import frames, replay_feed

from gpudesk.screens.app import DeskApp

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Event times are shown in local time: pin it, so the snapshots match on any machine."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


FRAME_COUNT = len(frames())


def desk() -> DeskApp:
    return DeskApp(replay_feed(), refresh_s=0.05)


async def replayed(pilot: Any) -> None:
    """Wait until the whole replay has been folded in."""
    app: DeskApp = pilot.app
    for _ in range(400):
        if app.state.updates >= FRAME_COUNT:
            break
        await pilot.pause(0.01)
    assert app.state.updates >= FRAME_COUNT, "the replay did not play"
    await pilot.pause()


def screen_steps(keys: tuple[str, ...]) -> Any:
    async def run_before(pilot: Any) -> None:
        await replayed(pilot)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await replayed(pilot)
        await pilot.pause(0.2)  # workers that load detail (show, mig_plan) answer at once

    return run_before


SCREENS = {
    "station": (),
    "queue": ("2",),
    "job": ("2", "down", "down", "enter"),  # the third row: job 3
    "loaders": ("3",),
    "mig": ("4",),
    "help": ("question_mark",),
}


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen_snapshot(snap_compare: Any, screen: str, size: str) -> None:
    assert snap_compare(desk(), terminal_size=SIZES[size], run_before=screen_steps(SCREENS[screen]))


def test_station_snapshot_without_colour(
    snap_compare: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NO_COLOR: bars, shares and sparklines must still read (they are drawn with characters)."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = desk()
    assert app.no_color
    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=screen_steps(()))
