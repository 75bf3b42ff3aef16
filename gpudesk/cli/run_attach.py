"""`gpudesk run PROFILE --attach`: follow a run already submitted, whose `gpudesk run` was
killed or lost its terminal (an SSH session that dropped), to its end, and report it as that run
would have. Its jobs went on without it: the engine runs them, not the command that submitted
them. Nothing is submitted; Ctrl-C cancels the run's jobs, as in the run.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from gpudesk.api.submit import profile_of_group, profile_tag, shown_path, tag_of_group
from gpudesk.core.protocol import JOBS_PAGE_CAP
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.cli.run_progress import Progress
    from gpudesk.cli.run_report import RunReport
    from gpudesk.profile import Profile

# How far back `--attach` looks for the newest run of a profile: the user's newest jobs, in
# pages of the engine's cap (a labelled assumption: 10,000 jobs since the run was cut short).
ATTACH_PAGES = 100


class NothingToAttach(Exception):
    """No run of the profile to follow (the message says why, and what to do)."""


def newest_run(client: Client, profile_name: str, tag: str) -> str | None:
    """The newest run (`run_group` name) of the profile among this user's jobs not archived,
    from the newest job back over at most ATTACH_PAGES pages; None where there is none. A run
    is the profile's when its name says the profile's name and the `profile_tag` of its file:
    another file's run of the same `name =` is not this one (a run from before the tag cannot
    be told apart, and is not followed either)."""
    before: int | None = None
    for _ in range(ATTACH_PAGES):
        page = client.jobs_page(user=os.getuid(), limit=JOBS_PAGE_CAP, before_id=before)
        for job in reversed(page.jobs):
            group = job.group
            if group and profile_of_group(group) == profile_name and tag_of_group(group) == tag:
                return group
        if not page.jobs or not page.more:
            return None
        before = page.jobs[0].id
    return None


def attached_run(client: Client, profile: Profile) -> tuple[str, float]:
    """The newest run of `profile` (`newest_run`) and when its first job was submitted.
    NothingToAttach where there is none, or where the profile's runs start with pre-passes,
    whose results `gpudesk run` itself records as it goes (a run cut short there is run
    again)."""
    from gpudesk.api.prepass import profile_prepasses

    if profile_prepasses(profile):
        raise NothingToAttach(
            f"--attach: the runs of {profile.name} start with data-selection pre-passes, whose "
            "results `gpudesk run` records as it goes, so a run cut short is run again, not "
            "followed: run the profile without --attach"
        )
    group = newest_run(client, profile.name, profile_tag(profile))
    if group is None:
        shown = f"bundled {profile.path.name}" if profile.bundled else shown_path(profile.path)
        raise NothingToAttach(
            f"--attach: you have no run of {shown} to follow on this engine (among your jobs "
            f"it still lists: `gpudesk queue --all --me`). A run is followed from the file "
            f"that submitted it: a run of another file that names its profile {profile.name} "
            "too is not this one's (`gpudesk wait --group RUN` waits for any run). Run the "
            "profile without --attach to submit it"
        )
    jobs = client.jobs(group=group, archived=True)
    return group, min((j.submitted_at for j in jobs), default=time.time())


def announce(progress: Progress, group: str, started: float) -> None:
    """Which run is followed, and since when."""
    submitted = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    progress.say(f"run {printable_line(group)}, submitted {submitted}")


def finish(profile: Profile, report: RunReport) -> None:
    """The attached run's report completed: it ended with its last job, not when it was looked
    at; the profile's jobs its `gpudesk run` never sent (it stopped while submitting them) are
    counted, and the run then did not succeed."""
    report.ended_at = max(
        (j.ended_at or report.ended_at for j in report.jobs), default=report.started_at
    )
    # counted, not matched by name: a job renamed since (`gpudesk edit --name`) is still sent;
    # the run's jobs are all the profile's (`attached_run` refuses runs with pre-pass jobs)
    report.unsubmitted = max(0, len(profile.jobs) - len(report.jobs))
    if report.unsubmitted:
        report.notes.append(
            f"{report.unsubmitted} of the profile's {len(profile.jobs)} jobs were never "
            "submitted: this run's `gpudesk run` stopped while submitting them (run the "
            "profile again to run them)"
        )
