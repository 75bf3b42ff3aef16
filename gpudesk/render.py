"""Plain-text rendering shared by the commands and the desk: durations, times, fixed-width tables,
sparklines and bars."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpudesk import joblog
from gpudesk.text import printable
from gpudesk.units import watt_hours


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


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


def energy(usage: dict | None) -> str:
    """A job's total energy for a table cell: "~" marks an estimate, "-" nothing measured."""
    if not usage:
        return "-"
    return energy_cell(usage.get("total_j"), bool(usage.get("estimate")))


def energy_cell(total_j: float | None, estimate: bool) -> str:
    """`energy` from the figures themselves (a model's `usage.total_j`, `usage.estimate`)."""
    if total_j is None:
        return "-"
    return ("~" if estimate else "") + watt_hours(total_j)


SPARKS = "▁▂▃▄▅▆▇█"
EMPTY = "·"


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


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    max_widths: dict[int, int] | None = None,
    right: Sequence[int] = (),
    width: int | None = None,
    shrink: Sequence[int] = (),
) -> str:
    """A plain table: columns separated by two spaces, clipped to `max_widths` by column index.
    Given a `width`, the `shrink` columns (in that order, each down to its header) are clipped
    further until every line fits in it, where they can."""
    max_widths = max_widths or {}
    cells = [[str(c) for c in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    cells = [[clip(c, max_widths.get(i, 10_000)) for i, c in enumerate(r)] for r in cells]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    excess = sum(widths) + 2 * (len(widths) - 1) - (width or 10_000_000)
    for i in shrink:
        if excess <= 0:
            break
        cut = min(excess, max(0, widths[i] - max(len(str(headers[i])), 4)))
        widths[i] -= cut
        excess -= cut
    lines = []
    for row in cells:
        parts = [
            clip(c, w).rjust(w) if i in right else clip(c, w).ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


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
        return joblog.tail(path, max_bytes).decode("utf-8", "replace")
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
