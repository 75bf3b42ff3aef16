"""`gpudesk history`: finished jobs with what each used, as a table for people or as CSV/JSON
for a spreadsheet or an accounting script (Slurm's `sacct`; pueue keeps no usage).

Energy is joules in CSV and JSON and Wh in the table (gpudesk.units.watt_hours); times are ISO
8601 in UTC in the CSV (a spreadsheet reads them) and epoch seconds in JSON; GPU-seconds
are each attempt's wall time × the GPUs it held (a MIG slice or a shared GPU counts as one),
summed: as allocated, not as used."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpudesk.cli.common import current_home, fail, owner_filter, say_damaged
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.cli.history_output import HistoryOutput, HistoryRow, history_output, history_row
from gpudesk.cli.plot_output import PLOT_HELP, plot_target, write_plot
from gpudesk.core.protocol import MAX_ROW_ID
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import JobStateName
    from gpudesk.plots.common import PlotTarget

history_app = typer.Typer()

FORMATS = ("table", "csv", "json", "codecarbon")  # codecarbon: gpudesk.cli.emissions
FINISHED: list[JobStateName] = ["succeeded", "failed", "cancelled"]


_AGO = re.compile(r"(?:now)?\s*-?\s*(\d+(?:\.\d+)?)\s*([a-z]+)")  # now-5min, 3h, 2days


def parse_since(text: str, now: float | None = None) -> float:
    """A point in time: a date or date-time (2026-11-20, 2026-11-20T14:00, "2026-11-20 14:00",
    local time), a time of day (14:00: today's, yesterday's while it is still ahead), `today`,
    `yesterday` (its midnight), or how long ago, in --begin's and sacct's words (90m, 3h, 2d,
    now-5min, 1week). Raises ValueError saying what is accepted."""
    from gpudesk.core.submit_options import CLOCK, TIME_UNITS
    from gpudesk.units import parse_duration

    value = text.strip()
    now = time.time() if now is None else now
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        pass
    else:
        try:
            return when.timestamp()
        except (ValueError, OverflowError):
            # local time at the edge of the calendar (0001-01-01: the C library cannot find
            # its offset): taken as UTC, which is the same "everything" to the hour
            return when.replace(tzinfo=when.tzinfo or dt.timezone.utc).timestamp()
    lower = value.lower()
    today = dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if lower in ("today", "midnight"):
        return today.timestamp()
    if lower == "yesterday":  # its midnight, as GNU date reads it (DST as that day's)
        return (today - dt.timedelta(days=1)).timestamp()
    if match := CLOCK.fullmatch(lower):
        hour, minute, second = (int(g or 0) for g in match.groups())
        with contextlib.suppress(ValueError):
            moment = today.replace(hour=hour, minute=minute, second=second)
            if moment.timestamp() > now:  # still ahead today: yesterday's (DST as that day's)
                moment = (today - dt.timedelta(days=1)).replace(
                    hour=hour, minute=minute, second=second
                )
            return moment.timestamp()
    if (match := _AGO.fullmatch(lower)) and match.group(2) in TIME_UNITS:
        return now - float(match.group(1)) * TIME_UNITS[match.group(2)]
    if value and value[-1].lower() in "smhd":
        with contextlib.suppress(ValueError):
            return now - parse_duration(value)  # 1h30m
    raise ValueError(
        f"'{printable_line(text)}' is not a time: give a date or date-time (2026-11-20, "
        "2026-11-20 14:00), a time of day (14:00), today, yesterday, or how long ago (90m, 3h, 2d, "
        "now-5min, 1week)"
    )


_SINCE = typer.Option(
    None,
    "--since",
    metavar="WHEN",
    help="Only jobs that ended since then: 2026-11-20, '2026-11-20 14:00', 14:00, today, "
    "yesterday, or how long ago: 90m, 3h, 2d, now-5min, 1week (--begin's units).",
)
_FORMAT = typer.Option(
    "table",
    "--format",
    "-f",
    metavar="[table|csv|json|codecarbon]",
    help="table, csv, json, or codecarbon's emissions.csv columns (docs/emissions.md).",
)
_OUTPUT = typer.Option(
    None,
    "--output",
    "-o",
    metavar="FILE",
    help="With --format codecarbon: append to this emissions.csv, as codecarbon does.",
)
_USER = typer.Option(None, "--user", "-u", help="Only this user's jobs.")
_ME = typer.Option(False, "--me", help="Only my jobs.")
_LIMIT = typer.Option(1000, "--limit", min=1, metavar="N", help="At most the newest N jobs.")
_WIDE = typer.Option(
    False,
    "--wide",
    "-w",
    help="The table with every column (CPU-seconds, peak memory, CO2e), however wide.",
)
_PLOT = typer.Option(
    None,
    "--plot",
    metavar="FILE",
    help="Also draw GPU-hours and energy per day, by user. " + PLOT_HELP,
)


@history_app.command()
def history(
    since: str | None = _SINCE,
    output_format: str = _FORMAT,
    output: Path | None = _OUTPUT,
    user: str | None = _USER,
    me: bool = _ME,
    limit: int = _LIMIT,
    wide: bool = _WIDE,
    plot: str | None = _PLOT,
) -> None:
    """Finished jobs with what each used: wall time, GPU- and CPU-seconds, peak memory,
    energy and CO2e, where it ran (CSV and JSON in joules, for accounting)."""
    limit = min(limit, MAX_ROW_ID)  # past the largest id a store holds: every job

    if output_format not in FORMATS:
        fail(
            f"--format: '{printable_line(output_format)}' is not one of {', '.join(FORMATS)}",
            EXIT_USAGE,
        )
    if output is not None and output_format != "codecarbon":
        fail("--output appends to a codecarbon emissions.csv: add --format codecarbon", EXIT_USAGE)
    if output is not None:
        from gpudesk.cli.report_file import gpudesk_homes, new_file_problem, output_file_problem

        # its folder too, before the history is read (as --plot's): not at the write
        problem = output_file_problem(output, gpudesk_homes()) or new_file_problem(output)
        if problem is not None:
            fail(f"--output: {problem}", EXIT_USAGE)
    target = plot_target(
        plot, machine_output=None if output_format == "table" else f"--format {output_format}"
    )
    owner = owner_filter(user, me)
    start = None
    if since is not None:
        try:
            start = parse_since(since)
        except ValueError as exc:
            fail(f"--since: {exc}", EXIT_USAGE)
    from gpudesk.cli.no_engine import running_client, say_nothing

    client = running_client()
    if client is None:  # a read never starts an engine (gpudesk.cli.no_engine)
        machine = output_format != "table"
        say_nothing(current_home(), "no job has finished", machine_output=machine)
        if machine and output_format != "codecarbon":
            _output(output_format, False, wide, since).finish(None)
        return
    with client:
        if output_format == "codecarbon":
            rows, simulated, cut = _codecarbon(client, owner, start, limit, output)
        else:
            rows, simulated, cut = _listed(
                client, owner, start, limit, output_format, wide, since, keep=target is not None
            )
        # after the table, as queue says it; beside machine output, on stderr
        if cut:
            print(cut, file=sys.stdout if output_format == "table" else sys.stderr)
    if target is not None:
        whose = f", user {user}" if user else ", my jobs" if me else ""
        _plot_history(
            target,
            rows,
            "gpudesk history"
            + (f" since {since}" if since else "")
            + whose
            + (f" (SIMULATED GPUs, {simulated})" if simulated else ""),
        )


def _output(output_format: str, newest_first: bool, wide: bool, since: str | None) -> HistoryOutput:
    from gpudesk import render

    width = None if wide or output_format != "table" else render.table_width()
    return history_output(output_format, newest_first=newest_first, width=width, since=since)


def _listed(
    client: Client,
    owner: str | int | None,
    start: float | None,
    limit: int,
    output_format: str,
    wide: bool,
    since: str | None,
    *,
    keep: bool,
) -> tuple[list[HistoryRow], str | None, str | None]:
    """The newest finished jobs (archived ones too: history is accounting, the whole store's)
    that ended since `start`, written page by page as they arrive (gpudesk.cli.history_output);
    the rows where `keep` (a plot needs them), the station's backend where its GPUs are
    simulated, and what `limit` left out (None: nothing that could match)."""
    pages = client.job_pages(states=FINISHED, limit=limit, usage=True, user=owner, archived=True)
    simulated = pages.simulated  # as the first page finds the station, for every row
    out = _output(output_format, pages.newest_first, wide, since)
    kept: list[HistoryRow] = []
    listed = shown = 0
    for page in pages:
        rows = [
            history_row(job, simulated)
            for job in page.jobs
            if start is None or (job.ended_at is not None and job.ended_at >= start)
        ]
        listed, shown = listed + len(page.jobs), shown + len(rows)
        out.add(rows)
        if keep:
            kept += rows
    say_damaged(pages.damaged)
    out.finish(pages.simulated)
    cut = None
    # a sum over a cut listing is wrong, so the cut is said; not where --since already
    # dropped some of it: the listing reached back past `start`
    if pages.more and shown == listed:
        cut = _cut(client, owner, shown + len(pages.damaged), start is not None)
    rows = sorted(kept, key=lambda row: row.id) if pages.newest_first else kept
    return rows, pages.simulated, cut


def _codecarbon(
    client: Client,
    owner: str | int | None,
    start: float | None,
    limit: int,
    codecarbon_to: Path | None,
) -> tuple[list[HistoryRow], str | None, str | None]:
    """`_listed`'s jobs gathered whole, and written as codecarbon's emissions (to stdout, or
    appended to `codecarbon_to`) while the engine's station is at hand."""
    from gpudesk.cli import emissions

    listing = client.job_listing(
        states=FINISHED, limit=limit, usage=True, user=owner, archived=True
    )
    say_damaged(listing.damaged)
    jobs = [
        j for j in listing.jobs if start is None or (j.ended_at is not None and j.ended_at >= start)
    ]
    cut = None
    if listing.more and len(jobs) == len(listing.jobs):
        cut = _cut(client, owner, len(jobs) + len(listing.damaged), start is not None)
    try:
        emissions.report(client, jobs, codecarbon_to)
    except emissions.EmissionsFileError as exc:
        fail(str(exc))
    return [history_row(job, listing.simulated) for job in jobs], listing.simulated, cut


def _cut(client: Client, owner: str | int | None, listed: int, since: bool) -> str:
    """What a --limit that cut the listing left out, as `queue` says it."""
    total = client.jobs_page(states=FINISHED, limit=1, user=owner, archived=True, count=True).total
    older = f"{total - listed} older jobs" if total else "older jobs"
    if since:
        return f"… and {older} not looked at (some may have ended since); --limit N looks further"
    return f"… and {older} not shown; --limit N shows more"


def _plot_history(target: PlotTarget, rows: list[HistoryRow], caption: str) -> None:
    """`--plot`: GPU-hours and energy per day, by user."""
    from gpudesk import render
    from gpudesk.plots.history import history_figure, history_text

    write_plot(
        target,
        lambda: history_figure(rows, caption=caption),
        lambda: history_text(rows, caption=caption, width=render.terminal_width()),
    )
