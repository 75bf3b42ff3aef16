"""`gpudesk run PROFILE --attach`: follow a run already submitted, whose `gpudesk run` was
killed or lost its terminal (an SSH session that dropped), to its end, and report it as that run
would have. Its jobs went on without it: the engine runs them, not the command that submitted
them. Nothing is submitted; Ctrl-C cancels the run's jobs, as in the run.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import msgspec

from gpudesk.api.submit import profile_of_group, profile_tag, shown_path, tag_of_group
from gpudesk.core.protocol import JOBS_PAGE_CAP
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpudesk.api.client import Client
    from gpudesk.api.submit import Step
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
    NothingToAttach where there is none."""
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


def finish(
    client: Client, profile: Profile, report: RunReport, note: Callable[[Step], None]
) -> None:
    """The attached run's report completed: its pre-pass jobs recorded (`record_theirs`); it
    ended with its last job, not when it was looked at; the profile's jobs its `gpudesk run`
    never sent (it stopped while submitting them) are counted, and the run then did not
    succeed."""
    record_theirs(client, report, note)
    report.ended_at = max(
        (j.ended_at or report.ended_at for j in report.jobs), default=report.started_at
    )
    # counted, not matched by name: a job renamed since (`gpudesk edit --name`) is still sent
    trained = [j for j in report.jobs if j.id not in report.prepass_jobs]
    report.unsubmitted = max(0, len(profile.jobs) - len(trained))
    if report.unsubmitted:
        report.notes.append(
            f"{report.unsubmitted} of the profile's {len(profile.jobs)} jobs were never "
            "submitted: this run's `gpudesk run` stopped while submitting them (run the "
            "profile again to run them)"
        )


def record_theirs(client: Client, report: RunReport, note: Callable[[Step], None]) -> None:
    """The run's pre-pass jobs (`is_prepass_job`), each told to `note` as a followed run tells
    them, and what the engine measured of those that computed a selection written into its
    cache entry, where no run recorded it yet (`SelectionCache.record_job_cost`): a detached
    run's (`gpudesk run --detach`), whose pre-passes no command waited for. The cache is this
    user's, as the pre-pass job's was (`SelectionCache.used_with`: a member's own on a
    station)."""
    from gpudesk.api.prepass import is_prepass_job
    from gpudesk.api.state_home import state_home
    from gpudesk.api.submit import record_prepasses
    from gpudesk.selection.cache import SelectionCache

    ids = [j.id for j in report.jobs if is_prepass_job(j.spec.command)]
    if not ids:
        return
    # a detached run queued its training jobs with its pre-passes: a failed one cancelled
    # those after it (a run cut short while its pre-passes ran has none: never submitted)
    queued_after = len(ids) < len(report.jobs)
    cache = SelectionCache.used_with(state_home(client.home, client))
    for result in record_prepasses(client, ids, cache):
        note(msgspec.structs.replace(result, queued_after=queued_after))
