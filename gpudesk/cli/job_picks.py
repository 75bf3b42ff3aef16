"""Jobs picked by their owner, name and state rather than named one by one, as scancel picks
them (`-u`, `--name`, `--state`): `gpudesk cancel`, `hold` and `release` take the same picks.
A sweep of 5,000 held jobs is released with `gpudesk release --me --name 'lr-*'`, not 5,000 ids."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Annotated

import typer

from gpudesk.cli.common import fail, owner_filter
from gpudesk.cli.exit_codes import EXIT_USAGE

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
PICKS = "--user/--me/--name"


def check_picks(
    jobs: list[str] | None,
    user: str | None,
    me: bool,
    name: str | None,
    more_picks: tuple[str, bool] = ("", False),
) -> None:
    """Jobs are named or picked, never both or neither: a usage error, said before any engine
    is asked. `more_picks`: the command's own pick (its option, and whether it was given), as
    cancel's --state."""
    option, given = more_picks
    picks = PICKS + (f"/{option}" if option else "")
    picked = user is not None or me or name is not None or given
    if jobs and picked:
        fail(f"name jobs or pick them with {picks}, not both", EXIT_USAGE)
    if not jobs and not picked:
        fail(f"which jobs? name them, or pick them with {picks}", EXIT_USAGE)
    owner_filter(user, me)  # --user with --me: said here too


def picked_refs(
    client: Client,
    jobs: list[str] | None,
    *,
    user: str | None,
    me: bool,
    name: str | None,
    states: tuple[str, ...] | None,
) -> list[str]:
    """The jobs named (`jobs`, as `check_picks` let them through), or the ids of the live jobs
    the picks choose whose state ("held" for a held queued job) is one of `states` (None: any)."""
    if jobs:
        return list(jobs)
    listing = client.job_listing(states=["queued", "running"], user=owner_filter(user, me))
    return [
        str(job.id)
        for job in listing.jobs
        if (name is None or fnmatch.fnmatchcase(job.name, name))
        and (states is None or ("held" if job.held else job.state) in states)
    ]
