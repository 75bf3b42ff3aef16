"""Shared loaders: one row per dataset producer, then one per consumer of each, with the CPU the
sharing saved against every job loading for itself."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Footer, Static

from gpudesk.screens.base import DeskScreen
from gpudesk.screens.state import DeskState
from gpudesk.screens.widgets.strips import DeskHeader

COLUMNS = (
    ("what", "LOADER / CONSUMER", 26),
    ("epoch", "EPOCH", 7),
    ("rate", "BATCH/S", 8),
    ("slots", "SLOTS", 6),
    ("cpu", "CPU (SAVED)", 14),
)


def loader_line(loader: dict[str, Any]) -> Text:
    """One line per loader above the table: what it serves and what sharing saved."""
    spec = loader.get("spec") or {}
    text = Text(loader["name"], style="bold")
    text.append(
        f": {spec.get('factory', '?')}, batch {spec.get('batch_size', '?')}, "
        f"{spec.get('workers', '?')} workers, seed {spec.get('seed', 0)}"
    )
    chosen = (loader.get("status") or {}).get("selection") or {}
    if chosen:
        text.append(
            f", selection {chosen.get('preset')} ({chosen.get('kept')} of "
            f"{chosen.get('of')} samples)"
        )
    elif spec.get("selection"):
        text.append(f", selection {spec['selection']}")
    if not loader.get("running", True):
        text.append("  (stopped)", style="dim")
    if loader.get("saved_cpu_s") is not None:
        text.append(
            f"; producer CPU {loader['cpu_s']:.0f} s, "
            f"{loader['saved_cpu_s']:.0f} s saved against unshared loading",
            style="green",
        )
    return text


def loader_rows(loader: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    """(row key, cells) for a loader and each of its consumers."""
    status = loader.get("status") or {}
    stream = status.get("stream") or [None, None]
    name: Text | str = Text(f"{loader['name']} (pid {loader.get('pid')})", style="bold")
    cpu = "-"
    if loader.get("cpu_s") is not None:
        cpu = f"{loader['cpu_s']:.0f} s"
        if loader.get("saved_cpu_s") is not None:
            cpu += f" ({loader['saved_cpu_s']:.0f} s)"
    slots = f"{status.get('slots_used', 0)}/{status.get('slots', '?')}" if status else "-"
    epoch = f"{stream[0]}@{stream[1]}" if stream[0] is not None else "-"
    rows = [(f"loader:{loader['name']}", (name, epoch, "", slots, cpu))]
    for consumer in status.get("consumers") or []:
        position = consumer.get("position")
        where = f"{consumer['epoch']}@{position[1]}" if position else str(consumer["epoch"])
        label = f"  pid {consumer['pid']} batch {consumer['batch_size']}"
        if consumer.get("makeups_left"):
            label += f" +{consumer['makeups_left']} make-ups"
        rows.append(
            (
                f"consumer:{loader['name']}:{consumer['pid']}",
                (
                    label,
                    where,
                    f"{consumer.get('batches_per_s', 0):.1f}",
                    str(consumer.get("held_slots", 0)),
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
        yield Footer()

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
