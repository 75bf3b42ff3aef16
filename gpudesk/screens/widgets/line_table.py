"""A table drawn as lines (Textual's Line API), for lists of hundreds or thousands of rows
redrawn every second: each row is rendered through Rich once, when its cells change, into
segments kept with it; drawing a line then only lays the row's stripe, cursor or hover style
over those segments. DataTable renders every visible cell again whenever any cell changed
and when its screen comes back (Textual restyles the screen), which made switching to a
queue of 300 jobs take ~150 ms; this is what the desk's queue draws with instead.

A fixed header line, a row cursor (up/down, page keys, home/end, the mouse), zebra stripes, a
hover row under the mouse, and `RowSelected` on Enter or a click on the cursor's row, as
DataTable's row cursor does, with the same look (its component classes' styles)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

Cell = Text | str

CELL_PADDING = 1  # a cell each side of every column, as DataTable's default
HEADER_HEIGHT = 1


@dataclass(frozen=True)
class TableColumn:
    key: str
    label: str
    width: int


def cell_segments(cell: Cell, width: int, console: Console) -> list[Segment]:
    """`cell` fitted to `width` columns, as DataTable lays a one-line cell out: cut (with an
    ellipsis where the cell asks for one: `overflow="ellipsis"`), then padded by its
    justification with spaces of no style of their own; the cell's own styles kept."""
    text = Text(cell) if isinstance(cell, str) else cell.copy()
    text.truncate(width, overflow="ellipsis" if text.overflow == "ellipsis" else "crop")
    segments = list(text.render(console))
    if not text.spans and text.style:  # Text.render leaves its own style to its caller then
        style = console.get_style(text.style)
        segments = [Segment(segment.text, style) for segment in segments]
    room = width - cell_len(text.plain)
    if room <= 0:
        return segments
    left = room if text.justify == "right" else room // 2 if text.justify == "center" else 0
    return [Segment(" " * left), *segments, Segment(" " * (room - left))]


class LineTable(ScrollView, can_focus=True):
    """Rows of cells by key, with a row cursor; see the module's docstring."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "cursor_top", "Top", show=False),
        Binding("end,ctrl+end", "cursor_bottom", "Bottom", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "line-table--header",
        "line-table--even-row",
        "line-table--odd-row",
        "line-table--cursor",
        "line-table--hover",
    }

    # DataTable's look, so the queue reads as it did.
    DEFAULT_CSS = """
    LineTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .line-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .line-table--header {
                background-tint: $foreground 5%;
            }
        }
        &:dark > .line-table--even-row {
            background: $surface-darken-1 40%;
        }
        & > .line-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .line-table--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .line-table--even-row {
            background: $surface-lighten-1 50%;
        }
        & > .line-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .line-table--hover {
            background: $block-hover-background;
        }
    }
    """

    class RowSelected(Message):
        """Enter on the cursor's row, or a click on it."""

        def __init__(self, table: LineTable, key: str, row: int) -> None:
            super().__init__()
            self.table = table
            self.key = key
            self.row = row

        @property
        def control(self) -> LineTable:
            return self.table

    cursor_row: reactive[int] = reactive(0, always_update=False, repaint=False)
    hover_row: reactive[int] = reactive(-1, repaint=False)

    def __init__(self, *, zebra_stripes: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.zebra_stripes = zebra_stripes
        self.columns: list[TableColumn] = []
        self.row_keys: list[str] = []
        self._index: dict[str, int] = {}
        # Each row's cells and their segments, rendered once from those cells (the same cell
        # objects handed again keep them: no Rich render for a row that did not change).
        self._cells: dict[str, tuple[Cell, ...]] = {}
        self._segments: dict[str, list[list[Segment]]] = {}  # by row key, cell by cell
        self._header: list[list[Segment]] = []
        self._show_hover = False  # off while the keyboard moves the cursor, as DataTable

    # ------------------------------------------------------------------ data
    @property
    def row_count(self) -> int:
        return len(self.row_keys)

    @property
    def cursor_key(self) -> str | None:
        if not self.row_keys:
            return None
        return self.row_keys[min(self.cursor_row, len(self.row_keys) - 1)]

    def index_of(self, key: str) -> int | None:
        return self._index.get(key)

    def get_row(self, key: str) -> tuple[Cell, ...]:
        return self._cells[key]

    def set_columns(self, columns: Sequence[TableColumn]) -> None:
        """Lay the columns out (anew): every row is rendered again at its next drawing. The
        rows, the cursor and the scroll position stay."""
        self.columns = list(columns)
        self._segments.clear()
        self._header = self._render_row(tuple(c.label for c in self.columns))
        self._size_to_rows()
        self.refresh()

    def set_rows(self, rows: Sequence[tuple[str, Sequence[Cell]]]) -> None:
        """Show `rows` (key, cells) in this order. A row handed the very cell objects it
        already has keeps its rendering; the cursor stays on its row's key where that row is
        still shown (else at its place, within the rows), and the scroll position stays unless
        the cursor's row moved out of sight (sorted otherwise: it is scrolled to)."""
        kept = self.cursor_key
        keys = [key for key, _ in rows]
        order_changed = keys != self.row_keys
        changed: list[int] = []
        cells_now: dict[str, tuple[Cell, ...]] = {}
        for index, (key, cells) in enumerate(rows):
            cells = tuple(cells)
            cells_now[key] = cells
            old = self._cells.get(key)
            if (
                old is None
                or len(old) != len(cells)
                or any(a is not b for a, b in zip(old, cells, strict=True))
            ):
                self._segments.pop(key, None)
                changed.append(index)
        if order_changed:
            self.row_keys = keys
            self._index = {key: i for i, key in enumerate(keys)}
            self._segments = {k: s for k, s in self._segments.items() if k in self._index}
        self._cells = cells_now
        if order_changed:
            self._size_to_rows()
            if kept is not None and kept in self._index:
                self._move(self._index[kept], scroll=True)
            else:
                self._move(min(self.cursor_row, max(0, len(keys) - 1)), scroll=False)
            self.refresh()
        else:
            for index in changed:
                self.refresh_line(index + HEADER_HEIGHT)

    def _size_to_rows(self) -> None:
        width = sum(c.width + 2 * CELL_PADDING for c in self.columns)
        self.virtual_size = Size(width, len(self.row_keys) + HEADER_HEIGHT)

    # ------------------------------------------------------------------ drawing
    def _render_row(self, cells: tuple[Cell, ...]) -> list[list[Segment]]:
        """One row's segments, cell by cell, each cell padded and fitted to its column, with
        the cells' own styles (the row's stripe or cursor is laid over them when a line is
        drawn)."""
        console = self.app.console
        pad = Segment(" " * CELL_PADDING)
        # strict=False: between set_columns and the rows' new cells, a row may be a cell short
        return [
            # One segment for a cell's padding and text of one style, as DataTable's rendering
            # gives (a terminal gets the same bytes; a snapshot the same runs).
            list(Segment.simplify([pad, *cell_segments(cell, column.width, console), pad]))
            for column, cell in zip(self.columns, cells, strict=False)
        ]

    def _row_segments(self, key: str) -> list[list[Segment]]:
        segments = self._segments.get(key)
        if segments is None:
            segments = self._segments[key] = self._render_row(self._cells[key])
        return segments

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        base = self.rich_style
        post: Style | None = None
        if y < HEADER_HEIGHT:
            style = base + self.get_component_rich_style("line-table--header")
            cells = self._header
        else:
            row = y - HEADER_HEIGHT + scroll_y
            if row >= len(self.row_keys):
                return Strip.blank(width, base)
            style, post = self._row_style(row, base)
            cells = self._row_segments(self.row_keys[row])
        if post is None:
            line = list(Segment.apply_style([s for cell in cells for s in cell], style))
        else:  # the cursor's colour over a cell's own makes its runs one, as in DataTable
            line = [
                s
                for cell in cells
                for s in Segment.simplify(Segment.apply_style(cell, style, post))
            ]
        # A row's style runs to the table's right edge, past its last column, as DataTable's.
        if width > self.virtual_size.width:
            line.append(Segment(" " * (width - self.virtual_size.width), style))
        strip = Strip(line)
        if scroll_x:
            strip = strip.crop(scroll_x, scroll_x + width)
        return strip.adjust_cell_length(width, base)

    def _row_style(self, row: int, base: Style) -> tuple[Style, Style | None]:
        """The style laid under a row's cells, and the one over them: the cursor's colour wins
        over a cell's own (DataTable's cursor_foreground_priority="css")."""
        style = base
        if self.zebra_stripes and not row % 2:
            style += self.get_component_rich_style("line-table--even-row")
        if self._show_hover and row == self.hover_row and row != self.cursor_row:
            style += self.get_component_rich_style("line-table--hover")
        if row == self.cursor_row:
            cursor = self.get_component_rich_style("line-table--cursor")
            return style + cursor, Style(color=cursor.color) if cursor.color else None
        return style, None

    # ------------------------------------------------------------------ cursor
    def watch_cursor_row(self, old: int, new: int) -> None:
        self.refresh_line(old + HEADER_HEIGHT)
        self.refresh_line(new + HEADER_HEIGHT)

    def watch_hover_row(self, old: int, new: int) -> None:
        self.refresh_line(old + HEADER_HEIGHT)
        self.refresh_line(new + HEADER_HEIGHT)

    def move_cursor(self, row: int) -> None:
        """The cursor to `row` (within the rows), scrolled into view."""
        self._move(row, scroll=True)

    def _move(self, row: int, scroll: bool) -> None:
        self.cursor_row = max(0, min(row, len(self.row_keys) - 1))
        if scroll:
            self._scroll_cursor_into_view()

    def _visible_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - HEADER_HEIGHT)

    def _scroll_cursor_into_view(self) -> None:
        top = int(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, force=True)
        elif self.cursor_row >= top + self._visible_rows():
            self.scroll_to(y=self.cursor_row - self._visible_rows() + 1, animate=False, force=True)

    def _hide_hover(self) -> None:
        if self._show_hover:
            self._show_hover = False
            self.refresh_line(self.hover_row + HEADER_HEIGHT)

    def action_cursor_up(self) -> None:
        self._hide_hover()
        self.move_cursor(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self._hide_hover()
        self.move_cursor(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self._hide_hover()
        page = self._visible_rows()
        self.scroll_to(y=self.scroll_y - page, animate=False, force=True)
        self._move(self.cursor_row - page, scroll=False)
        self._scroll_cursor_into_view()

    def action_page_down(self) -> None:
        self._hide_hover()
        page = self._visible_rows()
        self.scroll_to(y=self.scroll_y + page, animate=False, force=True)
        self._move(self.cursor_row + page, scroll=False)
        self._scroll_cursor_into_view()

    def action_cursor_top(self) -> None:
        self._hide_hover()
        self.move_cursor(0)

    def action_cursor_bottom(self) -> None:
        self._hide_hover()
        self.move_cursor(len(self.row_keys) - 1)

    def action_select_cursor(self) -> None:
        self._hide_hover()
        key = self.cursor_key
        if key is not None:
            self.post_message(self.RowSelected(self, key, self.cursor_row))

    # ------------------------------------------------------------------ mouse
    def _row_at(self, event: events.MouseEvent) -> int | None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < HEADER_HEIGHT:
            return None
        row = offset.y - HEADER_HEIGHT + int(self.scroll_y)
        return row if row < len(self.row_keys) else None

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._show_hover = True
        row = self._row_at(event)
        self.hover_row = -1 if row is None else row

    def on_leave(self, event: events.Leave) -> None:
        self.hover_row = -1

    def on_click(self, event: events.Click) -> None:
        row = self._row_at(event)
        if row is None:
            return
        event.stop()
        if row == self.cursor_row:
            self.post_message(self.RowSelected(self, self.row_keys[row], row))
        else:
            self.move_cursor(row)
