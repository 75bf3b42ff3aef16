"""Queue & jobs: every job in one table, updated in place (the cursor and the scroll position
survive updates), sortable and filterable, with the job actions on keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Input
from textual.widgets.data_table import ColumnKey

from gpudesk import render
from gpudesk.api import JobView
from gpudesk.screens.base import JobActions
from gpudesk.screens.state import DeskState, job_runtime, sharing_mode
from gpudesk.screens.widgets.footer import DeskFooter
from gpudesk.screens.widgets.strips import DeskHeader
from gpudesk.units import watt_hours

STATE_STYLES = {
    "queued": "yellow",
    "held": "magenta",
    "running": "green",
    "succeeded": "dim green",
    "failed": "bold red",
    "cancelled": "dim",
}


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None


COLUMNS = (
    Column("id", "ID", 3),
    Column("user", "USER", None),
    Column("name", "NAME", None),
    Column("state", "STATE", 9),
    Column("where", "WHERE", 13),
    Column("progress", "PROG", 5),
    Column("runtime", "TIME", 6),
    Column("energy", "ENERGY", 9),  # "~<0.01 Wh", an estimate's smallest figure, whole
    Column("priority", "PRI", 3),
)
NAME_WIDTH = (10, 40)  # the name column takes what the others leave, within these bounds
USER_WIDTH = (4, 8)  # as wide as the longest user shown (its header's 4 at least), at most 8
# Left out, in this order, while the name column would be narrower than NAME_ROOMY (80 columns
# over SSH): a sweep's names (heavy-lr0.001-h1024-3) need about that much to be told apart even
# cut in the middle; progress and priority show in the job screen too.
NAME_ROOMY = 20
DROPPED_WHEN_NARROW = ("progress", "priority")
CELL_PADDING = 1  # DataTable's default: a cell each side of every column
SCROLLBAR = 2
# "live" (the default): running jobs first, then the waiting ones in queue order, then the
# finished ones newest first, as squeue and nvitop put what is happening now on top.
SORTS = ("live", "id", "state", "user", "name", "runtime", "energy", "priority")
SORT_NAMES = {"live": "running first, then waiting, then finished newest first"}
LIVE_ORDER = {"running": 0, "queued": 1}  # the finished states follow, newest first


def job_state(job: JobView) -> str:
    return "held" if job.state == "queued" and job.held else job.state


def job_cells(
    job: JobView, state: DeskState, name_width: int = NAME_WIDTH[1]
) -> dict[str, Text | str]:
    """The table cells of one job, as displayed, by column key (the name fitted to
    `name_width`, cut in the middle)."""
    shown = job_state(job)
    where = job.slot or ""
    if job.state == "queued":
        gpus = job.spec.gpus
        where = f"wants {gpus} GPU" + ("s" if gpus != 1 else "") if gpus else "wants cpu"
    progress = state.frame.progress.get(job.id) if state.frame else None
    energy = job.usage.total_j if job.usage else None
    estimate = job.usage is not None and job.usage.estimate
    return {
        "id": Text(str(job.id), justify="right"),
        "user": Text(job.user, no_wrap=True, overflow="ellipsis"),
        "name": Text(render.clip_middle(job.name, name_width), no_wrap=True),
        "state": Text(shown, style=STATE_STYLES.get(shown, "")),
        "where": where,
        "progress": f"{progress[0]}/{progress[1]}" if progress else "",
        "runtime": Text(
            render.duration(job_runtime(job, state.now)) if job.started_at else "-",
            justify="right",
        ),
        "energy": Text(
            ("~" if estimate else "") + watt_hours(energy) if energy is not None else "-",
            justify="right",
        ),
        "priority": Text(str(job.spec.priority), justify="right"),
    }


SortValue = tuple[object, ...] | float | int


def sort_value(job: JobView, key: str, now: float | None = None) -> SortValue:
    if key == "live":
        rank = LIVE_ORDER.get(job.state, 2)
        if rank == 1:  # waiting: the queue's order (held ones with the rest, by priority)
            return (rank, *job.queue_order)
        return (rank, 0, job.id if rank == 0 else -(job.ended_at or 0.0), -job.id)
    if key == "state":
        return (job_state(job), job.id)
    if key == "name":
        return (job.name, job.id)
    if key == "user":
        return (job.user, job.id)
    if key == "runtime":
        return job_runtime(job, now) or 0.0
    if key == "energy":
        return (job.usage.total_j if job.usage else None) or 0.0
    if key == "priority":
        return job.queue_order
    return job.id


def matches(job: JobView, text: str, state: DeskState) -> bool:
    """A filter matches on id, name, state, placement, group and dataset; `state:running` (or
    `=`) matches one state exactly; several words must all match."""
    fields = " ".join(
        str(v)
        for v in (
            job.id,
            job.user,
            job.name,
            job_state(job),
            job.slot or "",
            job.group or "",
            job.spec.dataset or "",
            sharing_mode(job, state),
        )
    ).lower()
    for word in text.lower().split():
        key, sep, value = word.replace("=", ":").partition(":")
        if sep and key == "state":
            if job_state(job) != value:
                return False
        elif word not in fields:
            return False
    return True


class QueueScreen(JobActions):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_job", "Detail"),
        Binding("c", "cancel_job", "Cancel"),
        Binding("h", "hold_job", "Hold/release"),
        Binding("plus,equals_sign", "priority(1)", "Pri +", key_display="+"),
        Binding("minus", "priority(-1)", "Pri -", key_display="-"),
        Binding("r", "requeue_job", "Requeue"),
        Binding("l", "log_job", "Log"),
        Binding("p", "pager_job", "Pager", show=False),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("o", "sort", "Sort"),
        Binding("b", "older_finished", "Older jobs", show=False),
        Binding("O", "sort_reverse", "Reverse", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_key = SORTS[0]
        self.sort_reverse = False
        self.filter_text = ""
        self._drawn: tuple[object, ...] | None = None  # what show_state last drew from
        # Each job's cells as last drawn, with the view and name width they came from: a
        # job that is not running shows the same cells while the feed hands the same view
        # (it re-reads the table every few refreshes), so a frame goes over the running
        # rows only (300 rows took ~0.2 s of a screen switch on a 2-core machine).
        self._cells: dict[int, tuple[JobView, int, dict[str, Text | str]]] = {}
        # The job under the cursor and the scroll position when the columns were laid out
        # again (which empties the table), for the next drawing to put back.
        self._kept: tuple[int | None, float] | None = None

    def compose(self) -> ComposeResult:
        yield DeskHeader()
        yield DataTable(id="jobs", cursor_type="row", zebra_stripes=True)
        yield Input(
            placeholder="filter: words, or state:running — Enter keeps, Esc clears", id="filter"
        )
        yield DeskFooter()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.name_width = 0
        self.user_width = USER_WIDTH[0]
        self.columns: list[Column] = list(COLUMNS)
        self._fit_columns(force=True)

    def on_resize(self) -> None:
        if self._fit_columns():
            self.show_state(self.desk.state)

    def _width(self, column: Column) -> int:
        if column.key == "user":
            return self.user_width
        return column.width or self.name_width

    def _fit_columns(self, force: bool = False) -> bool:
        """Give the name column what the others leave (USER only as wide as the users shown
        need), so the table never needs a horizontal scroll bar (80 columns over SSH), leaving
        out DROPPED_WHEN_NARROW's columns where it would still be too narrow. True when the
        columns changed."""
        columns = list(COLUMNS)
        for dropped in ("", *DROPPED_WHEN_NARROW):
            columns = [c for c in columns if c.key != dropped]
            fixed = sum(self._width(c) for c in columns if c.key != "name")
            fixed += 2 * CELL_PADDING * len(columns)
            if self.size.width - fixed - SCROLLBAR >= NAME_ROOMY:
                break
        width = max(NAME_WIDTH[0], min(NAME_WIDTH[1], self.size.width - fixed - SCROLLBAR))
        if not force and width == self.name_width and columns == self.columns:
            return False
        self.name_width = width
        self.columns = columns
        table = self.query_one("#jobs", DataTable)
        if self._kept is None and table.row_count:
            self._kept = (self.selected_id(), table.scroll_y)
        table.clear(columns=True)
        self._drawn = None
        for column in columns:
            width_here = self._width(column)
            table.add_column(self._label(column, width_here), key=column.key, width=width_here)
        return True

    def _fit_users(self, jobs: list[JobView]) -> None:
        """USER as wide as the longest user among `jobs` (within USER_WIDTH): on a station of
        short login names the name column gets the rest."""
        longest = max((len(j.user) for j in jobs), default=0)
        width = max(USER_WIDTH[0], min(USER_WIDTH[1], longest))
        if width != self.user_width:
            self.user_width = width
            self._fit_columns(force=True)

    def _label(self, column: Column, width: int) -> str:
        """A column's header, with ▲ (ascending) or ▼ on the one the queue is sorted by,
        clipped so the arrow always shows (PRI, 3 wide: PR▼)."""
        if column.key != self.sort_key:
            return column.label
        return column.label[: max(0, width - 1)] + ("▼" if self.sort_reverse else "▲")

    def _relabel(self) -> None:
        """Move the sort arrow to the column sorted by now."""
        table = self.query_one("#jobs", DataTable)
        for column in self.columns:
            key = ColumnKey(column.key)
            if key in table.columns:
                table.columns[key].label = Text(self._label(column, self._width(column)))
        table.refresh()

    # ------------------------------------------------------------------ drawing
    def show_state(self, state: DeskState) -> None:
        # What the table shows follows from these alone: a screen coming back (or resized to
        # the same columns) with nothing new skips going over every row again (500 of them
        # on a busy station: ~0.1 s of the desk's first paint).
        self._fit_users(state.jobs)
        drawn = (state.frame, self.filter_text, self.sort_key, self.sort_reverse, self.columns)
        last = self._drawn
        if last is not None and last[0] is state.frame and last[1:] == drawn[1:]:
            return
        self._drawn = drawn
        table = self.query_one("#jobs", DataTable)
        jobs = list(state.jobs)
        if self.filter_text.strip():
            jobs = [j for j in jobs if matches(j, self.filter_text, state)]
        jobs.sort(key=lambda j: sort_value(j, self.sort_key, state.now), reverse=self.sort_reverse)
        selected, scroll_y = self._kept or (self.selected_id(), table.scroll_y)
        self._kept = None
        wanted = [str(j.id) for j in jobs]
        existing = [str(row.value) for row in table.rows]
        if existing != wanted:
            # Rebuild the order (rare: a job came, went, the sort or the columns changed) ...
            table.clear()
            for job in jobs:
                cells, _ = self._cells_of(job, state)
                table.add_row(*(cells[c.key] for c in self.columns), key=str(job.id))
            listed = {job.id for job in jobs}  # the cells of jobs no longer listed go
            self._cells = {i: cached for i, cached in self._cells.items() if i in listed}
            if selected is not None and str(selected) in wanted:
                table.move_cursor(row=wanted.index(str(selected)), animate=False)
            table.scroll_to(y=scroll_y, animate=False)
            return
        # ... else update the cells that changed, in place.
        for job in jobs:
            cells, fresh = self._cells_of(job, state)
            if not fresh:
                continue  # drawn already as they are
            row = table.get_row(str(job.id))
            for position, column in enumerate(self.columns):
                if str(row[position]) != str(cells[column.key]):
                    table.update_cell(str(job.id), column.key, cells[column.key])

    def _cells_of(self, job: JobView, state: DeskState) -> tuple[dict[str, Text | str], bool]:
        """The job's cells, and whether they were made anew (else as last drawn)."""
        cached = self._cells.get(job.id)
        if (
            cached is not None
            and cached[0] is job
            and cached[1] == self.name_width
            and job.state != "running"  # its time and progress move with every frame
        ):
            return cached[2], False
        cells = job_cells(job, state, self.name_width)
        self._cells[job.id] = (job, self.name_width, cells)
        return cells, True

    def selected_id(self) -> int | None:
        table = self.query_one("#jobs", DataTable)
        if not table.row_count:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except Exception:
            return None
        return int(key.value) if key.value is not None else None

    def selected_job(self) -> JobView | None:
        job_id = self.selected_id()
        return None if job_id is None else self.desk.state.job(job_id)

    def current_job(self) -> JobView | None:
        job = self.selected_job()
        if job is None:
            self.notify("no job selected", severity="warning")
        return job

    # ------------------------------------------------------------------ actions
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_job()

    def action_open_job(self) -> None:
        self._run("open_job")

    def action_priority(self, delta: int) -> None:
        self._run("priority_up" if delta > 0 else "priority_down")

    def action_older_finished(self) -> None:
        self.desk.load_older_finished()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.show_state(self.desk.state)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#jobs", DataTable).focus()
        event.input.display = bool(event.value)

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self.filter_text = ""
        self.query_one("#jobs", DataTable).focus()
        self.show_state(self.desk.state)

    def action_sort(self) -> None:
        self.sort_key = SORTS[(SORTS.index(self.sort_key) + 1) % len(SORTS)]
        named = SORT_NAMES.get(self.sort_key, self.sort_key)
        self.notify(f"sorted by {named}" + (" (reversed)" if self.sort_reverse else ""), timeout=2)
        self._relabel()
        self.show_state(self.desk.state)

    def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._relabel()
        self.show_state(self.desk.state)
