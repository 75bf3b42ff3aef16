"""Shared loaders: one row per dataset producer, then one per consumer of each, with the CPU the
sharing saved against every job loading for itself."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from gpudesk.api import LoaderView
from gpudesk.render import orphaned
from gpudesk.screens.base import DeskScreen
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.footer import DeskFooter
from gpudesk.screens.widgets.strips import DeskHeader

COLUMNS = (
    ("what", "LOADER / CONSUMER", 26),
    ("epoch", "EPOCH", 7),
    ("rate", "BATCH/S", 8),
    ("slots", "SLOTS", 6),
    ("cpu", "CPU (SAVED)", 14),
)


def loader_line(loader: LoaderView) -> Text:
    """One line per loader above the table: what it serves and what sharing saved."""
    spec = loader.spec
    text = Text(loader.name, style="bold")
    text.append(
        f": {spec.factory}, batch {spec.batch_size}, {spec.workers} workers, seed {spec.seed}"
    )
    chosen = loader.status.selection if loader.status else None
    if chosen:
        text.append(f", selection {chosen.preset} ({chosen.kept} of {chosen.of} samples)")
    elif spec.selection:
        text.append(f", selection {spec.selection}")
    if loader.problem:  # a restart waiting its turn, or why it is not started again
        text.append(f"  ({'' if loader.running else 'stopped: '}{loader.problem})", style="yellow")
    elif not loader.running:
        text.append("  (stopped)", style="dim")
    elif loader.starting:  # a station's: whom it runs as is being asked of the user database
        text.append("  (starting)", style="dim")
    elif loader.status and loader.status.orphaned:
        text.append(f"  ({orphaned(loader.status.orphaned, time.time())})", style="yellow")
    if loader.saved_cpu_s is not None and loader.cpu_s is not None:
        text.append(
            f"; producer CPU {loader.cpu_s:.0f} s, "
            f"{loader.saved_cpu_s:.0f} s saved against unshared loading",
            style="green",
        )
    return text


Cells = tuple[Text | str, str, str, str, str]


def loader_rows(loader: LoaderView) -> list[tuple[str, Cells]]:
    """(row key, cells) for a loader and each of its consumers."""
    status = loader.status
    name = Text(f"{loader.name} (pid {loader.pid})", style="bold")
    cpu = "-"
    if loader.cpu_s is not None:
        cpu = f"{loader.cpu_s:.0f} s"
        if loader.saved_cpu_s is not None:
            cpu += f" ({loader.saved_cpu_s:.0f} s)"
    slots = f"{status.slots_used}/{status.slots}" if status else "-"
    # the producer's stream: [epoch, position in it]
    epoch = f"{status.stream[0]}@{status.stream[1]}" if status and len(status.stream) > 1 else "-"
    rows: list[tuple[str, Cells]] = [(f"loader:{loader.name}", (name, epoch, "", slots, cpu))]
    for consumer in status.consumers if status else []:
        position = consumer.position
        where = f"{consumer.epoch}@{position[1]}" if position else str(consumer.epoch)
        label = f"  pid {consumer.pid} batch {consumer.batch_size}"
        if consumer.makeups_left:
            label += f" +{consumer.makeups_left} make-ups"
        rows.append(
            (
                f"consumer:{loader.name}:{consumer.pid}",
                (
                    label,
                    where,
                    f"{consumer.batches_per_s:.1f}",
                    str(consumer.held_slots),
                    "",
                ),
            )
        )
    return rows


class LoadersScreen(DeskScreen):
    def compose(self) -> ComposeResult:
        yield DeskHeader()
        yield Static("", id="loaders-note")
        table: DataTable[Any] = DataTable(id="loaders", cursor_type="row")
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table
        yield DeskFooter()

    def show_state(self, state: DeskState) -> None:
        loaders = state.loaders
        note = self.query_one("#loaders-note", Static)
        if loaders:
            lines = Text("\n").join(loader_line(loader) for loader in loaders)
            note.update(lines)
        else:
            note.update(
                "no shared loaders: name a [datasets.NAME] in a profile and its jobs "
                "share one producer (docs/loader.md)"
            )
        table = self.query_one("#loaders", DataTable)
        table.display = bool(loaders)  # the hint alone, not above an empty table's header
        rows = [row for loader in loaders for row in loader_rows(loader)]
        keys = [key for key, _ in rows]
        if [str(k.value) for k in table.rows] != keys:
            table.clear()
            for key, cells in rows:
                table.add_row(*cells, key=key)
            return
        for key, cells in rows:
            for (column, _label, _width), value in zip(COLUMNS, cells, strict=True):
                table.update_cell(key, column, value)
