"""What `gpudesk history` prints: each finished job as a `HistoryRow`, and the rows as a table,
CSV or JSON, written as the listing's pages arrive (`HistoryOutput`).

CSV and JSON are written a page at a time: a page's rows are text at once, and the jobs' replies
go with the page (`history --limit 100000` held every reply, 0.4-0.9 GiB, before it printed).
A listing that comes newest first (`JobPages.newest_first`: the newest `--limit` of more) keeps
its pages' text until the end and writes them oldest first. The table is kept whole until the
end, as rows, not replies: its column widths, the columns that fit the terminal, the COMMENT
column and the way names are clipped apart all depend on every row. The output is the same, to
the byte, as when every row was gathered first."""

from __future__ import annotations

import csv
import datetime as dt
import io
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from gpudesk.cli.common import simulated_banner
from gpudesk.cli.job_extras_view import comment_text
from gpudesk.text import json_text

if TYPE_CHECKING:
    from gpudesk.api.models import JobView


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


def history_table(rows: Sequence[HistoryRow], width: int | None) -> str:
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
        # the last gives way first: at 40 columns ID, NAME, STATE, EXIT and WALL are left
        optional=(6, 4, 5, 7, 12, 8, 2, 9, 13, 10, 11, *([14] if commented else [])),
        max_widths={2: 10, 7: 16, 14: 40},  # a name takes the room there is
        right=(0, 4, 8, 9, 10, 11, 12, 13),
        shrink=(7, 1, 2),
        middle=(1,),
        min_widths={1: 12},
    )
    if left_out:
        text += "\n" + render.fold(
            f"({', '.join(left_out)} with --wide, or in --format csv)", width
        )
    return text


FIELDS = tuple(f.name for f in fields(HistoryRow))


def row_fields(row: HistoryRow) -> dict[str, Any]:
    """The row as `dataclasses.asdict` gives it (every field is a plain value, which asdict
    copies as itself), without its recursive copy: a tenth of the time."""
    return {name: getattr(row, name) for name in FIELDS}


class HistoryOutput:
    """The rows as they come, a page at a time (`add`), then what ends the output (`finish`).
    `newest_first`: the pages come newest first (each oldest first within), so each page's
    text is kept and written in reverse at the end."""

    def __init__(self, newest_first: bool) -> None:
        self.newest_first = newest_first
        self._kept: list[str] = []  # a newest-first listing's pages, as text

    def add(self, rows: Sequence[HistoryRow]) -> None:
        if not rows:
            return
        text = self._text(rows)
        if self.newest_first:
            self._kept.append(text)
        else:
            self._write(text)

    def finish(self, simulated: str | None) -> None:
        while self._kept:
            self._write(self._kept.pop())

    def _text(self, rows: Sequence[HistoryRow]) -> str:
        raise NotImplementedError

    def _write(self, text: str) -> None:
        sys.stdout.write(text)


class CsvOutput(HistoryOutput):
    """A header, then a line per job; times ISO 8601 in UTC (a spreadsheet reads them)."""

    def __init__(self, newest_first: bool) -> None:
        super().__init__(newest_first)
        self._write(self._lines([list(FIELDS)]))

    def _text(self, rows: Sequence[HistoryRow]) -> str:
        return self._lines(
            [
                [
                    "" if v is None else iso_utc(v) if k in TIMES else v
                    for k, v in row_fields(row).items()
                ]
                for row in rows
            ]
        )

    @staticmethod
    def _lines(rows: list[list[Any]]) -> str:
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        return text.getvalue()


class JsonOutput(HistoryOutput):
    """`{"jobs": [...], "simulated": ...}` as `print_json` writes it (`json_text`, indent 2), a
    job at a time. A row's values are all plain (numbers, text, None), each written as
    json_text writes it alone: indented, json_text writes them the same, in pure Python
    (an eighth of the speed)."""

    def __init__(self, newest_first: bool) -> None:
        super().__init__(newest_first)
        self._started = False

    def _text(self, rows: Sequence[HistoryRow]) -> str:
        return ",\n".join(map(_json_object, rows))

    def _write(self, text: str) -> None:
        sys.stdout.write(",\n" if self._started else '{\n  "jobs": [\n')
        sys.stdout.write(text)
        self._started = True

    def finish(self, simulated: str | None) -> None:
        super().finish(simulated)
        sys.stdout.write("\n  ],\n" if self._started else '{\n  "jobs": [],\n')
        sys.stdout.write(f'  "simulated": {json_text(simulated)}\n}}\n')


_JSON_KEYS = tuple((json_text(name), name) for name in FIELDS)


def _json_object(row: HistoryRow) -> str:
    """The row as an item of the "jobs" list, two levels in (4 spaces; its fields 6)."""
    members = ",\n".join(
        f"      {key}: {json_text(getattr(row, name))}" for key, name in _JSON_KEYS
    )
    return "    {\n" + members + "\n    }"


class TableOutput(HistoryOutput):
    """The table, fitted to `width` (None: every column, whole), with the SIMULATED banner
    first; "no finished jobs" for none. Its rows are kept to the end (the module says why)."""

    def __init__(self, newest_first: bool, width: int | None, since: str | None) -> None:
        super().__init__(newest_first)
        self.width = width
        self.since = since
        self.pages: list[Sequence[HistoryRow]] = []

    def add(self, rows: Sequence[HistoryRow]) -> None:
        if rows:
            self.pages.append(rows)

    def finish(self, simulated: str | None) -> None:
        pages = reversed(self.pages) if self.newest_first else iter(self.pages)
        rows = [row for page in pages for row in page]
        self.pages.clear()
        if not rows:
            print("no finished jobs" + (f" since {self.since}" if self.since else ""))
            return
        if simulated:
            print(simulated_banner(simulated, self.width))  # said first, as `queue` says it
        print(history_table(rows, self.width))


def history_output(
    output_format: str, *, newest_first: bool, width: int | None, since: str | None
) -> HistoryOutput:
    """The output of `--format` table, csv or json."""
    if output_format == "csv":
        return CsvOutput(newest_first)
    if output_format == "json":
        return JsonOutput(newest_first)
    return TableOutput(newest_first, width, since)
