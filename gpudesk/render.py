"""Plain-text rendering shared by the commands and the desk: durations, times, fixed-width tables,
sparklines and bars."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

from gpudesk.text import printable, printable_line
from gpudesk.units import seconds, watt_hours

if TYPE_CHECKING:
    from gpudesk.api.models import LoaderOrphan, RemainingView


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def orphaned(orphan: LoaderOrphan, now: float) -> str:
    """A shared loader's producer that lost its engine (gpudesk/loader/orphan.py), in words:
    since when, and when it stops by itself."""
    stops = (
        f"it stops in {duration(orphan.stops_at - now)} unless a consumer connects"
        if orphan.stops_at is not None
        else f"it stops {seconds(orphan.grace_s)} after its last consumer leaves"
    )
    return (
        f"orphaned {duration(now - orphan.since)} ago: its engine (pid {orphan.engine_pid}) "
        f"is gone; {stops}"
    )


def clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    if time.time() - ts > 20 * 3600:
        return time.strftime("%m-%d %H:%M", time.localtime(ts))
    return time.strftime("%H:%M:%S", time.localtime(ts))


def since(ts: float | None, now: float | None = None) -> str:
    """When an energy counter began, for "12.5 Wh since 21:40": the time of day, with the
    date when it began on another day than `now` (default: this moment); "" when unknown."""
    if ts is None:
        return ""
    day = time.strftime("%Y-%m-%d", time.localtime(time.time() if now is None else now))
    if time.strftime("%Y-%m-%d", time.localtime(ts)) != day:
        return time.strftime("%m-%d %H:%M", time.localtime(ts))
    return time.strftime("%H:%M", time.localtime(ts))


def energy_cell(total_j: float | None, estimate: bool) -> str:
    """A job's total energy for a table cell: "~" marks an estimate, "-" nothing measured."""
    if total_j is None:
        return "-"
    return ("~" if estimate else "") + watt_hours(total_j)


SPARKS = "▁▂▃▄▅▆▇█"
EMPTY = "·"


def mig_pending(
    index: int, enabled: bool | None, pending: bool | None, advice: bool = True
) -> str | None:
    """ "MIG off now, on after a GPU reset: …" where `nvidia-smi -mig` changed a GPU's mode and
    it waits for a reset (as nvidia-smi marks it "Enabled*"), with what applies it (`advice`);
    None where nothing is pending."""
    if enabled is None or pending is None or enabled == pending:
        return None
    now, then = ("on", "off") if enabled else ("off", "on")
    said = f"MIG {now} now, {then} after a GPU reset"
    return f"{said}: {gpu_reset_advice(index)}" if advice else said


def gpu_reset_advice(index: int) -> str:
    """What applies a GPU's pending MIG mode."""
    return (
        f"stop every process on it, then `sudo nvidia-smi -i {index} -r` or reboot (gpudesk "
        "never resets a GPU)"
    )


def sparkline(values: Iterable[float | None], width: int, top: float = 100.0) -> str:
    """The last `width` values as block characters (a gap where a value is missing)."""
    points = list(values)[-width:]
    out = []
    for value in points:
        if value is None:
            out.append(" ")
            continue
        level = max(0.0, min(1.0, value / top)) if top else 0.0
        out.append(SPARKS[min(len(SPARKS) - 1, round(level * (len(SPARKS) - 1)))])
    return "".join(out).rjust(width)


def bar(fraction: float | None, width: int, fill: str = "█") -> str:
    if fraction is None:
        return EMPTY * width
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return fill * filled + EMPTY * (width - filled)


def fill(text: str, width: int, indent: str = "  ") -> str:
    """A line of prose in `width` columns, its continued lines indented by `indent`; a word,
    a path or a hyphenated name is never broken (a longer one runs past `width`)."""
    return textwrap.fill(
        text, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False
    )


def fold(text: str, width: int | None, indent: str = "  ") -> str:
    """A line said beside a table (a banner, a note) folded as `fill` folds it into the table's
    `width`, continued under `indent` (a `key: value` line's: under its value); whole where
    there is none (a pipe: one line, as a script greps it)."""
    return text if width is None else fill(text, width, indent)


def cell_width(text: str) -> int:
    """The columns `text` takes on a terminal: a wide (East Asian) character takes two, so a
    job named `训练-模型-大` is 12 columns, not 7 (rich's cell widths; plain ASCII, nearly every
    cell, is measured without importing them)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _fit(text: str, width: int, from_end: bool = False) -> str:
    """The longest start (or end) of `text` that fits in `width` columns."""
    if width <= 0:
        return ""
    if text.isascii():
        return text[-width:] if from_end else text[:width]
    from rich.cells import get_character_cell_size

    kept: list[str] = []
    used = 0
    for char in reversed(text) if from_end else text:
        size = get_character_cell_size(char)
        if used + size > width:
            break
        kept.append(char)
        used += size
    return "".join(reversed(kept) if from_end else kept)


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` padded with spaces to `width` columns, on the left where `right` (aligned right)."""
    gap = " " * max(0, width - cell_width(text))
    return gap + text if right else text + gap


# What marks a cut: `…`, or `...` where the output cannot carry it (ascii_ellipsis)
ELLIPSIS: ContextVar[str] = ContextVar("ELLIPSIS", default="…")


@contextlib.contextmanager
def ascii_ellipsis(wanted: bool = True) -> Iterator[None]:
    """Within it (where `wanted`), text is cut with `...`: for an output whose encoding has no
    `…` (a latin-1 or ASCII terminal, `gpudesk top`'s), in the same columns."""
    token = ELLIPSIS.set("..." if wanted else ELLIPSIS.get())
    try:
        yield
    finally:
        ELLIPSIS.reset(token)


def clip(text: str, width: int) -> str:
    """`text` in `width` columns, cut with an ellipsis where it is wider."""
    if cell_width(text) <= width:
        return text
    mark = ELLIPSIS.get()
    if width < len(mark):
        return _fit(text, max(0, width))
    return _fit(text, width - len(mark)) + mark


def clip_middle(text: str, width: int, head: int | None = None) -> str:
    """`text` in `width` columns with the ellipsis in the middle, keeping both ends: `head`
    columns of its start (default: a third) and the rest from its end, which differs most
    between a sweep's jobs (`light-lr0.01-h512-1`, `-2`)."""
    if cell_width(text) <= width:
        return text
    mark = ELLIPSIS.get()
    if width < len(mark) + 2:
        return clip(text, width)
    if head is None:
        head = (width - len(mark)) // 3
    head = max(0, min(head, width - len(mark)))
    tail = width - len(mark) - head
    return _fit(text, head) + mark + _fit(text, tail, from_end=True)


def clip_apart(values: Sequence[str], width: int) -> list[str]:
    """Each of a column's `values` in `width` columns, clipped in the middle (clip_middle) at
    the one place that keeps the most of them apart: in 14 columns `light-lr0.01-h512-1` and
    `light-lr0.001-h512-1` become `lig….01-h512-1` and `lig…001-h512-1`, not the same
    `ligh…01-h512-1` twice. Of the places that tell as many apart, the one nearest a third in."""
    if all(cell_width(v) <= width for v in values):
        return list(values)
    if width < 3:
        return [clip(v, width) for v in values]
    preferred = (width - len(ELLIPSIS.get())) // 3
    best: tuple[int, int] | None = None  # (distinct values, -distance from a third), head
    chosen = preferred
    for head in sorted(range(width), key=lambda h: abs(h - preferred)):
        distinct = len({clip_middle(v, width, head) for v in values})
        score = (distinct, -abs(head - preferred))
        if best is None or score > best:
            best, chosen = score, head
        if distinct == len(set(values)):
            break  # the nearest place that tells them all apart
    return [clip_middle(v, width, chosen) for v in values]


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    max_widths: dict[int, int] | None = None,
    right: Sequence[int] = (),
    width: int | None = None,
    shrink: Sequence[int] = (),
    middle: Sequence[int] = (),
    min_widths: dict[int, int] | None = None,
) -> str:
    """A plain table: columns separated by two spaces. Given a `width`, columns are clipped to
    `max_widths` by column index, and the `shrink` columns (in that order, each down to its
    header, or its `min_widths` where that is wider) are clipped further until every line fits
    in it, where they can: list the free text first (a reason, a path), names after; columns
    not listed (ids, states) are never clipped. The `middle` columns (job names) are clipped in the
    middle where that keeps them apart (clip_apart): a sweep's jobs differ at the end.
    Without a `width` (output to a pipe, `--wide`) every cell is whole, for a script."""
    cells, widths, _ = _layout(headers, rows, max_widths, width, shrink, min_widths)
    columns = [
        clip_apart([r[i] for r in cells], w) if i in middle else [clip(r[i], w) for r in cells]
        for i, w in enumerate(widths)
    ]
    lines = []
    for number in range(len(cells)):
        parts = [
            pad(column[number], w, right=i in right)
            for i, (column, w) in enumerate(zip(columns, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _layout(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    max_widths: dict[int, int] | None,
    width: int | None,
    shrink: Sequence[int],
    min_widths: dict[int, int] | None,
) -> tuple[list[list[str]], list[int], int]:
    """`table`'s cells as text, each column's width, and by how many columns the widest line
    still exceeds `width` (0 or less: it fits)."""
    # no width: nothing to fit, so nothing clipped (a script reading a pipe needs whole cells)
    max_widths = max_widths if width is not None and max_widths else {}
    min_widths = min_widths or {}
    # each cell on one line, what reorders or hides text spelled out: a job's name stored
    # before such characters were refused is shown as `\x9b`, never obeyed (gpudesk.text)
    cells = [[str(c) for c in headers]] + [
        ["-" if c is None else printable_line(str(c)) for c in r] for r in rows
    ]
    widths = [
        min(
            max(cell_width(r[i]) for r in cells),
            max(cell_width(cells[0][i]), max_widths.get(i, 10_000)),
        )
        for i in range(len(headers))
    ]
    excess = sum(widths) + 2 * (len(widths) - 1) - (width or 10_000_000)
    for i in shrink:
        if excess <= 0:
            break
        floor = max(cell_width(str(headers[i])), 4, min_widths.get(i, 0))
        cut = min(excess, max(0, widths[i] - floor))
        widths[i] -= cut
        excess -= cut
    return cells, widths, excess


def fitted_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    width: int | None,
    optional: Sequence[int] = (),
    max_widths: dict[int, int] | None = None,
    right: Sequence[int] = (),
    shrink: Sequence[int] = (),
    middle: Sequence[int] = (),
    min_widths: dict[int, int] | None = None,
) -> tuple[str, list[str]]:
    """`table` in `width` columns, leaving out `optional` columns (the last listed first) while
    it would not fit otherwise, `shrink` columns clipped down to their `min_widths` at most;
    where it still does not fit once every optional column is out (a 40-column terminal), the
    `shrink` columns give way below their `min_widths` too, down to their headers: the columns
    kept (ids, states) then fit whole. The table and the headers of the columns left out (for
    a line saying how to see them)."""
    kept = list(range(len(headers)))
    dropped: list[str] = []
    for column in [*reversed(optional), None]:
        index = {old: new for new, old in enumerate(kept)}
        picked = [[row[i] for i in kept] for row in rows]
        args = (
            [headers[i] for i in kept],
            picked,
            {index[i]: w for i, w in (max_widths or {}).items() if i in index},
        )
        moved = [index[i] for i in shrink if i in index]
        floors = {index[i]: w for i, w in (min_widths or {}).items() if i in index}
        fits = _layout(*args, width, moved, floors)[2] <= 0
        if column is None and not fits:
            floors = {}  # nothing left to leave out: a name clipped short beats a wrapped line
        if column is None or fits:
            text = table(
                *args,
                right=[index[i] for i in right if i in index],
                width=width,
                shrink=moved,
                middle=[index[i] for i in middle if i in index],
                min_widths=floors,
            )
            return text, list(reversed(dropped))
        kept.remove(column)
        dropped.append(headers[column])
    raise AssertionError("unreachable")  # the loop returns with column None at the latest


def runtime(started: float | None, ended: float | None, now: float | None = None) -> float | None:
    """Seconds from `started` until `ended`, else until `now` (default: this moment)."""
    if started is None:
        return None
    return (ended or (time.time() if now is None else now)) - started


def file_end(path: str | os.PathLike[str] | None, max_bytes: int = 4096) -> str:
    """The last `max_bytes` of a job's log as text, across its rotations (gpudesk.joblog); ""
    when there is none or it cannot be read."""
    if not path:
        return ""
    try:
        from gpudesk import joblog

        # a byte that is not UTF-8 spelled \xff, as `gpudesk logs` spells it (not U+FFFD)
        return joblog.tail(path, max_bytes).decode("utf-8", "backslashreplace")
    except OSError:
        return ""


def last_line(path: str | os.PathLike[str] | None, max_bytes: int = 4096) -> str:
    """The last non-empty line of a log file (cheap: reads only its end), its control
    characters spelled out (gpudesk.text.printable): it is shown on a terminal."""
    tail = file_end(path, max_bytes)
    for line in reversed(tail.replace("\r", "\n").splitlines()):
        if line.strip():
            return printable(line.strip())
    return ""


def shorten_path(path: str | None, cwd: str | None = None) -> str:
    """A path for people: relative to the working directory when inside it, else under `~`
    when in the home folder, else as it is."""
    if not path:
        return "-"
    here = cwd if cwd is not None else os.getcwd()
    if path.startswith(here.rstrip(os.sep) + os.sep):
        return os.path.relpath(path, here)
    home = str(Path.home())
    return "~" + path[len(home) :] if path.startswith(home + os.sep) else path


def terminal_width() -> int:
    """The width to fit plain output to: $COLUMNS, else the terminal's, else 80."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def table_width() -> int | None:
    """The width a command's table is fitted to: the terminal's (terminal_width, $COLUMNS
    first); None when the output goes to a pipe or a file and $COLUMNS is not set, which keeps
    whole cells for a script (`gpudesk queue | grep`), as `ps` does."""
    if os.environ.get("COLUMNS", "").strip() or sys.stdout.isatty():
        return terminal_width()
    return None


def time_left(r: RemainingView | None) -> str:
    """A running job's remaining time in a table cell, as squeue's TIME_LEFT column stands:
    `~4m10s` (from its progress or its command family's runs; `show` says which), `?` where it
    is unknown, "-" for a job not running on the station (none)."""
    if r is None:
        return "-"
    return "?" if r.seconds is None else f"~{duration(r.seconds)}"


def remaining_text(r: RemainingView) -> str:
    """A running job's remaining time and where it came from: "~12 min (from its progress:
    480/1000 at 0.67/s)", from its command family's history (its owner's runs: on a shared
    station another member's never count), or unknown and why."""
    if r.source == "progress" and r.seconds is not None and r.done is not None:
        rate = f" at {r.rate_per_s:.3g}/s" if r.rate_per_s is not None else ""
        return f"{_estimate(r.seconds)} (from its progress: {r.done:g}/{r.total or 0:g}{rate})"
    if r.source == "history" and r.seconds is not None and r.typical_s is not None:
        return (
            f"{_estimate(r.seconds)} (from its command family's history: its owner's runs take "
            f"{_about(r.typical_s)}, it has run {_about(r.elapsed_s or 0.0)})"
        )
    if r.done is not None and r.total is not None:
        progress = f"its progress {r.done:g}/{r.total:g}, its rate not measured yet"
    elif r.done is not None:
        progress = "its progress lines give no TOTAL"
    else:
        progress = "no progress DONE/TOTAL lines"
    if r.typical_s is not None and r.elapsed_s is not None:
        return (
            f"unknown ({progress}; it has run {_about(r.elapsed_s)}, past its command "
            f"family's {_about(r.typical_s)})"
        )
    return f"unknown ({progress}, and no finished run of its command family by its owner)"


def _estimate(seconds: float) -> str:
    """An estimate, said as one: "~12 min", or "over 100 years" as it is."""
    about = _about(seconds)
    return about if about.startswith("over ") else f"~{about}"


def _about(seconds: float) -> str:
    """An estimate's duration, as round as it is good: "45 s", "12 min", "3.5 h", "12 days"
    ("over 100 years": a job's progress may promise anything)."""
    if seconds >= 100 * 365 * 86400:
        return "over 100 years"
    if seconds >= 72 * 3600:
        return f"{seconds / 86400:.0f} days"
    if seconds < 90:
        return f"{max(seconds, 0.0):.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def id_ranges(ids: Sequence[int]) -> str:
    """`ids` said short: "17-2016" for a run, "3, 5-9" otherwise."""
    runs: list[list[int]] = []
    for job_id in sorted(ids):
        if runs and job_id == runs[-1][1] + 1:
            runs[-1][1] = job_id
        else:
            runs.append([job_id, job_id])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def array_tasks_text(tasks: Sequence[int], jobs: Sequence[int]) -> str:
    """What an array's id names, for the views of its first job (`show`, `logs`, the desk's
    detail), from its tasks and their jobs in task order: `array 12: tasks 0-2 (jobs 12-14);
    12 names them all, 12_1 task 1`."""
    head, task = jobs[0], tasks[1 if len(tasks) > 1 else 0]
    spans = id_ranges(tasks).replace(", ", ",")
    named = f"{head} names them all, {head}_{task} task {task}"
    return f"array {head}: tasks {spans} (jobs {id_ranges(jobs)}); {named}"
