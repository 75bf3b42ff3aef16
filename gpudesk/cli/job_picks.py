"""Jobs picked by their owner, name, run and state rather than named one by one, as scancel picks
them (`-u`, `--name`, `--state`): `gpudesk cancel`, `hold` and `release` take the same picks.
A sweep of 5,000 held jobs is released with `gpudesk release --name 'lr-*'`, not 5,000 ids;
a run left to the engine (`gpudesk run --detach`) is cancelled with `gpudesk cancel --group RUN`.

Whose jobs picks without --user/--me choose: a station member's, her own; an admin's (and a
personal engine's user's), anyone's. scancel does otherwise: given only filters (`scancel
--name x`, `--state PENDING`), it asks slurmctld to signal every job that matches, and each one
that is not the caller's comes back as its own "Kill job error on job id N: Access/permission
denied" line (Slurm's src/slurmctld/job_mgr.c, `_apply_signal_jobs_filter`, and
src/scancel/scancel.c; scancel(1) says only a job's owner or root may signal it, an attempt by
anyone else printing an error and leaving the job alone). Those refusals can never succeed, and
here they made the command exit 1 whenever another member had a job of the same name, so a
member's picks choose what `scancel --me --name x` would: the engine narrows the listing to her
jobs unless she is an admin (`jobs`' `actable`, in the one listing request). `--user bob` keeps
scancel's way: bob's jobs are tried, each refused to a member on its own line."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer

from gpudesk.cli.common import fail, owner_filter
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.core.name_pattern import name_pattern_refusal
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from gpudesk.api.client import Client

UserPick = Annotated[
    str | None,
    typer.Option(
        "--user", "-u", metavar="NAME", help="Every live job of this user (as scancel -u)."
    ),
]
MePick = Annotated[bool, typer.Option("--me", help="Every live job of yours.")]
NamePick = Annotated[
    str | None,
    typer.Option("--name", metavar="GLOB", help="Live jobs whose name matches (lr-*, as queue)."),
]
GroupPick = Annotated[
    str | None,
    typer.Option(
        "--group",
        "-g",
        metavar="RUN",
        help="Live jobs of this run (its group, as queue --group: a profile's run, named when "
        "gpudesk run submits it).",
    ),
]
PICKS = "--user/--me/--name/--group"


class Picks(msgspec.Struct, frozen=True):
    """What picks the jobs, where they are not named: every one given must pick a job."""

    user: str | None = None
    me: bool = False
    name: str | None = None
    group: str | None = None

    @property
    def given(self) -> bool:
        return self.user is not None or self.me or self.name is not None or self.group is not None


def check_picks(
    jobs: list[str] | None, picks: Picks, more_picks: tuple[str, bool] = ("", False)
) -> None:
    """Jobs are named or picked, never both or neither: a usage error, said before any engine
    is asked. `more_picks`: the command's own pick (its option, and whether it was given), as
    cancel's --state."""
    option, given = more_picks
    options = PICKS + (f"/{option}" if option else "")
    picked = picks.given or given
    if jobs and picked:
        fail(f"name jobs or pick them with {options}, not both", EXIT_USAGE)
    if not jobs and not picked:
        fail(f"which jobs? name them, or pick them with {options}", EXIT_USAGE)
    owner_filter(picks.user, picks.me)  # --user with --me: said here too
    refusal = None if picks.name is None else name_pattern_refusal(picks.name)
    if refusal is not None:
        fail(f"--name: {refusal}", EXIT_USAGE)


class Picked(msgspec.Struct, frozen=True):
    """The refs a command acts on, and whose jobs were searched for them: "yours", "bob's", or
    None for anyone's (named jobs: None too)."""

    refs: list[str]
    whose: str | None = None

    def none_matches(self, what: str) -> str:
        """The line said when no job matched: "no held job of yours matches"."""
        return f"no {what} job{'' if self.whose is None else f' of {self.whose}'} matches"


def picked_refs(
    client: Client, jobs: list[str] | None, picks: Picks, states: tuple[str, ...] | None
) -> Picked:
    """The jobs named (`jobs`, as `check_picks` let them through), or the ids of the live jobs
    the picks choose whose state ("held" for a held queued job) is one of `states` (None: any);
    without --user/--me, a member's own jobs alone (the module's docstring says why). The
    engine matches the names; each is matched here again, as the command acts on the jobs: an
    engine from before `jobs`' `name` ignores it and would pick every live job."""
    if jobs:
        return Picked(list(jobs))
    owner = owner_filter(picks.user, picks.me)
    listing = client.job_listing(
        states=["queued", "running"],
        user=owner,
        group=picks.group,
        name=picks.name,
        actable=owner is None,
    )
    refs = [
        str(job.id)
        for job in listing.jobs
        if (picks.name is None or fnmatch.fnmatchcase(job.name, picks.name))
        and (states is None or ("held" if job.held else job.state) in states)
    ]
    if picks.me or listing.own_only:
        return Picked(refs, "yours")
    return Picked(refs, None if owner is None else f"{printable_line(str(owner))}'s")
