"""Queue & jobs: every job in one table, updated in place (the cursor and the scroll position
survive updates), sortable and filterable, with the job actions on keys. The table is drawn as
lines (`LineTable`): a row is rendered once when its job's cells change, so coming back to the
queue draws what is on screen from rows already rendered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Input

from gpudesk import render
from gpudesk.api import JobView
from gpudesk.screens.base import JobActions
from gpudesk.screens.state import STATE_STYLES, DeskState, job_runtime, sharing_mode
from gpudesk.screens.widgets.footer import DeskFooter
from gpudesk.screens.widgets.line_table import CELL_PADDING, LineTable, TableColumn
from gpudesk.screens.widgets.strips import DeskHeader
from gpudesk.units import watt_hours


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None


COLUMNS = (
    Column("id", "ID", None),
    Column("user", "USER", None),
    Column("name", "NAME", None),
    Column("state", "STATE", 9),
    Column("where", "WHERE", 13),
    Column("progress", "PROG", 5),
    Column("left", "LEFT", 7),  # "~59m59s"; an hour or more "~1h05m"
    Column("runtime", "TIME", 6),
    Column("energy", "ENERGY", 9),  # "~<0.01 Wh", an estimate's smallest figure, whole
    Column("priority", "PRI", 3),
)
NAME_WIDTH = (10, 40)  # the name column takes what the others leave, within these bounds
USER_WIDTH = (4, 8)  # as wide as the longest user shown (its header's 4 at least), at most 8
ID_WIDTH = 3  # at least: as wide as the largest id shown (a store of 100,000 jobs: 6), never cut
# Left out, in this order, while the name column would be narrower than NAME_ROOMY (80 columns
# over SSH): a sweep's names (heavy-lr0.001-h1024-3) need about that much to be told apart even
# cut in the middle; the time left, progress and priority show in the job screen too.
NAME_ROOMY = 20
DROPPED_WHEN_NARROW = ("left", "progress", "priority")
SCROLLBAR = 2
# "live" (the default): running jobs first, then the waiting ones in queue order, then the
# finished ones newest first, as squeue and nvitop put what is happening now on top.
SORTS = ("live", "id", "state", "user", "name", "runtime", "left", "energy", "priority")
SORT_NAMES = {
    "live": "running first, then waiting, then finished newest first",
    "left": "time left, the soonest done first (unknown and not running after)",
}
# In WHERE (an ended job has no placement to show): a job whose end is not saved yet; its
# detail says why, and the header that the store cannot be written (`queue`'s `*`).
UNSAVED_MARK = "not saved*"
LIVE_ORDER = {"running": 0, "suspended": 0, "queued": 1}  # the finished states follow, newest first


def job_state(job: JobView) -> str:
    return "held" if job.state == "queued" and job.held else job.state


def job_cells(
    job: JobView, state: DeskState, name_width: int = NAME_WIDTH[1]
) -> dict[str, Text | str]:
    """The table cells of one job, as displayed, by column key (the name fitted to
    `name_width`, cut in the middle)."""
    shown = job_state(job)
    where: Text | str = job.slot or ""
    if job.state == "queued":
        gpus = job.spec.gpus
        where = f"wants {gpus} GPU" + ("s" if gpus != 1 else "") if gpus else "wants cpu"
    if job.unsaved:  # its end as the engine worked it out, not yet in its store (a full disk)
        where = Text(UNSAVED_MARK, style="bold red")
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
        "left": Text(render.time_left(job.remaining) if job.remaining else "", justify="right"),
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
    if key == "left":
        seconds = job.remaining.seconds if job.remaining else None
        return (seconds is None, seconds or 0.0, job.id)
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
        Binding("z", "suspend_job", "Suspend/resume"),
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
        # The job under the cursor when the filter was opened: while it is typed, the cursor
        # goes back to it whenever the filter matches it again (`s`, `st`, ... `state:queued`).
        self._filter_from: int | None = None

    def compose(self) -> ComposeResult:
        yield DeskHeader()
        yield LineTable(id="jobs", zebra_stripes=True)
        yield Input(
            placeholder="filter: words, or state:running — Enter keeps, Esc clears", id="filter"
        )
        yield DeskFooter()

    @property
    def table(self) -> LineTable:
        return self.query_one("#jobs", LineTable)

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.name_width = 0
        self.user_width = USER_WIDTH[0]
        self.id_width = ID_WIDTH
        self.columns: list[Column] = list(COLUMNS)
        self._fit_columns(force=True)

    def on_resize(self) -> None:
        if self._fit_columns():
            self.show_state(self.desk.state)

    def _width(self, column: Column) -> int:
        if column.key == "user":
            return self.user_width
        if column.key == "id":
            return self.id_width
        return column.width or self.name_width

    def _fit_columns(self, force: bool = False) -> bool:
        """Give the name column what the others leave (USER only as wide as the users shown
        need), so the table never needs a horizontal scroll bar (80 columns over SSH), leaving
        out DROPPED_WHEN_NARROW's columns where it would still be too narrow. True when the
        columns changed (the table keeps its rows, cursor and scroll position; show_state
        then hands it every row's cells in the new columns)."""
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
        self._drawn = None
        self._lay_out_columns()
        return True

    def _lay_out_columns(self) -> None:
        self.table.set_columns(
            [
                TableColumn(c.key, self._label(c, self._width(c)), self._width(c))
                for c in self.columns
            ]
        )

    def _fit_jobs(self, jobs: list[JobView]) -> None:
        """USER as wide as the longest user among `jobs` (within USER_WIDTH): on a station of
        short login names the name column gets the rest; ID as wide as the largest id."""
        longest = max((len(j.user) for j in jobs), default=0)
        user_width = max(USER_WIDTH[0], min(USER_WIDTH[1], longest))
        id_width = max(ID_WIDTH, len(str(max((j.id for j in jobs), default=0))))
        if (user_width, id_width) != (self.user_width, self.id_width):
            self.user_width, self.id_width = user_width, id_width
            self._fit_columns(force=True)

    def _label(self, column: Column, width: int) -> str:
        """A column's header, with ▲ (ascending) or ▼ on the one the queue is sorted by,
        clipped so the arrow always shows (PRI, 3 wide: PR▼)."""
        if column.key != self.sort_key:
            return column.label
        return column.label[: max(0, width - 1)] + ("▼" if self.sort_reverse else "▲")

    # ------------------------------------------------------------------ drawing
    def show_state(self, state: DeskState) -> None:
        # What the table shows follows from these alone: a screen coming back (or resized to
        # the same columns) with nothing new skips going over every row again (500 of them
        # on a busy station: ~0.1 s of the desk's first paint).
        self._fit_jobs(state.jobs)
        drawn = (state.frame, self.filter_text, self.sort_key, self.sort_reverse, self.columns)
        last = self._drawn
        if last is not None and last[0] is state.frame and last[1:] == drawn[1:]:
            return
        self._drawn = drawn
        jobs = list(state.jobs)
        if self.filter_text.strip():
            jobs = [j for j in jobs if matches(j, self.filter_text, state)]
        jobs.sort(key=lambda j: sort_value(j, self.sort_key, state.now), reverse=self.sort_reverse)
        rows = []
        for job in jobs:
            cells = self._cells_of(job, state)
            rows.append((str(job.id), [cells[c.key] for c in self.columns]))
        # The table renders again only the rows handed new cells (the running ones, mostly).
        self.table.set_rows(rows)
        if self._filter_from is not None:
            back = self.table.index_of(str(self._filter_from))
            if back is not None:
                self.table.move_cursor(back)
        listed = {job.id for job in jobs}  # the cells of jobs no longer listed go
        if len(self._cells) != len(listed):
            self._cells = {i: cached for i, cached in self._cells.items() if i in listed}

    def _cells_of(self, job: JobView, state: DeskState) -> dict[str, Text | str]:
        """The job's cells: as last drawn (the very objects, which the table takes for a row
        it need not render again) while its view and the name's width are the same."""
        cached = self._cells.get(job.id)
        if (
            cached is not None
            and cached[0] is job
            and cached[1] == self.name_width
            and job.state != "running"  # its time and progress move with every frame
        ):
            return cached[2]
        cells = job_cells(job, state, self.name_width)
        self._cells[job.id] = (job, self.name_width, cells)
        return cells

    def selected_id(self) -> int | None:
        key = self.table.cursor_key
        return None if key is None else int(key)

    def selected_job(self) -> JobView | None:
        job_id = self.selected_id()
        return None if job_id is None else self.desk.state.job(job_id)

    def current_job(self) -> JobView | None:
        job = self.selected_job()
        if job is None:
            self.notify("no job selected", severity="warning")
        return job

    # ------------------------------------------------------------------ actions
    def on_line_table_row_selected(self, event: LineTable.RowSelected) -> None:
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
        self._filter_from = self.selected_id()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.show_state(self.desk.state)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.table.focus()
        event.input.display = bool(event.value)
        self._filter_from = None

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self.filter_text = ""
        self.table.focus()
        self.show_state(self.desk.state)
        self._filter_from = None

    def action_sort(self) -> None:
        self.sort_key = SORTS[(SORTS.index(self.sort_key) + 1) % len(SORTS)]
        named = SORT_NAMES.get(self.sort_key, self.sort_key)
        self.notify(f"sorted by {named}" + (" (reversed)" if self.sort_reverse else ""), timeout=2)
        self._lay_out_columns()
        self.show_state(self.desk.state)

    def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._lay_out_columns()
        self.show_state(self.desk.state)
