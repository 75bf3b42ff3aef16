"""The desk's job detail says why a waiting job waits once: the reason itself says "waiting
...", "held: ..." or "pending in Slurm ...", so its label does not repeat the word."""

from __future__ import annotations

from replay import replay_feed

from gpudesk.screens.job import render_summary
from gpudesk.screens.state import DeskState


def test_a_waiting_jobs_reason_reads_once() -> None:
    feed = replay_feed()
    frame = feed.frames[-1]
    state = DeskState(frame=frame)
    waiting = [d for d in feed.shows.values() if d.waiting and d.waiting.startswith("waiting")]
    assert waiting, "the recording holds a waiting job"
    for detail in waiting:
        summary = str(render_summary(detail.job, detail, state))
        assert f"\nwhy: {detail.waiting}" in summary, summary
        assert "waiting: waiting" not in summary
