"""Where a plot goes and how it is written: `--plot FILE` (the suffix names the format) or
`--plot -` (the terminal, in characters, no matplotlib needed), the figure every plot draws on,
and the small pieces the terminal renderings share.

matplotlib is imported inside `new_figure` and `rendered` only. The figures use the object-oriented
API (`Figure`, a canvas of its own) and never pyplot: no global figure manager, no display, no
backend chosen for the whole process.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpudesk.text import quoted

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TERMINAL = "-"
FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf"}
EXTRA = "pip install 'gpudesk[plot]'"
PNG_DPI = 110  # a docs-sized PNG; SVG and PDF are vector
# Colours that stay apart for the common colour-vision deficiencies (matplotlib's tab10 order).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
# In the terminal, stacked shares are told apart by their fill, not only by colour.
FILLS = "█▓▒░▞▚▖▗"


class PlotError(Exception):
    """A plot cannot be made as asked; the message is one paragraph for the user."""


class PlotsUnavailable(PlotError):
    """matplotlib is not installed (the `plot` extra)."""

    def __init__(self, problem: str = "") -> None:
        detail = f" ({problem})" if problem else ""
        super().__init__(
            f"plots need the plot extra: {EXTRA}{detail}; or draw it on the terminal with --plot -"
        )


class NothingToPlot(PlotError):
    """The command found nothing to draw (no job ran, no samples kept): no empty plot is
    written."""


@dataclass(frozen=True)
class PlotTarget:
    """Where `--plot` writes: a file in one of FORMATS, or the terminal (`path` None)."""

    path: Path | None
    format: str  # "svg", "png", "pdf" or "terminal"

    @property
    def terminal(self) -> bool:
        return self.path is None

    @classmethod
    def parse(cls, text: str) -> PlotTarget:
        """`-` or FILE.svg / .png / .pdf. Raises PlotError naming what is accepted."""
        if text == TERMINAL:
            return cls(None, "terminal")
        path = Path(text)
        if text.strip() and path.is_dir():
            raise PlotError(
                f"--plot {quoted(text)} is a folder; give a file name, e.g. {path / 'plot.svg'}"
            )
        fmt = FORMATS.get(path.suffix.lower())
        if not text.strip() or fmt is None:
            suffix = (
                f"its suffix {quoted(path.suffix)} names no plot format"
                if path.suffix
                else "it has no suffix to name a plot format"
            )
            raise PlotError(
                f"--plot {quoted(text)}: {suffix}; give a file ending in {', '.join(FORMATS)} (the "
                "suffix picks the format), or - to draw it on the terminal"
            )
        return cls(path, fmt)


def require_matplotlib() -> None:
    """Raises PlotsUnavailable, saying how to install it, when matplotlib cannot be imported."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise PlotsUnavailable(str(exc)) from None


def new_figure(width_in: float, height_in: float) -> Figure:
    """An empty figure of this size (inches), laid out so titles and labels do not overlap.
    Raises PlotsUnavailable without matplotlib."""
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def rendered(figure: Figure, target: PlotTarget) -> bytes:
    """The figure as the bytes of a file in the target's format, for the caller to write
    (atomically: savefig writing the file itself left half of it where the disk filled, over
    an earlier plot). Text stays text in SVG (small, searchable) and the files carry no date,
    so the same data gives the same file."""
    assert target.path is not None, "the terminal rendering is text, not a figure"
    require_matplotlib()
    import io

    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # Agg draws the PNG; savefig picks the SVG and PDF writers itself
    no_stamp = {"svg": "Date", "pdf": "CreationDate", "png": "Software"}[target.format]
    metadata: dict[str, str | None] = {no_stamp: None}
    out = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gpudesk"}):
        figure.savefig(out, format=target.format, dpi=PNG_DPI, metadata=metadata)
    return out.getvalue()


# --------------------------------------------------------------------------- shared pieces
@dataclass(frozen=True)
class TimeScale:
    """Seconds shown in the unit that suits the span: s, min or h."""

    divisor: float
    unit: str

    @classmethod
    def for_span(cls, seconds: float) -> TimeScale:
        if seconds >= 2 * 3600:
            return cls(3600.0, "h")
        if seconds >= 120:
            return cls(60.0, "min")
        return cls(1.0, "s")


def resample(
    points: Sequence[tuple[float, float]],
    start: float,
    end: float,
    width: int,
    hold_s: float = 0.0,
) -> list[float | None]:
    """`width` cells over [start, end]: each the mean of the points that fall in it. A cell
    with none takes the next point's value where that point is the mean of a window of
    `hold_s` reaching back into the cell; else None (a sparkline's gap)."""
    if width <= 0:
        return []
    span = max(end - start, 1e-9)
    sums = [0.0] * width
    counts = [0] * width
    kept = sorted((t, v) for t, v in points if start <= t <= end and math.isfinite(v))
    for t, value in kept:
        # a point is stamped at the end of what it measured: one on a cell's end is that cell's
        cell = max(0, min(width - 1, math.ceil((t - start) / span * width) - 1))
        sums[cell] += value
        counts[cell] += 1
    cells: list[float | None] = [s / c if c else None for s, c in zip(sums, counts, strict=True)]
    times = [t for t, _ in kept]
    for i, mean in enumerate(cells):
        if mean is not None or hold_s <= 0:
            continue
        cell_start, cell_end = start + i * span / width, start + (i + 1) * span / width
        after = bisect.bisect_right(times, cell_start)
        if after < len(kept) and kept[after][0] - hold_s <= cell_end:
            cells[i] = kept[after][1]
    return cells


def stacked_bar(shares: Sequence[float], total_width: int, scale: float) -> str:
    """Shares drawn one after another, each with its own fill (FILLS), `scale` a full bar."""
    out = []
    for i, share in enumerate(shares):
        cells = round(max(0.0, share) / scale * total_width) if scale > 0 else 0
        out.append(FILLS[i % len(FILLS)] * cells)
    text = "".join(out)[:total_width]
    return text.ljust(total_width, "·")
