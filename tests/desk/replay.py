"""The desk's replay data: frames recorded from real engines by tests/desk/record_replay.py
(`python tests/desk/record_replay.py` records them again), decoded strictly through
gpudesk.api's models when loaded.

- `STATION`: a SIMULATED DGX Station A100 (GPUs 2 and 3 in MIG mode) running a sweep: jobs
  under MPS, on MIG slices, a shared loader with its consumer, succeeded, failed, cancelled,
  held and waiting jobs.
- `MPS_FAULT`: two GPUs on the faithful NVML and MPS fakes; GPU 0's MPS server is in FAULT and
  the engine routes new jobs around it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.screen import Screen

from gpudesk.api import JobView
from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import Frame, ReplayFeed

DATA = Path(__file__).resolve().parent / "data"
STATION = DATA / "station.json"
MPS_FAULT = DATA / "mps-fault.json"


def replay_feed(path: Path = STATION, readonly_reason: str | None = None) -> ReplayFeed:
    return ReplayFeed.load(path, readonly_reason=readonly_reason)


# A hyper-parameter sweep's names, as a user names its jobs: they differ only at their end.
SWEEP_NAMES = [
    f"{size}-lr{lr}-h{hidden}-{seed}"
    for size in ("light", "heavy")
    for lr in ("0.01", "0.001")
    for hidden in ("512", "1024")
    for seed in (1, 2, 3)
]


def sweep_feed() -> ReplayFeed:
    """`STATION` with its jobs renamed to a sweep's names (light-lr0.01-h512-1 …
    heavy-lr0.001-h1024-3) and owned by a short login name: the same recorded frames (several
    running, waiting and finished jobs), decoded through gpudesk.api's models, for the queue's
    name column at 80 and 200 columns."""
    import dataclasses

    import msgspec

    recorded = replay_feed()
    ids = sorted(job.id for job in recorded.frames[-1].jobs)
    step = (len(SWEEP_NAMES) - 1) / max(1, len(ids) - 1)  # the first name to the last
    names = {job_id: SWEEP_NAMES[round(n * step)] for n, job_id in enumerate(ids)}

    def renamed(job: JobView) -> JobView:
        return msgspec.structs.replace(job, name=names.get(job.id, job.name), user="ana")

    frames = [dataclasses.replace(f, jobs=[renamed(j) for j in f.jobs]) for f in recorded.frames]
    return ReplayFeed(frames, recorded.shows, recorded.plan, recorded.readonly_reason)


def still_desk(change: Callable[[Frame], Frame] | None = None) -> tuple[DeskApp, Frame]:
    """A desk on `STATION`'s last frame alone (changed by `change`), for the whole test: no
    refresh brings another unless the test posts it. The desk and its frame."""
    recorded = replay_feed()
    frame = recorded.frames[-1] if change is None else change(recorded.frames[-1])
    feed = ReplayFeed([frame], recorded.shows, recorded.plan)
    return DeskApp(feed, refresh_s=60.0), frame


async def opened(pilot: Any, key: str) -> Screen[Any]:
    """Once the desk has read its jobs, the screen `key` switches to."""
    app: DeskApp = pilot.app
    while not app.state.jobs:
        await pilot.pause(0.05)
    await pilot.press(key)
    await pilot.pause()
    return app.screen
