"""The desk's energy figures agree: a GPU's energy since the desk opened never exceeds its
energy today, and a watt-hour figure always shows its unit whole."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import msgspec
from replay import replay_feed, sweep_feed
from test_desk_queue import on_the_queue_of
from test_desk_snapshots import replayed

from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import ReplayFeed
from gpudesk.screens.widgets.gpu_card import GpuCard
from gpudesk.screens.widgets.strips import DeskHeader
from gpudesk.units import J_PER_WH

WH = re.compile(r"([\d.]+) Wh")


def fresh_engine_feed() -> ReplayFeed:
    """The recorded station as a fresh engine tells it: today's sums (read once, at the first
    frame, as the feed reads them every few refreshes) have counted nothing yet, while each
    GPU's energy counter goes on at every sample."""
    recorded = replay_feed()
    today = {index: 0.0 for index in recorded.frames[0].energy_today_j}
    frames = [dataclasses.replace(f, energy_today_j=today) for f in recorded.frames]
    return ReplayFeed(frames, recorded.shows, recorded.plan)


def test_energy_since_open_never_exceeds_today_on_a_fresh_engine() -> None:
    app = DeskApp(fresh_engine_feed(), refresh_s=0.05)

    async def main() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await replayed(pilot)
            counted = 0
            for card in app.screen.query(GpuCard):
                text = str(card.render())
                opened = re.search(r"E ([\d.]+) Wh since (open|the desk opened)", text)
                today = re.search(r"([\d.]+) Wh today", text)
                assert opened and today, text
                assert float(opened.group(1)) <= float(today.group(1)), text
                counted += float(opened.group(1)) > 0
            assert counted >= 2  # the GPUs did use energy while the desk was open
            header = str(app.screen.query_one(DeskHeader).render())
            total = re.search(r"([\d.]+) Wh today", header)
            since_open = (
                sum(app.state.energy_since_open_j(g) or 0.0 for g in app.state.gpus) / J_PER_WH
            )
            assert total and float(total.group(1)) >= round(since_open, 2) > 0, header

    asyncio.run(main())


def test_a_tiny_estimated_energy_keeps_its_unit_in_the_queue() -> None:
    """An estimate below 0.01 Wh reads "~<0.01 Wh", never "~<0.01 W" (the column cut its h)."""
    recorded = sweep_feed()

    def tiny(job):  # type: ignore[no-untyped-def]
        if job.usage is None or job.state != "running":
            return job
        usage = msgspec.structs.replace(job.usage, total_j=10.0, estimate=True)
        return msgspec.structs.replace(job, usage=usage)

    frames = [dataclasses.replace(f, jobs=[tiny(j) for j in f.jobs]) for f in recorded.frames]
    feed = ReplayFeed(frames, recorded.shows, recorded.plan)
    for size in ((80, 24), (200, 50)):
        lines = on_the_queue_of(feed_copy(feed), size)
        shown = [line for line in lines if "<0.01" in line]
        assert shown, lines
        assert all("~<0.01 Wh" in line for line in shown), shown


def feed_copy(feed: ReplayFeed) -> ReplayFeed:
    return ReplayFeed(feed.frames, feed.shows, feed.plan)


def test_a_gpus_mig_mode_pending_a_reset_is_on_its_card() -> None:
    """`nvidia-smi -i 0 -mig 1` while GPU 0 is busy leaves its MIG mode pending a reset: its
    card says so (top and `mig list` say what applies it); the other cards say nothing."""
    recorded = replay_feed()

    def pending(frame):  # type: ignore[no-untyped-def]
        if frame.telemetry is None:
            return frame
        gpus = [
            msgspec.structs.replace(g, mig_enabled=False, mig_pending=True) if g.index == 0 else g
            for g in frame.telemetry.gpus
        ]
        return dataclasses.replace(
            frame, telemetry=msgspec.structs.replace(frame.telemetry, gpus=gpus)
        )

    app = DeskApp(
        ReplayFeed([pending(f) for f in recorded.frames], recorded.shows, recorded.plan),
        refresh_s=0.05,
    )

    async def main() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await replayed(pilot)
            said = {card.index: str(card.render()) for card in app.screen.query(GpuCard)}
            assert "MIG off now, on after a GPU reset" in said[0], said[0]
            assert not any("after a GPU reset" in text for i, text in said.items() if i), said

    asyncio.run(main())
