"""`gpudesk history`: finished jobs with what each used, as a table for people or as CSV/JSON
for a spreadsheet or an accounting script (Slurm's `sacct`; pueue keeps no usage).

Energy is joules in CSV and JSON and Wh in the table (gpudesk.units.watt_hours); times are ISO
8601 in UTC in the CSV (a spreadsheet reads them) and epoch seconds in JSON; GPU-seconds
are each attempt's wall time × the GPUs it held (a MIG slice or a shared GPU counts as one),
summed: as allocated, not as used."""

from __future__ import annotations

import csv
import datetime as dt
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpudesk.cli.common import (
    current_home,
    fail,
    owner_filter,
    print_json,
    say_damaged,
    simulated_banner,
)
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.cli.job_extras_view import comment_text
from gpudesk.cli.plot_output import PLOT_HELP, plot_target, write_plot
from gpudesk.core.protocol import MAX_ROW_ID
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import JobStateName, JobView
    from gpudesk.plots.common import PlotTarget

history_app = typer.Typer()

FORMATS = ("table", "csv", "json", "codecarbon")  # codecarbon: gpudesk.cli.emissions
FINISHED: list[JobStateName] = ["succeeded", "failed", "cancelled"]


@dataclass(frozen=True)
class HistoryRow:
    """One finished job as `history` reports it; None where nothing was measured."""

    id: int
    name: str
    user: str
    state: str
    exit_code: int | None
    attempts: int
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    wall_s: float | None
    gpus: int
    gpu_s: float | None
    placement: str | None  # the last attempt's slot (gpu:0/mps, mig 1g.10gb, cpu:1)
    cpu_s: float | None
    rss_peak_mib: float | None
    gpu_memory_peak_mib: float | None
    gpu_j: float | None
    cpu_j: float | None
    energy_j: float | None
    co2e_g: float | None
    # energy_j is a share of a shared GPU's (or CPU's) energy: an estimate, shown with "~"
    energy_estimate: bool = False
    comment: str = ""  # submit --comment (printable: control characters spelled out)
    # the station's backend (sim:MODEL) where the job's GPUs were SIMULATED: its GPU-seconds,
    # GPU energy and the CO2e they add are the simulator's ("" for a CPU job, or real GPUs)
    simulated: str = ""


def history_row(job: JobView, simulated: str | None = None) -> HistoryRow:
    wall = (
        job.ended_at - job.started_at
        if job.started_at is not None and job.ended_at is not None
        else None
    )
    usage = job.usage
    peaks = [
        a.gpu_memory_peak_mib
        for a in (usage.per_attempt if usage else [])
        if a.gpu_memory_peak_mib is not None
    ]
    return HistoryRow(
        id=job.id,
        name=job.name,
        user=job.user,
        state=job.state,
        exit_code=job.exit_code,
        attempts=job.attempts,
        submitted_at=job.submitted_at,
        started_at=job.started_at,
        ended_at=job.ended_at,
        wall_s=wall,
        gpus=job.spec.gpus,
        gpu_s=job.gpu_s,
        placement=job.last_slot,
        cpu_s=usage.cpu_s if usage else None,
        rss_peak_mib=usage.rss_peak_mib if usage else None,
        gpu_memory_peak_mib=max(peaks) if peaks else None,
        gpu_j=usage.gpu_j if usage else None,
        cpu_j=usage.cpu_j if usage else None,
        energy_j=usage.total_j if usage else None,
        energy_estimate=bool(usage and usage.estimate),
        co2e_g=usage.carbon_g if usage else None,
        comment=comment_text(job.spec),
        simulated=(simulated or "") if job.spec.gpus else "",
    )


TIMES = ("submitted_at", "started_at", "ended_at")  # epoch seconds; ISO 8601 in the CSV


def iso_utc(ts: float) -> str:
    """A time for a spreadsheet: ISO 8601 in UTC with its offset, to the second
    (2026-11-29T16:20:05+00:00); JSON keeps the epoch seconds."""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def parse_since(text: str, now: float | None = None) -> float:
    """A point in time: a date or date-time (2026-11-20, 2026-11-20T14:00, "2026-11-20 14:00",
    local time) or how long ago (3h, 2d, 90m). Raises ValueError saying what is accepted."""
    from gpudesk.units import parse_duration

    value = text.strip()
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
    if value and value[-1].lower() in "smhd":
        try:
            return (now if now is not None else time.time()) - parse_duration(value)
        except ValueError:
            pass
    raise ValueError(
        f"'{printable_line(text)}' is not a time: give a date or date-time (2026-11-20, "
        "2026-11-20 14:00) or how long ago (90m, 3h, 2d)"
    )


def _table(rows: list[HistoryRow], width: int | None) -> str:
    """The jobs as a table in `width` columns (None: every column, whole): what fits 80
    columns first; the user, CPU-seconds, CO2e and the memory peaks where there is room
    (`--wide`, a wider terminal, a pipe), with a line naming those left out. Names are
    clipped in the middle (a sweep's jobs differ at the end); ids and states never."""
    from gpudesk import render

    def number(value: float | None, fmt: str) -> str:
        return "-" if value is None else fmt.format(value)

    commented = any(r.comment for r in rows)  # a COMMENT column only where one was given
    headers = (
        "ID",
        "NAME",
        "USER",
        "STATE",
        "EXIT",
        "ENDED",
        "WALL",
        "RAN ON",
        "GPU-S",
        "CPU-S",
        "MAXRSS",
        "GPU MEM",
        "ENERGY",
        "CO2E",
        *(["COMMENT"] if commented else []),
    )
    cells = [
        (
            r.id,
            r.name,
            r.user,
            r.state,
            "-" if r.exit_code is None else r.exit_code,
            render.clock(r.ended_at),  # with the date past 20 h, as queue
            render.duration(r.wall_s),
            r.placement or "-",
            number(r.gpu_s, "{:.0f}"),
            number(r.cpu_s, "{:.0f}"),
            number(r.rss_peak_mib, "{:.0f}M"),
            number(r.gpu_memory_peak_mib, "{:.0f}M"),
            render.energy_cell(r.energy_j, r.energy_estimate),
            number(r.co2e_g, "{:.1f}g"),
            *([r.comment or "-"] if commented else []),
        )
        for r in rows
    ]
    text, left_out = render.fitted_table(
        headers,
        cells,
        width=width,
        optional=(2, 9, 13, 10, 11, *([14] if commented else [])),  # the last gives way first
        max_widths={1: 32, 2: 10, 7: 16, 14: 40},
        right=(0, 4, 8, 9, 10, 11, 12, 13),
        shrink=(7, 1, 2),
        middle=(1,),
        min_widths={1: 12},
    )
    if left_out:
        text += f"\n({', '.join(left_out)} with --wide, or in --format csv)"
    return text


_SINCE = typer.Option(
    None,
    "--since",
    metavar="WHEN",
    help="Only jobs that ended since then: 2026-11-20, '2026-11-20 14:00', 3h, 2d.",
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
_LIMIT = typer.Option(
    1000, "--limit", min=1, max=MAX_ROW_ID, metavar="N", help="At most the newest N jobs."
)
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

    if output_format not in FORMATS:
        fail(
            f"--format: '{printable_line(output_format)}' is not one of {', '.join(FORMATS)}",
            EXIT_USAGE,
        )
    if output is not None and output_format != "codecarbon":
        fail("--output appends to a codecarbon emissions.csv: add --format codecarbon", EXIT_USAGE)
    if output is not None:
        from gpudesk.cli.report_file import gpudesk_homes, output_file_problem

        problem = output_file_problem(output, gpudesk_homes())
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
        if machine:
            _print_rows([], output_format, wide=wide, since=since)
        return
    jobs, simulated, cut = _finished_jobs(
        client, owner, start, limit, codecarbon_to=output, codecarbon=output_format == "codecarbon"
    )
    rows = [history_row(job, simulated) for job in jobs]
    _print_rows(rows, output_format, wide=wide, since=since, simulated=simulated)
    if cut:  # after the table, as queue says it; beside machine output, on stderr
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


def _finished_jobs(
    client: Client,
    owner: str | int | None,
    start: float | None,
    limit: int,
    *,
    codecarbon: bool,
    codecarbon_to: Path | None,
) -> tuple[list[JobView], str | None, str | None]:
    """The newest finished jobs (archived ones too) that ended since `start`, the station's
    backend where its GPUs are simulated, and what `limit` left out (None: nothing that could
    match); with --format codecarbon, written as emissions while the engine's station is at
    hand."""
    with client:
        # archived jobs too: history is accounting, the whole store's
        listing = client.job_listing(
            states=FINISHED,
            limit=limit,
            usage=True,
            user=owner,
            archived=True,
        )
        say_damaged(listing.damaged)
        jobs = listing.jobs
        jobs = [
            j for j in jobs if start is None or (j.ended_at is not None and j.ended_at >= start)
        ]
        cut = None
        # a sum over a cut listing is wrong, so the cut is said; not where --since already
        # dropped some of it: the listing reached back past `start`
        if listing.more and len(jobs) == len(listing.jobs):
            cut = _cut(client, owner, len(jobs) + len(listing.damaged), start is not None)
        if codecarbon:
            from gpudesk.cli import emissions

            try:
                emissions.report(client, jobs, codecarbon_to)
            except emissions.EmissionsFileError as exc:
                fail(str(exc))
    return jobs, listing.simulated, cut


def _cut(client: Client, owner: str | int | None, listed: int, since: bool) -> str:
    """What a --limit that cut the listing left out, as `queue` says it."""
    total = client.jobs_page(states=FINISHED, limit=1, user=owner, archived=True, count=True).total
    older = f"{total - listed} older jobs" if total else "older jobs"
    if since:
        return f"… and {older} not looked at (some may have ended since); --limit N looks further"
    return f"… and {older} not shown; --limit N shows more"


def _print_rows(
    rows: list[HistoryRow],
    output_format: str,
    *,
    wide: bool,
    since: str | None,
    simulated: str | None = None,
) -> None:
    """The rows as JSON, CSV or a table (codecarbon's were written already). On a SIMULATED
    station the table starts by saying so, the JSON says it beside the jobs (as `queue
    --json` does), and each GPU job's row carries it (`simulated`)."""
    if output_format == "codecarbon":
        pass  # written above, with the engine's station at hand
    elif output_format == "json":
        print_json({"jobs": [asdict(row) for row in rows], "simulated": simulated})
    elif output_format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([f.name for f in fields(HistoryRow)])
        for row in rows:
            writer.writerow(
                [
                    "" if v is None else iso_utc(v) if k in TIMES else v
                    for k, v in asdict(row).items()
                ]
            )
    elif rows:
        from gpudesk import render

        if simulated:
            print(simulated_banner(simulated))  # said first, as `queue` says it
        print(_table(rows, None if wide else render.table_width()))
    else:
        print("no finished jobs" + (f" since {since}" if since else ""))


def _plot_history(target: PlotTarget, rows: list[HistoryRow], caption: str) -> None:
    """`--plot`: GPU-hours and energy per day, by user."""
    from gpudesk import render
    from gpudesk.plots.history import history_figure, history_text

    write_plot(
        target,
        lambda: history_figure(rows, caption=caption),
        lambda: history_text(rows, caption=caption, width=render.terminal_width()),
    )
