"""The refusal of every action on a job whose attempt ended, its end not yet stored (a full disk):
how it ended as the engine worked it out, never the `running` its store still says; an end with
a retry to come, or one not yet worked out, reads as "ended"."""

from __future__ import annotations

import pytest

from gpudesk.core.job_changes import UnsavedEnd, ended_unsaved
from gpudesk.core.jobs import JobState

WHY = "not yet saved: the disk holding gpudesk's state folder (/h, 0 KiB free) is full"


@pytest.mark.parametrize(
    ("end", "said"),
    [
        (UnsavedEnd(JobState.SUCCEEDED, 0, "exit code 0", 1.0), "already succeeded (exit 0)"),
        (UnsavedEnd(JobState.FAILED, None, "lost", 1.0), "already failed (exit unknown)"),
        (UnsavedEnd(JobState.QUEUED, 3, "retrying, 1 left", 1.0), "already ended (exit 3)"),
        (None, "already ended"),
    ],
)
def test_the_refusal_says_how_the_job_ended_and_why_that_is_not_saved(
    end: UnsavedEnd | None, said: str
) -> None:
    assert ended_unsaved(end, WHY) == f"{said}; its end is {WHY}"
