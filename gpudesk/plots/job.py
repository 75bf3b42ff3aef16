"""`gpudesk show JOB --plot`: a job's SM activity, memory, power and CPU over its life.

The points are what the engine stores (`show` with `series`, docs/protocol.md): each the mean of a
10 s window, drawn as a step over the window that ended at its time; a point of a window that
closed after the job ended is drawn at its end. Power is the job's share of its GPUs' power as
the energy split credits it (all of it on a GPU of its own). The time axis starts at the job's
first attempt; each later attempt's start is a dashed line. A job with no stored point (it never
started, or ended before a sample was taken) has nothing to draw, and the command says so
rather than write an empty plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudesk import render
from gpudesk.plots.common import PALETTE, NothingToPlot, TimeScale, new_figure, resample

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from gpudesk.api.models import JobDetail, JobSeriesView

MIB_PER_GIB = 1024.0


@dataclass(frozen=True)
class Span:
    """The job's life on the time axis: from its first start to its end (or now)."""

    start: float
    end: float
    attempt_starts: list[tuple[int, float]]  # (number, start) of each attempt


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    lines: list[tuple[str, list[tuple[float, float]]]]  # (label, points) drawn in it
    empty: str  # said in the panel when no line has a point


def span_of(detail: JobDetail, series: JobSeriesView) -> Span:
    starts = [(a.number, a.started_at) for a in detail.attempts if a.started_at is not None]
    points = [t for _, pts in _all(series) for t, _ in pts]
    start = min([s for _, s in starts] or [detail.job.started_at or min(points, default=0.0)])
    ends = [a.ended_at for a in detail.attempts if a.ended_at is not None]
    if detail.job.ended_at is not None:
        end = detail.job.ended_at
    elif detail.job.placed or not ends:
        end = max(points, default=start)
    else:
        end = max(ends)
    return Span(start, max(end, start), sorted(starts))


def _all(series: JobSeriesView) -> list[tuple[str, list[tuple[float, float]]]]:
    return [
        ("cpu_pct", series.cpu_pct),
        ("rss_mib", series.rss_mib),
        ("gpu_memory_mib", series.gpu_memory_mib),
        ("gpu_sm_pct", series.gpu_sm_pct),
        ("gpu_power_w", series.gpu_power_w),
    ]


def panels(detail: JobDetail) -> tuple[Span, list[Panel]]:
    """The job's span and its four panels. Raises NothingToPlot when nothing was stored."""
    job, series = detail.job, detail.series
    if job.started_at is None and not detail.attempts:
        when = "never started" if job.terminal else "has not started yet"
        raise NothingToPlot(f"nothing to plot: job {job.id} ({job.name}) {when}")
    if series is None or not any(points for _, points in _all(series)):
        ran = render.duration(job.run_s())
        raise NothingToPlot(
            f"nothing to plot for job {job.id} ({job.name}): the engine stored no telemetry "
            f"for it (it ran {ran}; samples are taken every sample_interval while a job runs "
            "and kept as 10 s means for 30 days), so no plot is written"
        )
    span = span_of(detail, series)
    memory = [*series.gpu_memory_mib, *series.rss_mib]
    gib = max((v for _, v in memory), default=0.0) >= MIB_PER_GIB
    scale = MIB_PER_GIB if gib else 1.0

    def scaled(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        return [(t, v / scale) for t, v in points]

    no_gpu = "no GPU samples" + (" (it asked for no GPU)" if job.spec.gpus == 0 else "")
    return span, [
        Panel(
            "SM activity of its processes",
            "%",
            [("SM activity", list(series.gpu_sm_pct))],
            no_gpu,
        ),
        Panel(
            "memory",
            "GiB" if gib else "MiB",
            [
                ("GPU memory", scaled(series.gpu_memory_mib)),
                ("host memory (RSS)", scaled(series.rss_mib)),
            ],
            "no memory samples",
        ),
        Panel(
            "its share of its GPUs' power",
            "W",
            [("GPU power (its share)", list(series.gpu_power_w))],
            no_gpu,
        ),
        Panel(
            "CPU of its processes (100 % = one core)",
            "%",
            [("CPU", list(series.cpu_pct))],
            "no CPU samples",
        ),
    ]


def steps(
    points: Sequence[tuple[float, float]], span: Span, window_s: float
) -> tuple[list[float], list[float]]:
    """Seconds since the job's start and values, for a `steps-pre` line (each value drawn
    from the x before it to its own): each point's value held over the window it is the mean
    of, back to the point before; a gap (NaN) where points are more than two windows apart
    (the engine was down). A point past the job's end is drawn at its end."""
    xs: list[float] = []
    ys: list[float] = []
    previous: float | None = None
    for t, v in points:
        t = min(t, span.end)
        since = max(span.start, t - window_s)
        if previous is None:  # its window begins the line
            xs.append(since - span.start)
            ys.append(v)
        elif t - previous > 2 * window_s:  # nothing from the point before to its window
            xs.append(since - span.start)
            ys.append(math.nan)
        xs.append(t - span.start)
        ys.append(v)
        previous = t
    return xs, ys


def title_of(detail: JobDetail) -> str:
    job = detail.job
    simulated = detail.series is not None and detail.series.simulated and job.spec.gpus > 0
    return f"job {job.id} ({job.name}) by {job.user}: {job.state}, {job.attempts} attempt(s)" + (
        ", GPUs SIMULATED" if simulated else ""
    )


def job_figure(detail: JobDetail) -> Figure:
    """Four panels sharing the time axis: SM activity, memory, power, CPU."""
    span, shown = panels(detail)
    window_s = detail.series.window_s if detail.series is not None else 10.0
    scale = TimeScale.for_span(span.end - span.start)
    figure = new_figure(9.0, 7.6)
    axes: list[Axes] = list(figure.subplots(len(shown), 1, sharex=True))
    for ax, panel in zip(axes, shown, strict=True):
        drawn = 0
        for i, (label, points) in enumerate(panel.lines):
            if not points:
                continue
            xs, ys = steps(points, span, window_s)
            ax.plot(
                [x / scale.divisor for x in xs],
                ys,
                drawstyle="steps-pre",
                linewidth=1.0,
                color=PALETTE[i],
                label=label,
            )
            drawn += 1
        if not drawn:
            ax.text(0.5, 0.5, panel.empty, ha="center", va="center", transform=ax.transAxes)
        elif len(panel.lines) > 1:
            ax.legend(fontsize=7, loc="best")
        ax.set_title(panel.title, fontsize=9, loc="left")
        ax.set_ylabel(panel.unit)
        ax.set_ylim(bottom=0)
        ax.grid(linewidth=0.3, alpha=0.5)
        for number, start in span.attempt_starts[1:]:
            x = (start - span.start) / scale.divisor
            ax.axvline(x, color="black", linestyle="--", linewidth=0.8)
            if ax is axes[0]:
                ax.annotate(
                    f"attempt {number}",
                    (x, 1.0),
                    xycoords=("data", "axes fraction"),
                    xytext=(3, -10),
                    textcoords="offset points",
                    fontsize=7,
                )
    axes[-1].set_xlabel(f"time since the job started ({scale.unit})")
    axes[-1].set_xlim(0, max((span.end - span.start) / scale.divisor, 1e-6))
    figure.suptitle(title_of(detail), fontsize=10)
    return figure


# ------------------------------------------------------------------------------ terminal
def job_text(detail: JobDetail, *, width: int) -> str:
    """A sparkline per series over the job's life, with its range."""
    span, shown = panels(detail)
    window_s = detail.series.window_s if detail.series is not None else 10.0
    label_w = 22
    cells = max(10, width - label_w - 24)
    lines = [
        title_of(detail),
        f"over {render.duration(span.end - span.start)} from its start, one cell ≈ "
        f"{render.duration((span.end - span.start) / cells)}",
    ]
    for panel in shown:
        for label, points in panel.lines:
            if not points:
                lines.append(f"{label[:label_w]:<{label_w}} {panel.empty}")
                continue
            values = [v for _, v in points]
            top = max(values)
            clipped = [(min(t, span.end), v) for t, v in points]
            cells_v = resample(clipped, span.start, span.end, cells, hold_s=window_s)
            lines.append(
                f"{label[:label_w]:<{label_w}} {render.sparkline(cells_v, cells, top or 1.0)} "
                f"{min(values):.3g}–{top:.3g} {panel.unit}"
            )
    if len(span.attempt_starts) > 1:
        lines.append(
            "attempts started at "
            + ", ".join(f"#{n} +{render.duration(s - span.start)}" for n, s in span.attempt_starts)
        )
    return "\n".join(lines)
