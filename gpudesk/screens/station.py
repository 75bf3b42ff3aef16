"""The station: one card per GPU, the host strip, and the totals in the header."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.widgets import Footer, Static

from gpudesk.screens.base import DeskScreen
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.gpu_card import GpuCard
from gpudesk.screens.widgets.strips import DeskHeader, HostStrip


class StationScreen(DeskScreen):
    def compose(self) -> ComposeResult:
        yield DeskHeader()
        yield HostStrip()
        with VerticalScroll(id="station-body"):
            yield Static("", id="station-note")
            yield Grid(id="gpu-grid")
        yield Footer()

    def show_state(self, state: DeskState) -> None:
        self.query_one(HostStrip).show(state)
        grid = self.query_one("#gpu-grid", Grid)
        note = self.query_one("#station-note", Static)
        gpus = state.gpus
        problem = state.station.gpu_problem if state.station else None
        if not gpus:
            note.update(
                problem
                or (
                    "no GPUs on this station: jobs run on the CPU slots"
                    if state.frame
                    else "waiting for the engine…"
                )
            )
        else:
            note.update(problem or "")
        note.display = bool(problem or not gpus)
        cards = {card.index: card for card in grid.query(GpuCard)}
        wanted = [g.index for g in gpus]
        if sorted(cards) != sorted(wanted):
            grid.remove_children()
            cards = {index: GpuCard(index) for index in wanted}
            grid.mount(*cards.values())
        grid.set_class(len(wanted) == 1, "-single")
        for gpu in gpus:
            cards[gpu.index].show(gpu, state)
