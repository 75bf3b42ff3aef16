"""How a job's begin time, comment, array, afterany/afternotok dependencies and --notify show
(issue 41, item 5): `gpudesk show`'s lines, `gpudesk queue --long`'s columns, history's
comment."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gpudesk import render

if TYPE_CHECKING:
    from gpudesk.api.models import ArrayTasksView, JobSpecView, JobView

LONG_HEADERS = ["LEFT", "BEGIN", "ARRAY", "COMMENT"]


def begin_text(begin_at: float | None) -> str:
    """A begin time as a person reads it: `2026-12-01 14:05:00`; "-" for none."""
    if begin_at is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(begin_at))


def array_text(job: JobView) -> str:
    """Slurm's way: `12_3` (task 3 of array job 12), with its throttle (`12_3%2`); "-"."""
    spec = job.spec
    if spec.array_task is None:
        return "-"
    head = spec.array_job if spec.array_job is not None else job.id
    return f"{head}_{spec.array_task}" + (f"%{spec.array_limit}" if spec.array_limit else "")


def comment_text(spec: JobSpecView) -> str:
    """The comment, safe on a terminal whoever wrote it (the engine refuses control
    characters; one stored by another client is spelled out, never obeyed)."""
    from gpudesk.text import printable_line

    return printable_line(spec.comment) if spec.comment else ""


def long_cells(job: JobView) -> list[object]:
    from gpudesk import render

    return [
        render.time_left(job.remaining),
        begin_text(job.spec.begin_at),
        array_text(job),
        comment_text(job.spec) or "-",
    ]


def show_lines(job: JobView, array: ArrayTasksView | None = None) -> list[str]:
    """`gpudesk show`'s lines for these fields, each only where the job has it (`array`: the
    tasks of the array whose first job it is)."""
    spec = job.spec
    lines = []
    if spec.comment:
        lines.append(f"  comment    {comment_text(spec)}")
    if spec.begin_at is not None:
        ahead = spec.begin_at - time.time()
        when = " (still ahead)" if ahead > 0 and job.state == "queued" else ""
        lines.append(f"  begin      {begin_text(spec.begin_at)}{when}")
    if spec.array_task is not None:
        head = spec.array_job if spec.array_job is not None else job.id
        throttle = f", at most {spec.array_limit} of the array at once" if spec.array_limit else ""
        lines.append(f"  array      task {spec.array_task} of array job {head}{throttle}")
        if array is not None:
            lines.append(f"             {render.array_tasks_text(array.tasks, array.jobs)}")
    for kind, refs, until in (
        ("afterany", spec.after_any, "once each has ended, however"),
        ("afternotok", spec.after_notok, "once each has ended without succeeding"),
    ):
        if refs:
            jobs = ", ".join(f"job {ref}" for ref in refs)
            lines.append(f"  {kind:<10} {jobs}: {until}")
    if spec.notify:  # its secrets already hidden by the engine (gpudesk.redact)
        from gpudesk.text import printable

        lines.append(f"  notify     {printable(spec.notify)} (when it ends, as {job.user})")
    return lines
