"""The station: one card per GPU, the host strip, the totals in the header, and the running
jobs under the cards where the terminal has room for them (never at the cost of a card line:
at 80×24 the cards fill the screen and the list stays hidden)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.message import Message
from textual.widgets import Static

from gpudesk.screens.base import DeskScreen
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.footer import DeskFooter
from gpudesk.screens.widgets.gpu_card import GpuCard
from gpudesk.screens.widgets.job_list import render_job_list
from gpudesk.screens.widgets.strips import DeskHeader, HostStrip
from gpudesk.text import printable_message

MIN_LIST_LINES = 3  # title, header, one job
MIN_LIST_GAP = 1  # a blank line between the cards and the list


class CardGrid(Grid):
    """The GPU cards. It says when its size changes (cards mounted, a card's lines changed),
    so that the job list under it is fitted to the room really left, not to a layout the
    cards had not reached yet."""

    class Resized(Message):
        pass

    def on_resize(self) -> None:
        self.post_message(self.Resized())


class StationScreen(DeskScreen):
    def compose(self) -> ComposeResult:
        yield DeskHeader()
        yield HostStrip()
        with VerticalScroll(id="station-body"):
            yield Static("", id="station-note")
            yield CardGrid(id="gpu-grid")
            yield Static("", id="station-jobs")
        yield DeskFooter()

    def show_state(self, state: DeskState) -> None:
        self.query_one(HostStrip).show(state)
        grid = self.query_one("#gpu-grid", Grid)
        note = self.query_one("#station-note", Static)
        gpus = state.gpus
        problem = state.station.gpu_problem if state.station else None
        if not gpus:
            problem = problem or (
                "no GPUs on this station: jobs run on the CPU slots"
                if state.frame
                else "waiting for the engine…"
            )
        store = state.status.store_problem if state.status else None
        if store:  # the header marks it on every screen; here it is said in full
            problem = "\n".join(line for line in (problem, f"store: {store}") if line)
        # the engine's words quote paths a user chose (the state folder, the nvidia-smi to
        # call): shown as they are, never read as markup, their control characters spelled out
        note.update(Text(printable_message(problem or "")))
        note.display = bool(problem)
        cards = {card.index: card for card in grid.query(GpuCard)}
        wanted = [g.index for g in gpus]
        if sorted(cards) != sorted(wanted):
            grid.remove_children()
            cards = {index: GpuCard(index) for index in wanted}
            grid.mount(*cards.values())
        grid.set_class(len(wanted) == 1, "-single")
        for gpu in gpus:
            cards[gpu.index].show(gpu, state)
        self._state = state
        self.call_after_refresh(self._show_jobs)

    def _show_jobs(self) -> None:
        """The job list, where the body has room under the cards for its title, header and at
        least one row; hidden otherwise, so it never pushes a card line out of view."""
        body = self.query_one("#station-body", VerticalScroll)
        grid = self.query_one("#gpu-grid", Grid)
        jobs = self.query_one("#station-jobs", Static)
        note = self.query_one("#station-note", Static)
        used = grid.outer_size.height + (note.outer_size.height if note.display else 0)
        room = body.size.height - used - MIN_LIST_GAP
        state = getattr(self, "_state", None)
        if state is None or room < MIN_LIST_LINES:
            jobs.display = False
            return
        text = render_job_list(state, max(20, body.size.width - 2))
        lines = text.plain.split("\n")
        if len(lines) > room:  # what fits, and how many more there are
            more = len(lines) - room + 1
            joined = Text("\n").join(list(text.split("\n"))[: room - 1])
            joined.append(f"\n… {more} more (5: every running job)", style="dim")
            text = joined
        jobs.update(text)
        jobs.display = True

    def on_resize(self) -> None:
        self.call_after_refresh(self._show_jobs)

    def on_card_grid_resized(self, _: CardGrid.Resized) -> None:
        self.call_after_refresh(self._show_jobs)
