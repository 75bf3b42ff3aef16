"""A job whose end the engine worked out but could not save (the disk under GPUDESK_HOME is
full: `JobView.unsaved`) is shown in the desk as `gpudesk queue` and `show` show it: its
worked-out state, marked, and why in its detail; the store problem the engine reports
(`StationStatus.store_problem`) is marked in the header and said in full on the station."""

from __future__ import annotations

import asyncio
import dataclasses

import msgspec
from replay import opened, still_desk
from textual.widgets import Static

from gpudesk.screens.feed import Frame
from gpudesk.screens.job import JobScreen
from gpudesk.screens.widgets.line_table import LineTable
from gpudesk.screens.widgets.strips import DeskHeader

WHY = "not yet saved: the disk holding gpudesk's state folder (/srv/gpudesk, 0 KiB free) is full"
UNSAVED_MARK = "not saved*"  # the queue's WHERE for such a job (its STATE column is 9 wide)
STORE_MARK = "STORE NOT WRITABLE"  # the header's
PROBLEM = (
    "cannot be written: the disk holding gpudesk's state folder (/srv/gpudesk, 0 KiB free) is "
    "full; "
    "1 ended job(s) not yet saved"
)


def unsaved_end(frame: Frame) -> tuple[Frame, int]:
    """`frame` with its first running job ended as the engine worked it out on a full disk
    (as gpudesk.core.job_changes.unsaved_view makes it), and the store problem."""
    job = next(j for j in frame.jobs if j.state == "running")
    ended = msgspec.structs.replace(
        job,
        state="succeeded",
        exit_code=0,
        reason="exited 0",
        ended_at=(job.started_at or 0.0) + 60.0,
        unsaved=WHY,
        slot=None,
        gpus=[],
        mode=None,
        mig_slice=None,
        pgid=None,
        remaining=None,
    )
    status = msgspec.structs.replace(frame.status, store_problem=PROBLEM)
    jobs = [ended if j.id == job.id else j for j in frame.jobs]
    return dataclasses.replace(frame, status=status, jobs=jobs), job.id


def test_a_job_ended_on_a_full_disk_is_shown_ended_marked_and_why() -> None:
    found: dict[str, int] = {}

    def change(last: Frame) -> Frame:
        frame, found["id"] = unsaved_end(last)
        return frame

    app, _ = still_desk(change)
    job_id = found["id"]

    async def main() -> tuple[str, str, str, str]:
        async with app.run_test(size=(160, 48)) as pilot:
            station = await opened(pilot, "1")
            note = str(station.query_one("#station-note", Static).render())
            queue = await opened(pilot, "2")
            header = str(queue.query_one(DeskHeader).render())
            table = queue.query_one("#jobs", LineTable)
            table.move_cursor(table.row_keys.index(str(job_id)))
            await pilot.pause()
            row = table.render_line(1 + table.row_keys.index(str(job_id))).text
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, JobScreen)
            summary = str(app.screen.query_one("#job-summary", Static).render())
            return note, header, row, summary

    note, header, row, summary = asyncio.run(main())
    assert STORE_MARK in header, header
    assert f"store: {PROBLEM}" in note, note
    assert f"{job_id} " in row and "succeeded" in row and UNSAVED_MARK in row, row
    assert "running" not in row, row
    first = summary.splitlines()[0]
    assert f"succeeded [{WHY}]" in first, summary
    assert "exited 0" in summary, summary  # the end the engine worked out, as its reason


def test_a_desk_without_a_store_problem_shows_no_mark() -> None:
    app, frame = still_desk()
    assert frame.status.store_problem is None and not any(j.unsaved for j in frame.jobs)

    async def main() -> tuple[str, str]:
        async with app.run_test(size=(160, 48)) as pilot:
            station = await opened(pilot, "1")
            note = str(station.query_one("#station-note", Static).render())
            header = str(station.query_one(DeskHeader).render())
            return note, header

    note, header = asyncio.run(main())
    assert STORE_MARK not in header and "store:" not in note
