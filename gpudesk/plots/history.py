"""`gpudesk history --plot`: GPU-hours and energy per day, stacked by user.

Days are local calendar days (as `history`'s table shows times). A job that ran across midnight
is split between the days in proportion to the time it ran in each: its GPU-seconds and energy
are assumed spread evenly over its wall time (from its first start to its end; time between
attempts counts, so a requeued job's split is approximate). Jobs that never started add
nothing; a job without an energy figure (nothing was measured) adds its GPU-hours only, and the
figure says how many there were. Every day from the first to the last is drawn, empty ones too.

The rows are `history`'s `HistoryRow`s (gpudesk.cli.history_output), read through the `UsageRecord`
protocol, so the plot does not import the CLI that imports it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gpudesk.plots.common import FILLS, PALETTE, NothingToPlot, new_figure, stacked_bar
from gpudesk.units import J_PER_WH, S_PER_HOUR

if TYPE_CHECKING:
    from matplotlib.figure import Figure


MIN_DAYS_WIDE = 7  # the panels are at least this many days wide


class UsageRecord(Protocol):
    """What the plot reads of one finished job."""

    @property
    def user(self) -> str: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def ended_at(self) -> float | None: ...
    @property
    def gpu_s(self) -> float | None: ...
    @property
    def energy_j(self) -> float | None: ...


@dataclass(frozen=True)
class DailyUsage:
    """GPU-hours and Wh per user per day: `gpu_h[user][i]` is for `days[i]`."""

    days: list[dt.date]
    users: list[str]  # the heaviest GPU users first
    gpu_h: dict[str, list[float]]
    energy_wh: dict[str, list[float]]
    without_energy: int  # jobs that ran but have no energy figure


def _day_shares(start: float, end: float) -> list[tuple[dt.date, float]]:
    """(local day, fraction of [start, end] in it); all in the start's day for an instant."""
    if end <= start:
        return [(dt.datetime.fromtimestamp(start).date(), 1.0)]
    shares = []
    at = start
    while at < end:
        day = dt.datetime.fromtimestamp(at).date()
        midnight = dt.datetime.combine(day + dt.timedelta(days=1), dt.time()).timestamp()
        upto = min(end, midnight)
        shares.append((day, (upto - at) / (end - start)))
        at = upto
    return shares


def daily_usage(rows: Sequence[UsageRecord]) -> DailyUsage:
    """Each user's GPU-hours and energy per local day, over every day from the first to the
    last that a job ran on."""
    gpu_h: dict[str, dict[dt.date, float]] = {}
    energy: dict[str, dict[dt.date, float]] = {}
    without = 0
    for row in rows:
        if row.started_at is None or row.ended_at is None:
            continue  # it never ran
        if row.energy_j is None:
            without += 1
        for day, share in _day_shares(row.started_at, row.ended_at):
            by_day = gpu_h.setdefault(row.user, {})
            by_day[day] = by_day.get(day, 0.0) + (row.gpu_s or 0.0) / S_PER_HOUR * share
            wh = energy.setdefault(row.user, {})
            wh[day] = wh.get(day, 0.0) + (row.energy_j or 0.0) / J_PER_WH * share
    seen = sorted({d for by_day in gpu_h.values() for d in by_day})
    if not seen:
        return DailyUsage([], [], {}, {}, without)
    days = [seen[0] + dt.timedelta(days=i) for i in range((seen[-1] - seen[0]).days + 1)]
    users = sorted(gpu_h, key=lambda u: (-sum(gpu_h[u].values()), u))
    return DailyUsage(
        days,
        users,
        {u: [gpu_h[u].get(d, 0.0) for d in days] for u in users},
        {u: [energy[u].get(d, 0.0) for d in days] for u in users},
        without,
    )


def _ran(rows: Sequence[UsageRecord]) -> DailyUsage:
    usage = daily_usage(rows)
    if not usage.days:
        raise NothingToPlot("nothing to plot: none of these jobs ran (no plot written)")
    return usage


def energy_unit(usage: DailyUsage) -> tuple[float, str]:
    """Wh, or kWh where a day's total reaches 1 kWh."""
    totals = [sum(usage.energy_wh[u][i] for u in usage.users) for i in range(len(usage.days))]
    return (1000.0, "kWh") if max(totals, default=0.0) >= 1000 else (1.0, "Wh")


def history_figure(rows: Sequence[UsageRecord], *, caption: str) -> Figure:
    """Two panels sharing the days: GPU-hours and energy, one stacked bar segment per user.
    Raises NothingToPlot when no job ran."""
    usage = _ran(rows)
    figure = new_figure(max(7.0, min(16.0, 4.0 + 0.3 * len(usage.days))), 6.2)
    gpu_ax, energy_ax = figure.subplots(2, 1, sharex=True)
    divisor, unit = energy_unit(usage)
    positions = list(range(len(usage.days)))
    for ax, values, scale in (
        (gpu_ax, usage.gpu_h, 1.0),
        (energy_ax, usage.energy_wh, divisor),
    ):
        bottom = [0.0] * len(usage.days)
        for i, user in enumerate(usage.users):
            heights = [v / scale for v in values[user]]
            ax.bar(
                positions,
                heights,
                bottom=bottom,
                color=PALETTE[i % len(PALETTE)],
                label=user,
                width=0.8,
            )
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.grid(axis="y", linewidth=0.3, alpha=0.5)
    gpu_ax.set_ylabel("GPU-hours (as allocated)")
    gpu_ax.set_title("GPU-hours per day, by user", fontsize=10)
    energy_ax.set_ylabel(f"energy ({unit})")
    missing = (
        f"; {usage.without_energy} job(s) without an energy figure add none"
        if usage.without_energy
        else ""
    )
    energy_ax.set_title(f"energy per day (GPU + CPU), by user{missing}", fontsize=10)
    energy_ax.set_xlabel("day (local time; a job across midnight is split by its time in each)")
    # a few days' bars keep a bar's width, centred, rather than fill the panel
    pad = max(0.0, (MIN_DAYS_WIDE - len(usage.days)) / 2)
    energy_ax.set_xlim(-0.5 - pad, len(usage.days) - 0.5 + pad)
    step = max(1, len(usage.days) // 20)
    energy_ax.set_xticks(
        positions[::step], [d.strftime("%m-%d") for d in usage.days[::step]], rotation=45
    )
    gpu_ax.legend(fontsize=8, title="user", title_fontsize=8, loc="upper left")
    figure.suptitle(caption, fontsize=10)
    return figure


# ------------------------------------------------------------------------------ terminal
def history_text(rows: Sequence[UsageRecord], *, caption: str, width: int) -> str:
    """A line per day: GPU-hours and energy as bars, each user's share with its own fill."""
    usage = _ran(rows)
    divisor, unit = energy_unit(usage)
    bar_w = max(8, (width - 6 - 2 * 12) // 2)
    gpu_totals = [sum(usage.gpu_h[u][i] for u in usage.users) for i in range(len(usage.days))]
    wh_totals = [sum(usage.energy_wh[u][i] for u in usage.users) for i in range(len(usage.days))]
    top_gpu, top_wh = max(gpu_totals), max(wh_totals)
    legend = "  ".join(f"{FILLS[i % len(FILLS)]} {u}" for i, u in enumerate(usage.users))
    lines = [caption, f"per day (local time), by user: {legend}"]
    lines.append(f"{'day':<5} {'GPU-hours':<{bar_w + 8}}  energy ({unit})")
    for i, day in enumerate(usage.days):
        gpu = stacked_bar([usage.gpu_h[u][i] for u in usage.users], bar_w, top_gpu)
        wh = stacked_bar([usage.energy_wh[u][i] for u in usage.users], bar_w, top_wh)
        energy = wh_totals[i] / divisor
        lines.append(f"{day.strftime('%m-%d')} {gpu} {gpu_totals[i]:7.2f}  {wh} {energy:8.2f}")
    if usage.without_energy:
        lines.append(f"{usage.without_energy} job(s) without an energy figure add none")
    return "\n".join(lines)
