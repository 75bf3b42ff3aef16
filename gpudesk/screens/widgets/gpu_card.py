"""One GPU at a glance: SM activity over time, memory with each job's share, power and energy,
MIG slices with the job on each, and whether MPS serves it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

from gpudesk.api import GpuView, MigDeviceView, MpsFault, ProcessView
from gpudesk.render import mig_pending
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.glyphs import (
    SHARE_FILLS,
    gib,
    pct,
    share_bar,
    sparkline,
    watts,
)
from gpudesk.units import watt_hours

LABEL = 4  # "SM  ", "MEM " ...
MIG_PROFILE = re.compile(r"\d+g\.\d+gb(\+me)?")
FAULT_STYLE = "bold yellow"  # a warning: the GPU works, its jobs are time-sliced


def job_shares(processes: Sequence[ProcessView]) -> list[tuple[str, float]]:
    """(job label, MiB) per job holding memory among `processes` (a GPU's or a MIG device's)."""
    totals: dict[str, float] = {}
    for proc in processes:
        if proc.job_id is not None:
            label = f"j{proc.job_id}"
        else:
            label = "MPS" if proc.mps_server else "other"
        totals[label] = totals.get(label, 0.0) + (proc.used_memory_mib or 0.0)
    return sorted(totals.items(), key=lambda item: (item[0] in ("MPS", "other"), item[0]))


def gpu_processes(gpu: GpuView) -> list[ProcessView]:
    """Every process on the GPU, once. The engine lists a MIG GPU's processes on the GPU (each
    with the MIG device it runs on) and again on their MIG device; a process listed only on
    its device still counts."""
    listed = [*gpu.processes, *(p for mig in gpu.mig_devices for p in mig.processes)]
    return list({proc.pid: proc for proc in listed}.values())


def mig_profile(mig: MigDeviceView) -> str:
    """ "NVIDIA A100-SXM4-40GB MIG 3g.20gb" -> "3g.20gb" (NVML names MIG devices that way)."""
    name = mig.name or ""
    found = MIG_PROFILE.search(name)
    return found.group(0) if found else name


def mps_label(state: DeskState, index: int) -> str:
    mps = state.station.mps if state.station else None
    if mps is not None and mps.fault_of(index) is not None:
        return "MPS FAULT"
    if any(job.mode == "mps" for job in state.jobs_on_gpu(index)):
        return "MPS on"
    return "MPS off" if (mps is not None and mps.available) or state.simulated else "MPS n/a"


def mps_fault_line(fault: MpsFault) -> Text:
    """The card's MPS line when the GPU's MPS server cannot take clients: what that means
    first (the line is cut to the card's width), then the engine's reason."""
    line = Text("MPS ", style="bold")
    line.append(f"FAULT, new jobs time-sliced: {fault.message}", style=FAULT_STYLE)
    return line


def render_gpu_card(gpu: GpuView, state: DeskState, width: int) -> Text:
    """The card's lines, each fitted to `width` columns (the card never wraps: at 80×24 four
    cards must fit)."""
    inner = max(24, width)
    title = _title_line(gpu, state)
    if gpu.lost:
        return title
    lines = [_with_sensors(title, gpu, inner)]
    fault = state.station.mps.fault_of(gpu.index) if state.station else None
    if fault is not None:
        lines.append(mps_fault_line(fault))
    lines += _activity_lines(gpu, state, inner)
    lines += _memory_lines(gpu, inner)
    lines += _power_lines(gpu, state, inner)
    lines += _placement_lines(gpu, state, inner)
    pending = mig_pending(gpu.index, gpu.mig_enabled, gpu.mig_pending, advice=False)
    if pending is not None:  # `gpudesk top` and `gpudesk mig list` say what applies it
        lines.append(Text(pending, style=FAULT_STYLE))
    out = Text()
    for number, line in enumerate(lines):
        line.truncate(inner, overflow="ellipsis")
        out.append_text(line)
        if number < len(lines) - 1:
            out.append("\n")
    return out


def _title_line(gpu: GpuView, state: DeskState) -> Text:
    """The model, SIMULATED where it is, LOST, or the MPS state."""
    title = Text()
    title.append((gpu.name or "?").removeprefix("NVIDIA "), style="bold")
    if state.simulated:
        title.append(" SIMULATED", style="bold yellow")
    if gpu.lost:
        title.append(" LOST: no job is placed on it", style="bold red")
        return title
    label = mps_label(state, gpu.index)
    title.append(f" {label}", style=FAULT_STYLE if "FAULT" in label else "dim")
    return title


def _with_sensors(title: Text, gpu: GpuView, inner: int) -> Text:
    """Temperature and SM clock at the title's end where the card has room for them (a
    wide terminal); left out rather than cut."""
    parts = [f"{gpu.temperature_c:.0f}°C" if gpu.temperature_c is not None else ""]
    parts.append(f"{gpu.sm_clock_mhz:.0f} MHz" if gpu.sm_clock_mhz is not None else "")
    sensors = "  ".join(p for p in parts if p)
    if sensors and title.cell_len + 2 + len(sensors) <= inner:
        title.append("  " + sensors, style="dim")
    return title


def _activity_lines(gpu: GpuView, state: DeskState, inner: int) -> list[Text]:
    """SM activity as a sparkline (kernel-active time, labelled so, where the GPU cannot tell
    SM activity), then kernel-active time on its own line."""
    series = state.gpu_series.get(gpu.index)
    sm_now = gpu.sm_activity_pct
    kernel = gpu.kernel_active_pct
    values = list(series.sm) if series else []
    name = "SM  "
    if sm_now is None:  # no GPM/DCGM: draw kernel-active time, and say so
        values = list(series.kernel) if series else []
        name = "KA  "
    spark = Text(name, style="bold")
    spark.append(sparkline(values, max(4, inner - LABEL - 5)), style="green")
    spark.append(f" {pct(sm_now if sm_now is not None else kernel):>4}")
    note = (
        "    SM activity n/a (no GPM); kernel-active"
        if sm_now is None
        else f"    kernel-active {pct(kernel)}"
    )
    return [spark, Text(note, style="dim")]


def _memory_lines(gpu: GpuView, inner: int) -> list[Text]:
    """The memory bar split by job, and (on a whole GPU) its legend."""
    total, used = gpu.memory_total_mib or 0.0, gpu.memory_used_mib
    shares = job_shares(gpu_processes(gpu))
    figure = f" {gib(used)}/{gib(total)}G"
    memory = Text("MEM ", style="bold")
    memory.append_text(share_bar(shares, total, used, max(4, inner - LABEL - len(figure))))
    memory.append(figure)
    if not shares or gpu.mig_devices:  # on a MIG GPU the slices below name their jobs
        return [memory]
    legend = "  ".join(
        f"{SHARE_FILLS[i % len(SHARE_FILLS)]}{name} {gib(mib)}G"
        for i, (name, mib) in enumerate(shares)
    )
    return [memory, Text("    " + legend, style="dim")]


def _power_lines(gpu: GpuView, state: DeskState, inner: int) -> list[Text]:
    """Power now and its limit, and energy since the desk opened and today (one line where
    both fit; "since the desk opened" in words where the card is wide enough)."""
    power = Text("PWR ", style="bold")
    limit = gpu.power_limit_w
    power.append(watts(gpu.power_w) + (f" of {limit:.0f}" if limit else ""))
    opened = watt_hours(state.energy_since_open_j(gpu))
    today = state.energy_today_j(gpu)
    spent = f"{watt_hours(today)} today" if today is not None else ""
    # Each counter says since when, in words where the card is wide enough, and is never cut
    # off: on a narrow card today's energy goes beside the power and the rest below.
    since_open = (f"{opened} since the desk opened", f"{opened} since open")
    both = [f"E {o}, {spent}" if spent else f"E {o}" for o in since_open]
    for energy in both:
        if power.cell_len + 2 + len(energy) <= inner:
            power.append("  " + energy)
            return [power]
    for energy in both:
        if LABEL + len(energy) <= inner:
            return [power, Text("    " + energy)]
    below = [Text(f"    E {since_open[1]}")]
    if spent and power.cell_len + 2 + len(spent) <= inner:
        power.append(f"  {spent}")
    elif spent:
        below.append(Text(f"    E {spent}"))
    return [power, *below]


def _placement_lines(gpu: GpuView, state: DeskState, inner: int) -> list[Text]:
    """A MIG GPU's slices with the job on each, else the jobs placed on the GPU."""
    if not gpu.mig_devices:
        jobs = state.jobs_on_gpu(gpu.index)
        if not jobs:
            return []
        row = Text("JOBS ", style="bold")
        row.append(", ".join(f"j{j.id} {j.name}" for j in jobs))
        return [row]
    lines = []
    row = Text("MIG ", style="bold")
    for mig in gpu.mig_devices:
        owners = sorted({f"j{p.job_id}" for p in mig.processes if p.job_id is not None})
        piece = f"[{mig_profile(mig)} {','.join(owners) or '-'}]"
        if row.cell_len + len(piece) > inner:
            lines.append(row)
            row = Text("    ")
        row.append(piece, style="cyan" if owners else "dim")
    lines.append(row)
    return lines


class GpuCard(Static):
    """A bordered card; `show` redraws it from the desk state."""

    DEFAULT_CSS = """
    GpuCard {
        height: auto; border: round $primary-darken-1; padding: 0 1;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    GpuCard.-simulated { border: round $warning-darken-1; }
    GpuCard.-lost { border: round $error; }
    """

    def __init__(self, index: int, **kwargs: Any) -> None:
        super().__init__(id=f"gpu-{index}", **kwargs)
        self.index = index
        self._shown: tuple[GpuView, DeskState] | None = None

    def show(self, gpu: GpuView, state: DeskState) -> None:
        self._shown = (gpu, state)
        self.set_class(state.simulated, "-simulated")
        self.set_class(gpu.lost, "-lost")
        fault = state.station.mps.fault_of(gpu.index) if state.station else None
        self.tooltip = f"MPS FAULT: {fault.message}" if fault else None  # the whole reason
        self.border_title = f"GPU {self.index}"
        self.border_subtitle = "SIMULATED" if state.simulated else ""
        width = self.content_size.width or 36
        self.update(render_gpu_card(gpu, state, width))

    def on_resize(self) -> None:
        if self._shown is not None:  # the lines are fitted to the width: fit them again
            self.show(*self._shown)
