"""The desk's job detail says why a waiting job waits once: the reason itself says "waiting
...", "held: ..." or "pending in Slurm ...", so its label does not repeat the word."""

from __future__ import annotations

import dataclasses

import msgspec
from replay import replay_feed

from gpudesk.api.models import RemainingView
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


def test_a_running_jobs_remaining_time_is_shown_with_its_source() -> None:
    feed = replay_feed()
    state = DeskState(frame=feed.frames[-1])
    detail = next(iter(feed.shows.values()))
    running = msgspec.structs.replace(
        detail,
        remaining=RemainingView(
            seconds=720.0, source="progress", done=480.0, total=1000.0, rate_per_s=0.67
        ),
    )
    summary = str(render_summary(running.job, running, state))
    assert "\nremaining ~12 min (from its progress: 480/1000 at 0.67/s)" in summary, summary


def test_the_process_table_lists_a_gpu_process_outside_gpudesk_with_its_owner() -> None:
    from gpudesk.api.models import ProcessView
    from gpudesk.screens.widgets.job_list import render_job_list, render_other_processes

    feed = replay_feed()
    frame = feed.frames[-1]
    assert frame.telemetry is not None and frame.telemetry.gpus
    state = DeskState(frame=frame)
    assert render_other_processes(state, 100) is None  # the recording has none
    gpu = frame.telemetry.gpus[0]
    stranger = ProcessView(
        pid=4242,
        used_memory_mib=3276.8,
        sm_pct=40.0,
        mig_device=None,
        job_id=None,
        user="bob",
        command="python train.py --lr 0.1",
    )
    gpus = [msgspec.structs.replace(gpu, processes=[*gpu.processes, stranger])]
    gpus += frame.telemetry.gpus[1:]
    telemetry = msgspec.structs.replace(frame.telemetry, gpus=gpus)
    state = DeskState(frame=dataclasses.replace(frame, telemetry=telemetry))
    listing = str(render_job_list(state, 100))
    assert "other processes on the GPUs (1, not gpudesk jobs)" in listing
    row = next(line for line in listing.splitlines() if "4242" in line)
    assert "bob" in row and "3.2G" in row and "40%" in row and "python train.py" in row


def test_a_suspended_job_is_marked_in_the_running_jobs_list() -> None:
    from gpudesk.screens.widgets.job_list import render_job_list

    frame = replay_feed().frames[-1]
    placed = [j for j in frame.jobs if j.placed]
    assert len(placed) >= 2, "the recording holds running jobs"
    stopped = placed[0]
    jobs = [
        msgspec.structs.replace(j, state="suspended") if j.id == stopped.id else j
        for j in frame.jobs
    ]
    state = DeskState(frame=dataclasses.replace(frame, jobs=jobs))
    listing = render_job_list(state, 100)
    text = listing.plain
    assert f"running jobs ({len(placed)}, 1 suspended)" in text, text
    styled = [text[s.start : s.end] for s in listing.spans if s.style == "bold magenta"]
    assert len(styled) == 1 and styled[0].lstrip().startswith(f"{stopped.id} "), styled


def test_a_reason_and_a_wait_are_shown_with_their_control_characters_spelled_out() -> None:
    """A job's reason and why it waits quote what a user gave (a dependency's name, a path):
    an ESC in them is spelled out, never drawn (an old engine's words, a hostile member's)."""
    feed = replay_feed()
    state = DeskState(frame=feed.frames[-1])
    detail = next(d for d in feed.shows.values() if d.waiting)
    job = msgspec.structs.replace(detail.job, reason="failed: \x1b]0;owned\x07", slot=None)
    odd = msgspec.structs.replace(detail, job=job, waiting="waiting for \x1b[2Jjob 3")
    summary = str(render_summary(odd.job, odd, state))
    assert "\nwhy: waiting for \\x1b[2Jjob 3" in summary, summary
    if not job.placed:
        assert "failed: \\x1b]0;owned\\x07" in summary, summary
    assert not {"\x1b", "\x07"} & set(summary), summary
