"""`gpudesk simulate … --plot`: each policy's timeline of the GPUs (one row of bars per GPU, one
bar per attempt, coloured by how it shared the GPU), and makespan, mean JCT and energy per policy.

Everything here is SIMULATED (the simulator replays a trace on a simulated station): the title
says so, on the figure and in the terminal.

Jobs that share a GPU at the same time (MPS, MIG, time-slicing) are drawn in lanes: a GPU's row
is split into as many lanes as it ever had jobs at once, and each attempt takes the first lane
free when it starts, so collocation shows as stacked bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpudesk import render
from gpudesk.plots.common import PALETTE, TimeScale, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from gpudesk.policy.simulator import Occupancy, SimResult

# How an attempt shared its GPU: the label and colour of each placement mode.
MODES = {
    "exclusive": ("alone", PALETTE[0]),
    "mps": ("MPS", PALETTE[2]),
    "mig": ("MIG", PALETTE[1]),
    "naive": ("time-sliced", PALETTE[3]),
}
OOM_HATCH = "////"
# In the terminal: the mode that ran most of a cell, by its fill.
MODE_FILLS = {"exclusive": "█", "mps": "▓", "mig": "▒", "naive": "░"}
ROW_FILL = 0.8  # of a GPU's row height, the rest is the gap to the next GPU


def lanes(occupancies: Sequence[Occupancy], gpu: int) -> tuple[list[tuple[Occupancy, int]], int]:
    """This GPU's attempts, each with its lane (the first free when it starts), and how many
    lanes the GPU needs."""
    ends: list[float] = []
    placed = []
    mine = sorted((o for o in occupancies if gpu in o.gpus), key=lambda o: (o.start_s, o.job_id))
    for occ in mine:
        lane = next((i for i, end in enumerate(ends) if end <= occ.start_s + 1e-9), None)
        if lane is None:
            lane = len(ends)
            ends.append(occ.end_s)
        else:
            ends[lane] = occ.end_s
        placed.append((occ, lane))
    return placed, max(1, len(ends))


def simulate_figure(results: Sequence[SimResult], *, gpus: int, caption: str) -> Figure:
    """One timeline per policy (shared time axis), then makespan, mean JCT and energy per
    policy; `caption` names the station and the trace (after SIMULATED in the title)."""
    longest = max((r.makespan_s for r in results), default=0.0)
    scale = TimeScale.for_span(longest)
    row_in = 0.32 * gpus + 0.55
    figure = new_figure(11.0, row_in * len(results) + 2.9)
    from matplotlib.patches import Patch

    grid = figure.add_gridspec(len(results) + 1, 3, height_ratios=[row_in] * len(results) + [2.3])
    timelines: list[Axes] = []
    for i, result in enumerate(results):
        ax = figure.add_subplot(grid[i, :], sharex=timelines[0] if timelines else None)
        timelines.append(ax)
        _timeline(ax, result, gpus, scale)
        if i < len(results) - 1:
            ax.tick_params(labelbottom=False)
    timelines[-1].set_xlabel(f"time since the trace began ({scale.unit}), SIMULATED")
    timelines[0].set_xlim(0, longest / scale.divisor * 1.01 if longest else 1)

    used = {o.mode for r in results for o in r.occupancies}
    handles = [
        Patch(facecolor=color, label=label)
        for mode, (label, color) in MODES.items()
        if mode in used
    ]
    if any(o.ended == "oom" for r in results for o in r.occupancies):
        handles.append(
            Patch(facecolor="white", edgecolor="black", hatch=OOM_HATCH, label="ended by OOM")
        )
    if handles:
        timelines[0].legend(
            handles=handles,
            loc="lower left",
            bbox_to_anchor=(0.0, 1.12),
            ncol=len(handles),
            fontsize=8,
            frameon=False,
        )

    policies = [r.policy for r in results]
    for column, (title, values, unit) in enumerate(
        (
            ("makespan", [r.makespan_s / 3600 for r in results], "h"),
            ("mean job completion time", [r.mean_jct_s / 3600 for r in results], "h"),
            ("energy, all GPUs", [r.energy_kwh for r in results], "kWh"),
        )
    ):
        ax = figure.add_subplot(grid[len(results), column])
        bars = ax.bar(policies, values, color=PALETTE[7])
        labels = [
            f"lost {r.lost}" if r.lost and title == "makespan" else f"{v:.2f}"
            for r, v in zip(results, values, strict=True)
        ]
        ax.bar_label(bars, labels=labels, fontsize=7, padding=1)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(unit)
        ax.set_ylim(0, max(values, default=0.0) * 1.18 or 1.0)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.tick_params(axis="y", labelsize=8)
    figure.suptitle(f"SIMULATED — {caption}", fontsize=10)
    return figure


def _timeline(ax: Axes, result: SimResult, gpus: int, scale: TimeScale) -> None:
    for gpu in range(gpus):
        placed, count = lanes(result.occupancies, gpu)
        height = ROW_FILL / count
        # one collection per (mode, ended) on this GPU: the bars of one kind share a style
        groups: dict[tuple[str, str], list[tuple[tuple[float, float], float]]] = {}
        for occ, lane in placed:
            span = (occ.start_s / scale.divisor, (occ.end_s - occ.start_s) / scale.divisor)
            groups.setdefault((occ.mode, occ.ended), []).append((span, gpu + lane * height))
        for (mode, ended), bars in groups.items():
            color = MODES.get(mode, (mode, PALETTE[7]))[1]
            # broken_barh draws one y range per call: one call per lane position
            for y in sorted({y for _, y in bars}):
                ax.broken_barh(
                    [span for span, at in bars if at == y],
                    (y, height),
                    facecolors=color,
                    edgecolors="white" if ended != "oom" else "black",
                    linewidth=0.3,
                    hatch=OOM_HATCH if ended == "oom" else None,
                )
    ax.set_ylim(gpus - (1 - ROW_FILL), -(1 - ROW_FILL))  # GPU 0 at the top
    ax.set_yticks([g + ROW_FILL / 2 for g in range(gpus)], [f"GPU {g}" for g in range(gpus)])
    ax.tick_params(axis="y", labelsize=7, length=0)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("GPU", fontsize=8)
    # a policy that lost jobs finished fewer of them: its end is no makespan to compare
    ended = (
        f"lost {result.lost}" if result.lost else f"makespan {render.duration(result.makespan_s)}"
    )
    ax.set_title(
        f"{result.policy}: {ended}, {len(result.occupancies)} attempts",
        loc="left",
        fontsize=9,
    )
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)


# ------------------------------------------------------------------------------ terminal
def simulate_text(results: Sequence[SimResult], *, gpus: int, caption: str, width: int) -> str:
    """The same in characters: a strip per GPU and policy (each cell the mode that ran most of
    it, · idle), then makespan, mean JCT and energy as bars."""
    longest = max((r.makespan_s for r in results), default=0.0)
    name_w = max((len(r.policy) for r in results), default=6)
    label_w = name_w + 8
    cells = max(10, width - label_w - 1)
    cell_s = longest / cells if longest else 1.0
    scale = TimeScale.for_span(cell_s)
    legend = "  ".join(
        f"{MODE_FILLS[m]} {label}"
        for m, (label, _) in MODES.items()
        if any(o.mode == m for r in results for o in r.occupancies)
    )
    lines = [
        f"SIMULATED — {caption}",
        f"GPU timelines, one cell ≈ {cell_s / scale.divisor:.3g} {scale.unit}: {legend}  · idle",
    ]
    for result in results:
        for gpu in range(gpus):
            label = f"{result.policy if gpu == 0 else '':<{name_w}}  GPU {gpu:<2}"
            lines.append(f"{label} {_strip(result.occupancies, gpu, cells, cell_s)}")
    lines.append("")
    bar_w = max(10, width - name_w - 16)
    for title, values, fmt in (
        ("makespan", [r.makespan_s for r in results], render.duration),
        ("mean JCT", [r.mean_jct_s for r in results], render.duration),
        ("energy (kWh)", [r.energy_kwh for r in results], lambda v: f"{v:.2f}"),
    ):
        top = max(values, default=0.0)
        lines.append(title)
        for result, value in zip(results, values, strict=True):
            fraction = value / top if top else 0.0
            said = f"lost {result.lost}" if result.lost and title == "makespan" else fmt(value)
            lines.append(f"  {result.policy:<{name_w}} {render.bar(fraction, bar_w)} {said}")
    return "\n".join(lines)


def _strip(occupancies: Sequence[Occupancy], gpu: int, cells: int, cell_s: float) -> str:
    out = []
    mine = [o for o in occupancies if gpu in o.gpus]
    for i in range(cells):
        start, end = i * cell_s, (i + 1) * cell_s
        covered: dict[str, float] = {}
        for occ in mine:
            overlap = min(end, occ.end_s) - max(start, occ.start_s)
            if overlap > 0:
                covered[occ.mode] = covered.get(occ.mode, 0.0) + overlap
        if not covered:
            out.append(render.EMPTY)
        else:
            mode = max(covered, key=lambda m: covered[m])
            out.append(MODE_FILLS.get(mode, "?"))
    return "".join(out)
