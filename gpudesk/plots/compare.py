"""`gpudesk select compare … --plot`: what each data-selection preset costs against what it
scores, and after how many training runs its pre-pass pays for itself.

Left, quality against the minutes one run costs the first time (the fresh pre-pass plus the
training, wall time, means over runs: splits × seeds): one point per preset, error bars of one
standard deviation over runs where there are two or more, the full-data result a star and a
dashed line. A legend under both panels names each preset and its break-even.
Right, the break-even: the minutes n runs cost in all, on the full data (n × its training) and
under each preset (its pre-pass once, then n × its training); a preset's line crosses below the
full-data one at its break-even, the run count compare's table prints and this marks.

The rows are `select compare`'s `PresetRow`s (gpudesk.cli.compare_report); the plot reads them
through the `PresetResult` protocol, so it does not import the CLI that imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from gpudesk import render
from gpudesk.plots.common import PALETTE, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MIN_RUNS, MAX_RUNS = 5, 100  # the break-even panel's horizontal range


class PresetResult(Protocol):
    """What the plot reads of one preset's row (means over its runs: splits × seeds)."""

    @property
    def preset(self) -> str: ...
    @property
    def prepass_min(self) -> float | None: ...  # a fresh pre-pass; None: the preset has none
    @property
    def train_min(self) -> float | None: ...
    @property
    def quality_mean(self) -> float | None: ...
    @property
    def quality_sd(self) -> float | None: ...
    @property
    def break_even(self) -> str: ...  # a run count, "never", "-" (no pre-pass) or "?"


def run_cost_min(row: PresetResult) -> float | None:
    """Minutes one run costs the first time: the fresh pre-pass (if any) and the training."""
    if row.train_min is None:
        return None
    return (row.prepass_min or 0.0) + row.train_min


def plotted(rows: Sequence[PresetResult]) -> list[PresetResult]:
    """The rows with a quality and a cost to draw (a failed run has neither)."""
    return [r for r in rows if r.quality_mean is not None and run_cost_min(r) is not None]


def _break_even_runs(row: PresetResult) -> int | None:
    return int(row.break_even) if row.break_even.isdigit() else None


def _legend_label(row: PresetResult, is_full: bool) -> str:
    if is_full:
        return f"{row.preset}: the baseline (dashed)"
    runs = _break_even_runs(row)
    if runs is not None:
        return f"{row.preset}: breaks even after {runs} run{'s' if runs != 1 else ''}"
    if row.break_even == "never":
        return f"{row.preset}: never breaks even (trains no faster than full)"
    return f"{row.preset}: no pre-pass to pay back" if row.break_even == "-" else row.preset


def compare_figure(rows: Sequence[PresetResult], *, metric: str, caption: str) -> Figure:
    figure = new_figure(11.0, 5.6)
    quality_ax, cost_ax = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1.0]})
    full = next((r for r in rows if r.preset == "full"), None)
    legend = []
    for i, row in enumerate(plotted(rows)):
        x, y = run_cost_min(row), row.quality_mean
        is_full = row is full
        legend.append(
            quality_ax.errorbar(
                [x],
                [y],
                yerr=[row.quality_sd] if row.quality_sd is not None else None,
                fmt="*" if is_full else "o",
                markersize=13 if is_full else 7,
                color="black" if is_full else PALETTE[i % len(PALETTE)],
                capsize=3,
                label=row.preset,
            )
        )
    # One legend for both panels (a preset keeps its colour in each), naming each break-even;
    # notes beside the points would collide where presets cost and score alike.
    figure.legend(
        handles=legend,
        labels=[_legend_label(row, row is full) for row in plotted(rows)],
        loc="outside lower center",
        ncol=3,
        fontsize=8,
        frameon=False,
    )
    if full is not None and full.quality_mean is not None:
        quality_ax.axhline(full.quality_mean, color="black", linestyle="--", linewidth=0.8)
    quality_ax.set_xlabel("minutes per run: fresh pre-pass + training (wall time)")
    quality_ax.set_ylabel(f"{metric} (mean over runs, ± 1 SD)")
    quality_ax.set_title("quality against cost, per preset", fontsize=10)
    # room on the right for the last point's note
    longest = max((run_cost_min(r) or 0.0 for r in plotted(rows)), default=0.0)
    quality_ax.set_xlim(0, longest * 1.3 or 1.0)
    quality_ax.margins(y=0.15)
    quality_ax.grid(linewidth=0.3, alpha=0.5)

    _break_even_panel(cost_ax, rows, full)
    figure.suptitle(caption, fontsize=10)
    return figure


def _break_even_panel(ax: Axes, rows: Sequence[PresetResult], full: PresetResult | None) -> None:
    ax.set_title("break-even: minutes in all after n runs (a dot: paid back)", fontsize=10)
    ax.set_xlabel("training runs on the same data (n)")
    ax.set_ylabel("minutes in all (wall time)")
    if full is None or full.train_min is None:
        ax.text(
            0.5,
            0.5,
            "no full-data run to break even against\n(add full to --presets)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return
    evens = [n for n in (_break_even_runs(r) for r in rows) if n is not None]
    last = min(MAX_RUNS, max([MIN_RUNS, *(n + 2 for n in evens)]))
    runs = list(range(0, last + 1))
    ax.plot(
        runs,
        [n * full.train_min for n in runs],
        color="black",
        linestyle="--",
        label="full data",
    )
    for i, row in enumerate(plotted(rows)):
        if row is full or row.train_min is None:
            continue
        color = PALETTE[i % len(PALETTE)]
        prepass, train = row.prepass_min or 0.0, row.train_min
        ax.plot(runs, [prepass + n * train for n in runs], color=color, label=row.preset)
        n = _break_even_runs(row)
        if n is not None and n <= last:
            ax.plot([n], [prepass + n * train], "o", color=color, markersize=6)
    ax.set_xlim(0, last)
    ax.set_ylim(bottom=0)
    ax.grid(linewidth=0.3, alpha=0.5)


# ------------------------------------------------------------------------------ terminal
def compare_text(rows: Sequence[PresetResult], *, metric: str, caption: str, width: int) -> str:
    """Per preset: its quality and its cost per run as bars (each against the largest), and its
    break-even."""
    shown = plotted(rows)
    if not shown:
        return f"{caption}\nno preset has both a quality and a cost to draw"
    name_w = max(len(r.preset) for r in shown)
    bar_w = max(8, (width - name_w - 44) // 2)
    top_q = max(r.quality_mean or 0.0 for r in shown)
    top_c = max(run_cost_min(r) or 0.0 for r in shown)
    lines = [
        caption,
        f"{'':<{name_w}}  {metric + ' (± SD over runs)':<{bar_w + 18}}"
        f"minutes per run (fresh pre-pass + training)   break-even",
    ]
    for row in shown:
        quality, cost = row.quality_mean or 0.0, run_cost_min(row) or 0.0
        sd = f"±{row.quality_sd:.3f}" if row.quality_sd is not None else ""
        lines.append(
            f"{row.preset:<{name_w}}  {render.bar(quality / top_q if top_q else 0, bar_w)} "
            f"{quality:.4f}{sd:<7}  {render.bar(cost / top_c if top_c else 0, bar_w)} "
            f"{cost:7.2f}   {row.break_even}"
        )
    return "\n".join(lines)
