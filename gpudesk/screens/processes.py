"""Running jobs (nvitop's process table): every running job with its placement, sharing mode,
SM, GPU memory, CPU, energy and runtime, on a screen of its own, so it is there at 80×24 too
(the station lists them under the cards only where a big terminal leaves room)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from gpudesk.screens.base import DeskScreen
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.footer import DeskFooter
from gpudesk.screens.widgets.job_list import render_job_list
from gpudesk.screens.widgets.strips import DeskHeader, HostStrip

PADDING = 2  # #processes's, a column each side (desk.tcss)


class ProcessesScreen(DeskScreen):
    def compose(self) -> ComposeResult:
        yield DeskHeader()
        yield HostStrip()
        with VerticalScroll(id="processes-body"):
            yield Static("", id="processes")
        yield DeskFooter()

    def show_state(self, state: DeskState) -> None:
        self.query_one(HostStrip).show(state)
        self._state = state
        self._show()

    def _show(self) -> None:
        state = getattr(self, "_state", None)
        if state is None:
            return
        body = self.query_one("#processes-body", VerticalScroll)
        width = max(20, (body.size.width or self.size.width) - PADDING)
        listing = render_job_list(state, width)
        if body.size.height and len(listing.plain.splitlines()) > body.size.height:
            # Taller than the body: it scrolls, and the scroll bar takes columns of its own
            # (drawn for the width without it, every full line would wrap).
            width = max(20, width - body.styles.scrollbar_size_vertical)
            listing = render_job_list(state, width)
        self.query_one("#processes", Static).update(listing)

    def on_resize(self) -> None:
        self._show()
