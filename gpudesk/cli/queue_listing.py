"""`gpudesk queue`: the listing (queued and running jobs, or the newest N of any state) and its
table, squeue-like. Without typer: the command's fast path (gpudesk.cli.fast_path) runs it
before typer is imported, and the typer command (gpudesk.cli.jobs) calls the same function."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import msgspec

from gpudesk.cli.common import (
    current_home,
    fail,
    owner_filter,
    print_json,
    say_damaged,
    simulated_banner,
)
from gpudesk.cli.exit_codes import EXIT_USAGE

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpudesk.api.client import Client
    from gpudesk.api.models import DamagedJob, DrainView, JobStateName, JobView

    Keep = Callable[[JobView], bool]  # a filter of the CLI's own (--state held, suspended)

DEFAULT_LIMIT = 500  # waiting jobs shown by default (every running one is)
LIVE_STATES: tuple[JobStateName, ...] = ("queued", "running")  # the order jobs pass through them


class Listed(msgspec.Struct, frozen=True):
    """What `queue` lists: the jobs, the rows the engine skipped as damaged, a line saying what
    the limit cut (None: nothing was), and the station's backend when it is SIMULATED."""

    jobs: list[JobView]
    damaged: list[DamagedJob]
    cut: str | None
    simulated: str | None
    drain: DrainView | None = None  # the station is drained: said before the jobs


class QueueOptions(msgspec.Struct, frozen=True):
    """`gpudesk queue`'s options, as typer or the fast path parsed them."""

    all_jobs: bool = False
    group: str | None = None
    limit: int = DEFAULT_LIMIT
    user: str | None = None
    me: bool = False
    state: str | None = None
    name: str | None = None
    json_out: bool = False
    long: bool = False  # LEFT, BEGIN, ARRAY and COMMENT columns too


def where_or_why(job: JobView) -> str:
    """squeue's NODELIST(REASON) for one job: where it runs, or why it waits in parentheses
    ((Priority), (Resources), (Dependency), ...); "" for a finished job."""
    if job.placed:
        return job.slot or ""
    if job.state == "queued":
        return f"({job.wait_reason or ('JobHeldUser' if job.held else 'Pending')})"
    return ""


def queue_rows(jobs: list[JobView], width: int | None, long: bool = False) -> str:
    """The queue as a table in `width` columns (None: no limit, for a pipe): the reason
    gives way first, then the name (clipped in the middle: a sweep's jobs differ at the end),
    then the user, then whole columns (TRY, PRI, SUBMITTED, GPUS, the `long` ones, EXIT, USER,
    TIME: at 40 columns ID, NAME, STATE and SLOT(REASON) are left); ids and states are never
    clipped. A name takes the room there is, up to the longest listed. EXIT only when a listed
    job has ended. `long`: LEFT (a running job's remaining time), BEGIN, ARRAY and COMMENT
    after the reason, the comment clipped first."""
    from gpudesk import render
    from gpudesk.cli import job_extras_view

    ended = any(j.terminal for j in jobs)  # (a suspended job has no exit code either)
    headers = ["ID", "NAME", "USER", "STATE", "PRI", "TRY", "GPUS", "TIME"]
    headers += ["EXIT"] * ended + ["SUBMITTED", "SLOT(REASON)"]
    rows = [
        (
            j.id,
            j.name,
            j.user,
            ("held" if j.held else j.state) + ("*" if j.unsaved else ""),
            j.spec.priority,
            f"{j.attempts - j.attempts_before_requeue - j.preemptions}/{j.max_attempts}",
            j.spec.gpus,
            render.duration(j.run_s()),
            *([j.exit_code] if ended else []),
            render.clock(j.submitted_at),
            where_or_why(j) or "-",
            *(job_extras_view.long_cells(j) if long else []),
        )
        for j in jobs
    ]
    last = len(headers) - 1
    headers += job_extras_view.LONG_HEADERS if long else []
    # with `long`: LEFT, BEGIN, ARRAY, COMMENT, of which ARRAY and BEGIN (mostly "-") give way
    # first, then COMMENT (clipped first, `shrink`), then LEFT
    extras = (last + 1, last + 4, last + 2, last + 3) if long else ()
    text, _ = render.fitted_table(
        headers,
        rows,
        width=width,
        # where names would be clipped below 16, TRY gives way first, then PRI, SUBMITTED and
        # GPUS, then the `long` columns asked for, EXIT, USER and TIME
        optional=(7, 2, *((8,) if ended else ()), *extras, 6, last - 1, 4, 5),
        max_widths={2: 12},
        right=((0, 4, 6, 7, 8) if ended else (0, 4, 6, 7)) + ((last + 1,) if long else ()),
        shrink=(len(headers) - 1, last, 1, 2) if long else (last, 1, 2),
        middle=(1,),
        # the common codes stay whole; a name keeps 16 characters before a column goes
        min_widths={last: len("(JobHeldUser)"), 1: 16, **({last + 4: 24} if long else {})},
    )
    return text


def _asked_states(options: QueueOptions) -> tuple[set[str], list[JobStateName] | None]:
    """--state's words (as the STATE column says them: "held" too), and the engine's states
    that hold them (None: every state); a usage error where a word is not a state, or --name
    not a name pattern."""
    from typing import get_args

    from gpudesk.api.models import JobStateName

    states: list[JobStateName] | None = None if options.all_jobs else list(LIVE_STATES)
    asked: set[str] = set()
    if options.state is not None:
        known = {*get_args(JobStateName), "held"}
        asked = {word.strip().lower() for word in options.state.split(",") if word.strip()}
        wrong = sorted(asked - known)
        if wrong or not asked:
            fail(
                f"--state: {', '.join(wrong) or 'nothing'} is not a job state; "
                f"use {', '.join(sorted(known))}",
                EXIT_USAGE,
            )
        # "held" is a queued job the policy skips, as the STATE column shows it
        states = [
            s for s in get_args(JobStateName) if s in asked or (s == "queued" and "held" in asked)
        ]
    if options.name is not None:
        from gpudesk.core.name_pattern import name_pattern_refusal

        refusal = name_pattern_refusal(options.name)
        if refusal is not None:
            fail(f"--name: {refusal}", EXIT_USAGE)
    return asked, states


def list_queue(options: QueueOptions) -> None:
    """List queued and running jobs (with --all, finished ones too), everyone's unless
    --user or --me."""
    from gpudesk import render
    from gpudesk.api.models import to_builtins

    owner = owner_filter(options.user, options.me)
    asked, states = _asked_states(options)
    state, name = options.state, options.name
    from gpudesk.cli.no_engine import running_client, say_nothing

    home = current_home()
    client = running_client(home)
    if client is None:  # a read never starts an engine (gpudesk.cli.no_engine)
        say_nothing(home, "nothing is queued or running", machine_output=options.json_out)
        if options.json_out:
            print_json({"jobs": [], "simulated": None})
        return
    keep: Keep | None = None
    if asked:  # held and suspended, which the engine's states have not: before --limit

        def keep(job: JobView) -> bool:
            return ("held" if job.held else job.state) in asked

    with client:
        listed = fetch_listed(client, states, options.group, options.limit, owner, keep, name)
    jobs, damaged, cut = listed.jobs, listed.damaged, listed.cut
    say_damaged(damaged)
    if options.json_out:
        shown = {"jobs": to_builtins(jobs), "simulated": listed.simulated}
        if listed.drain is not None:
            shown["drain"] = to_builtins(listed.drain)
        print_json(shown)
        if cut:
            print(cut, file=sys.stderr)
        return
    width = render.table_width()  # the lines said beside the table fold into it too
    if listed.simulated:  # said first: the GPUs these jobs are placed on are not real
        print(simulated_banner(listed.simulated, width))
    if listed.drain is not None:
        drained = f"DRAINED: the station is {listed.drain.line()}; no job starts until undrained"
        print(render.fold(drained, width))
    if not jobs:
        if cut:
            said = cut
        elif state is not None or name is not None:
            said = "no jobs match"
        elif options.all_jobs:
            said = "no jobs"
        else:
            said = "no queued or running jobs (gpudesk queue --all shows finished ones)"
        print(render.fold(said, width))
        return
    print(queue_rows(jobs, width, options.long))
    unsaved = next((job.unsaved for job in jobs if job.unsaved), None)
    if unsaved:  # a full disk: the state shown is the engine's, not yet in its store
        print(render.fold(f"* {unsaved}", width))
    if cut:
        print(render.fold(cut, width))


def fetch_listed(
    client: Client,
    states: list[JobStateName] | None,
    group: str | None,
    limit: int,
    owner: str | int | None,
    keep: Keep | None = None,
    name: str | None = None,
) -> Listed:
    """Queued and running jobs (the default): every running job, then the waiting ones in queue
    order (priority, then submission), the first `limit` of them. Otherwise the newest `limit`
    jobs, every running one among those asked for kept. `name`: only the jobs whose name
    matches this shell pattern, which the engine picks, as its other filters (--user, --group,
    --state). `keep`: the jobs the filter the engine has not (--state held) keeps, picked
    before the limit, which then counts only them, as it does the engine's own filters."""
    matching = "" if keep is None and name is None else " matching"
    if states is not None and set(states) <= set(LIVE_STATES):
        # one listing in id order: a job that starts or ends between its pages is listed once,
        # as it was when its page was read (a job still waiting or running is never missed)
        listing = client.job_listing(states=states, group=group, user=owner, name=name)
        damaged = list(listing.damaged)
        kept = [job for job in listing.jobs if keep is None or keep(job)]
        running = [job for job in kept if job.placed]
        waiting = [job for job in kept if not job.placed]
        waiting.sort(key=lambda job: job.queue_order)
        cut = None
        if len(waiting) > limit:
            cut = (
                f"… and {len(waiting) - limit} more{matching} waiting (of {len(waiting)}); "
                f"--limit {len(waiting)} shows them all"
            )
        return Listed(running + waiting[:limit], damaged, cut, listing.simulated, listing.drain)
    if keep is not None:
        return _newest_kept(client, states, group, limit, owner, keep, name)
    filters: dict[str, Any] = dict(group=group, user=owner, name=name)
    listing = client.job_listing(states=states, limit=limit, **filters)
    jobs, damaged, cut = listing.jobs, list(listing.damaged), None
    if listing.more:
        total = client.jobs_page(states=states, limit=1, count=True, **filters).total
        left = total - len(jobs) - len(damaged) if total else None
        older = "older" if left is None else f"{left} older"
        cut = f"… and {older}{matching} job{'s' * (left != 1)} not shown; --limit N shows more"
    if states is None or "running" in states:
        from gpudesk.api.client import one_view_per_job

        live = client.job_listing(states=["running"], **filters).jobs
        jobs = one_view_per_job(jobs, live)
    return Listed(jobs, damaged, cut, listing.simulated, listing.drain)


def _newest_kept(
    client: Client,
    states: list[JobStateName] | None,
    group: str | None,
    limit: int,
    owner: str | int | None,
    keep: Keep,
    name: str | None,
) -> Listed:
    """The newest `limit` jobs `keep` keeps (every running one among them too), of every job
    the engine's filters give: the client's filter must see them all to count what the limit
    left out of those it keeps, not of the store."""
    from gpudesk.api.client import one_view_per_job

    listing = client.job_listing(states=states, group=group, user=owner, name=name)
    kept = [job for job in listing.jobs if keep(job)]
    jobs = one_view_per_job(kept[-limit:], [job for job in kept if job.state == "running"])
    cut, left = None, len(kept) - len(jobs)
    if left:
        cut = f"… and {left} older matching job{'s' * (left != 1)} not shown; --limit N shows more"
    return Listed(jobs, list(listing.damaged), cut, listing.simulated, listing.drain)
