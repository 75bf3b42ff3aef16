"""One-line strips: the desk's header (station and totals) and the host (CPU, memory, load)."""

from __future__ import annotations

import inspect

from rich.text import Text
from textual.widgets import Static

from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.glyphs import bar
from gpudesk.units import watt_hours

# Static.update(layout=...) is newer than the textual floor (pyproject): where it is missing,
# update() lays the screen out as it always did.
_UPDATE_CAN_SKIP_LAYOUT = "layout" in inspect.signature(Static.update).parameters
STORE_MARK = "STORE NOT WRITABLE"  # the header's mark of StationStatus.store_problem


def render_header(
    state: DeskState, readonly: bool = False, note: str | None = None, width: int | None = None
) -> Text:
    """The station and its totals. The energy total always says since when it counts; where
    it does not fit whole in `width`, the carbon goes first, then the total (each card
    still shows its GPU's energy today)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    station = state.station
    if station is None:
        text.append("gpudesk", style="bold")
        text.append("  connecting to the engine…", style="dim")
        return text
    # A simulated station is labelled SIMULATED on every screen at every size: where the
    # header is short of room the backend's name goes first, then `gpudesk` comes after it.
    backend = f"  {station.effective_backend}"
    fits = width is None or len(f"gpudesk{backend} SIMULATED") <= width
    if state.simulated and width is not None and len("gpudesk SIMULATED") > width:
        text.append("SIMULATED", style="bold yellow")
        text.append(" gpudesk", style="bold")
    else:
        text.append("gpudesk", style="bold")
        if fits or not state.simulated:
            text.append(backend)
        if state.simulated:
            text.append(" SIMULATED", style="bold yellow")
    counts = state.counts()
    text.append(f"  run {counts.get('running', 0)} · queued {counts.get('queued', 0)}")
    failed = counts.get("failed", 0)
    if failed:
        text.append(f" · failed {failed}", style="red")
    suspended = sum(1 for job in state.jobs if job.state == "suspended")
    if suspended:  # counted in `run` too: they hold their GPUs
        text.append(f" · suspended {suspended}", style="magenta")
    tail = Text()
    drain = state.status.drain if state.status else None
    if drain is not None:
        why = f": {drain.reason}" if drain.reason else ""
        tail.append(f"  DRAINED by {drain.by}{why}", style="bold reverse yellow")
    if state.status is not None and state.status.store_problem:
        # what it is, in full, under the station's cards (`engine status`'s `store:`)
        tail.append(f"  {STORE_MARK}", style="bold reverse red")
    if readonly:
        tail.append("  READ-ONLY", style="bold reverse")
    if note:
        tail.append(f"  {note}", style="bold red")
    energy = state.total_energy_j()
    if energy is not None:
        total = f"  {watt_hours(energy[0])} {energy[1]}"
        carbon = state.carbon_g()
        with_carbon = total + (f" ≈{carbon:.1f} g CO2e" if carbon is not None else "")
        # Where the grid figure names a code, the code and its source when they fit, else
        # the code alone ("≈1.2 g CO2e FR").
        region, source = station.grid_region, station.grid_source
        with_grid = [
            f"{with_carbon} ({region}, {source})",
            f"{with_carbon} {region}",
        ]
        room = None if width is None else width - text.cell_len - tail.cell_len
        for shown in (*(with_grid if carbon is not None and region else ()), with_carbon, total):
            if room is None or len(shown) <= room:
                text.append(shown)
                break
    text.append_text(tail)
    return text


def render_host(state: DeskState, width: int) -> Text:
    host = state.host
    text = Text(no_wrap=True, overflow="ellipsis")
    if host is None:
        text.append("host: waiting for the first sample", style="dim")
        return text
    cpu = host.cpu_pct
    used, total = host.memory_used_mib, host.memory_total_mib
    span = max(4, min(12, (width - 50) // 2))
    text.append("CPU ", style="bold")
    text.append(bar(None if cpu is None else cpu / 100.0, span), style="green")
    text.append(f" {cpu:.0f}%" if cpu is not None else " n/a")
    text.append(f" of {host.cores}  ")
    text.append("MEM ", style="bold")
    text.append(bar(used / total if total else None, span), style="green")
    text.append(f" {used / 1024:.1f}/{total / 1024:.0f}G  ")
    load = host.load_avg
    if load:
        text.append("load " + " ".join(f"{v:.2f}" for v in load[:3]))
    return text


class DeskHeader(Static):
    DEFAULT_CSS = """
    DeskHeader { height: 1; background: $panel; padding: 0 1; text-wrap: nowrap;
                 text-overflow: ellipsis; }
    """

    def show(self, state: DeskState, readonly: bool = False, note: str | None = None) -> None:
        self._shown = (state, readonly, note)
        # One line whatever it says (its CSS): no layout of the screen for it. A layout on a
        # screen coming back redraws the queue's scroll bar in a paint of its own, ~30 ms
        # after the screen's (Textual refreshes a ScrollView's scroll bars at every layout).
        header = render_header(state, readonly, note, self.content_size.width or None)
        if _UPDATE_CAN_SKIP_LAYOUT:
            self.update(header, layout=False)
        else:
            self.update(header)

    def on_resize(self) -> None:
        if getattr(self, "_shown", None) is not None:  # what fits depends on the width
            self.show(*self._shown)


class HostStrip(Static):
    DEFAULT_CSS = """
    HostStrip { height: 1; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, state: DeskState) -> None:
        self._state = state
        self.update(render_host(state, self.content_size.width or 78))

    def on_resize(self) -> None:
        if getattr(self, "_state", None) is not None:
            self.show(self._state)
