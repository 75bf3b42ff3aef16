"""Snapshots of every desk screen at 80×24 and 160×48, from replays recorded from real engines
(tests/desk/replay.py; `python tests/desk/record_replay.py` records them). Update them after a
deliberate change with `python -m pytest tests/desk --snapshot-update` and look at the report
before committing."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replay import MPS_FAULT, STATION, replay_feed

from gpudesk.screens.app import DeskApp
from gpudesk.screens.queue import QueueScreen
from gpudesk.screens.widgets.gpu_card import GpuCard
from gpudesk.screens.widgets.strips import DeskHeader

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Event times are shown in local time: pin it, so the snapshots match on any machine."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def desk(path: Path = STATION) -> DeskApp:
    return DeskApp(replay_feed(path), refresh_s=0.05)


async def replayed(pilot: Any) -> None:
    """Wait until the whole replay has been folded in."""
    app: DeskApp = pilot.app
    frames = len(app.feed.frames)  # type: ignore[attr-defined]  (a ReplayFeed)
    for _ in range(400):
        if app.state.updates >= frames:
            break
        await pilot.pause(0.01)
    assert app.state.updates >= frames, "the replay did not play"
    await pilot.pause()


async def details_loaded(pilot: Any) -> None:
    """Wait until the workers that load detail (show, mig_plan) have finished and what they
    handed back is drawn (not the feed's worker: it runs for good)."""
    for _ in range(1000):
        loading = [
            worker
            for worker in pilot.app.workers
            if worker.group in ("job-detail", "mig-plan") and not worker.is_finished
        ]
        if not loading:
            break
        await pilot.pause(0.01)
    await pilot.pause()


def screen_steps(keys: tuple[str, ...]) -> Any:
    async def run_before(pilot: Any) -> None:
        await replayed(pilot)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await replayed(pilot)
        await details_loaded(pilot)  # waited for, not slept for: a loaded machine draws the same
        # A toast ("sorted by id") lives 2 s: shown on a fast machine, gone on a loaded one.
        pilot.app.clear_notifications()
        await pilot.pause()

    return run_before


SCREENS = {
    "station": (),
    "queue": ("2",),
    "job": ("2", "o", "down", "down", "enter"),  # sorted by id, the third row: job 3
    "loaders": ("3",),
    "mig": ("4",),
    "processes": ("5",),
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


def test_station_snapshot_with_a_faulted_mps_server(snap_compare: Any) -> None:
    """Recorded from a real engine whose MPS server on GPU 0 went into FAULT: the card says so."""
    assert snap_compare(desk(MPS_FAULT), terminal_size=SIZES["80x24"], run_before=screen_steps(()))


def test_the_gpu_card_shows_a_faulted_mps_server() -> None:
    """The engine reports MPS faults per GPU (`station.mps.faults`); the desk once looked them
    up by GPU index in a dict the engine keyed by UUID, and never showed one."""
    app = desk(MPS_FAULT)

    async def main() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await replayed(pilot)
            cards = {card.index: str(card.render()) for card in app.screen.query(GpuCard)}
            assert sorted(cards) == [0, 1]
            assert "MPS FAULT" in cards[0]
            assert "FAULT, new jobs time-sliced: MPS server" in cards[0]
            assert "FAULT" not in cards[1] and "MPS on" in cards[1]

    asyncio.run(main())


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_energy_figure_says_since_when_and_is_never_cut(size: str) -> None:
    """Energy is Wh for people and each counter says since when: each card its energy since
    the desk opened and today, whole even on an 80-column card; the header's total "today"
    or not at all (never "6.1 Wh …" with its "since" cut off)."""
    app = desk()

    async def main() -> None:
        async with app.run_test(size=SIZES[size]) as pilot:
            await replayed(pilot)
            for card in app.screen.query(GpuCard):
                text = str(card.render())
                assert re.search(r"E \d+\.\d\d Wh since (open|the desk opened)", text), text
                assert re.search(r"\d+\.\d\d Wh today", text), text
                assert "…" not in text.split("PWR", 1)[1].split("JOBS")[0].split("MIG")[0]
            header = str(app.screen.query_one(DeskHeader).render())
            assert " J " not in header and "kJ" not in header
            if "Wh" in header:
                assert re.search(r"\d Wh today( ≈[\d.]+ g CO2e)?$", header), header

    asyncio.run(main())


def test_station_snapshot_at_200x50(snap_compare: Any) -> None:
    """A big terminal: the running jobs listed under the cards, temperature and clock in them."""
    assert snap_compare(desk(), terminal_size=(200, 50), run_before=screen_steps(()))


@pytest.mark.parametrize(("size", "listed"), [((80, 24), False), ((200, 50), True)])
def test_the_job_list_shows_under_the_cards_only_where_it_fits(
    size: tuple[int, int], listed: bool
) -> None:
    """At 80×24 the cards fill the screen and keep every line; at 200×50 every running job of
    the replay is listed under them, with its placement, mode, SM and memory."""
    app = desk()

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await replayed(pilot)
            await pilot.pause(0.1)
            jobs = app.screen.query_one("#station-jobs")
            assert jobs.display is listed
            cards = [str(card.render()) for card in app.screen.query(GpuCard)]
            assert all(("°C" in c and "MHz" in c) is listed for c in cards)
            if listed:
                text = str(jobs.render())
                running = [j for j in app.state.jobs if j.state == "running"]
                assert f"running jobs ({len(running)})" in text and len(running) >= 4
                for job in running:
                    assert re.search(rf"^ *{job.id}  {re.escape(job.name)} ", text, re.M), text
                assert "gpu:1/mps" in text and "2g.10gb" in text and "SM" in text

    asyncio.run(main())


def test_the_queue_header_shows_what_it_is_sorted_by() -> None:
    async def run() -> list[str]:
        app = desk()
        seen: list[str] = []
        async with app.run_test(size=(80, 24)) as pilot:
            await replayed(pilot)
            await pilot.press("2")
            await pilot.pause()
            assert isinstance(app.screen, QueueScreen)
            table = app.screen.table

            def arrows() -> str:  # the header line as drawn
                return " ".join(w for w in table.render_line(0).text.split() if w[-1] in "▲▼")

            seen.append(arrows())  # running first: no one column
            await pilot.press("o")  # by id
            await pilot.pause()
            seen.append(arrows())
            await pilot.press("o")  # by state
            await pilot.pause()
            seen.append(arrows())
            await pilot.press("O")  # reversed
            await pilot.pause()
            seen.append(arrows())
        return seen

    assert asyncio.run(run()) == ["", "ID▲", "STATE▲", "STATE▼"]
