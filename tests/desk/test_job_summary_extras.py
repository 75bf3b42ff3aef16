"""The desk's job detail shows what `submit --comment`, `--array` and `--after-any` /
`--after-notok` gave a job (issue 41, item 5), and a comment no one may use to drive the
terminal: a control character in one is spelled out, never obeyed."""

from __future__ import annotations

import msgspec
from replay import replay_feed

from gpudesk.api.models import ArrayTasksView
from gpudesk.screens.job import render_summary
from gpudesk.screens.state import DeskState


def test_the_job_detail_shows_its_comment_array_and_dependencies() -> None:
    feed = replay_feed()
    state = DeskState(frame=feed.frames[-1])
    detail = next(iter(feed.shows.values()))
    spec = msgspec.structs.replace(
        detail.job.spec,
        comment="baseline\x1b]0;owned\x07",  # as an older client might have stored it
        array_job=40,
        array_task=3,
        array_limit=2,
        after_any=[7],
        after_notok=[8, 9],
    )
    job = msgspec.structs.replace(detail.job, spec=spec)
    summary = str(render_summary(job, msgspec.structs.replace(detail, job=job), state))
    assert "\ncomment: baseline\\x1b]0;owned\\x07" in summary
    assert "\x1b" not in summary
    assert "\narray task 3 of array job 40, at most 2 at once" in summary
    assert "\nafterany: job 7" in summary and "\nafternotok: job 8, job 9" in summary
    plain = str(render_summary(detail.job, detail, state))
    assert "comment:" not in plain and "array task" not in plain and "array " not in plain


def test_an_arrays_first_job_says_its_tasks_as_show_does() -> None:
    feed = replay_feed()
    state = DeskState(frame=feed.frames[-1])
    detail = next(iter(feed.shows.values()))
    head = detail.job.id
    spec = msgspec.structs.replace(detail.job.spec, array_task=0)
    job = msgspec.structs.replace(detail.job, spec=spec)
    array = ArrayTasksView(tasks=[0, 1, 2, 5], jobs=[head, head + 1, head + 2, head + 3])
    summary = str(render_summary(job, msgspec.structs.replace(detail, job=job, array=array), state))
    assert f"\narray task 0 of array job {head}" in summary
    line = f"array {head}: tasks 0-2,5 (jobs {head}-{head + 3}); {head} names them all, {head}_1"
    assert f"\n{line} task 1" in summary
