"""`gpudesk run PROFILE --detach`: submit a profile's jobs and return at once, as sbatch or
`pueue add` do. The engine runs the jobs, not the command that submitted them; `gpudesk run
PROFILE --attach` follows the run later to its end and reports it as a followed run would have
(cli/run_attach.py), and `gpudesk queue --group RUN` lists its jobs meanwhile.
"""

from __future__ import annotations

import shlex
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from gpudesk import render
from gpudesk.api.submit import StationReport, Submitted, run_group, submit_profile
from gpudesk.cli.common import consecutive
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from pathlib import Path

    from gpudesk.api.client import Client
    from gpudesk.api.submit import Step
    from gpudesk.core.cluster import ClusterSpec
    from gpudesk.profile import Profile


def detach_refusal(*, attach: bool, report: Path | None) -> str | None:
    """Why `--detach` cannot go with the rest of the command line; None where it can. Said
    before anything is submitted."""
    if attach:
        return "--detach submits a run, --attach follows one already submitted: give one of them"
    if report is not None:
        return (
            "--detach: the report is made once the run's jobs have ended; ask for it then with "
            "gpudesk run PROFILE --attach --report FILE"
        )
    return None


@dataclass(frozen=True)
class Detached:
    """A run submitted and left to the engine: its `run_group` name, the profile's jobs, and
    the selections' pre-pass jobs that those run after."""

    group: str
    ids: list[int]
    prepass_ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"group": self.group, "ids": self.ids, "prepass_ids": self.prepass_ids}


def submit_detached(
    client: Client,
    profile: Profile,
    progress: TextIO,
    *,
    cluster: ClusterSpec | None,
    apply_station: bool,
    how_to_apply: str,
) -> Detached:
    """The profile submitted as one run (what `gpudesk run` would submit), saying on `progress`
    what the station did with its [station] and which jobs wait for a change to it."""

    def note(step: Step) -> None:
        if isinstance(step, Submitted):
            submitted_all_the_same(step, group, "")
        if isinstance(step, (Submitted, StationReport)):
            for line in step.lines():
                print(line, file=progress)

    group = run_group(profile)
    outcome = submit_profile(
        client,
        profile,
        group=group,
        on_step=note,
        cluster=cluster,
        apply_station=apply_station,
        how_to_apply=how_to_apply,
        detach=True,
    )
    return Detached(outcome.group, outcome.job_ids, outcome.prepass_ids)


def submitted_all_the_same(step: Submitted, group: str, prefix: str) -> None:
    """A run's jobs the engine has queued, for the line that says the output could not be
    written (a full disk: gpudesk.cli.std_streams): they run whatever becomes of this command.
    `prefix`: what a command needs before it to reach the run's engine (run_report.reached_by)."""
    from gpudesk.cli.std_streams import already_done

    which = "pre-pass job(s)" if step.stage == "prepass" else "job(s)"
    already_done(
        f"{len(step.ids)} {which} of the run {printable_line(group)} were submitted all the "
        f"same: {prefix}gpudesk wait --group {printable_line(shlex.quote(group))} follows them "
        "to their end"
    )


def detached_text(detached: Detached, attach: str | None, prefix: str) -> str:
    """What the user is told of a detached run: its jobs, and how to follow it. `attach`: the
    command that later follows it and reports (None: none can, the profile was read from a
    pipe). `prefix`: what `gpudesk queue` needs before it to reach the run's engine (a
    SIMULATED station's own home; `gpudesk run --attach` finds that station from the profile
    itself)."""
    jobs = _listed(detached.ids)
    if detached.prepass_ids:
        jobs = (
            f"{_listed(detached.prepass_ids, 'pre-pass job')}, then {_listed(detached.ids)} "
            "(a job on a selection starts once its pre-pass has succeeded)"
        )
    group = shlex.quote(detached.group)
    said = f"submitted run {detached.group}, {jobs}; the engine runs it without this command."
    width = render.terminal_width()
    report = (
        f"{attach}  (follows it to its end)"
        if attach
        else "none: the profile was read from a pipe; --attach needs its file"
    )
    lines = [
        textwrap.fill(printable_line(said), width, break_on_hyphens=False, break_long_words=False),
        printable_line(f"  its jobs:     {prefix}gpudesk queue --all --group {group}"),
        printable_line(f"  wait for it:  {prefix}gpudesk wait --group {group}"),
        printable_line(f"  cancel it:    {prefix}gpudesk cancel --group {group}"),
        printable_line(f"  its report:   {report}"),
    ]
    if detached.prepass_ids:
        # the engine cancels a job whose `after` job failed (gpudesk.policy.dependencies)
        lines.append(
            "  a pre-pass that fails: the jobs after it are cancelled, never run (gpudesk show "
            "JOB says why)"
        )
        # `select show` asks the engine for a pre-pass job's measurement the entry lacks
        recorded = "by its --attach, or " if attach else ""
        lines.append(
            f"  pre-pass cost: recorded in the selection cache {recorded}by `gpudesk select "
            "show KEY`"
        )
    if prefix:
        # A followed run's station stops when its last run ends (own_station); a detached
        # run leaves, so nothing stops it until a run is followed there or it is stopped.
        stop = f"{attach} stops it at the end, or " if attach else ""
        lines.append(
            printable_line(f"  its station:  left running; {stop}{prefix}gpudesk engine stop")
        )
    return "\n".join(lines)


def _listed(ids: list[int], what: str = "job") -> str:
    """`3 job(s): 7-9`, `2 job(s): 4 6`; `40 jobs` where 10 or more are not consecutive."""
    span = consecutive(ids)
    listed = f"{ids[0]}-{ids[-1]}" if span and len(ids) > 1 else " ".join(map(str, ids))
    return f"{len(ids)} {what}(s): {listed}" if len(ids) <= 10 or span else f"{len(ids)} {what}s"
