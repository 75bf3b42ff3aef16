"""`?`: every key the desk answers to, screen by screen."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "everywhere",
        (
            ("1  s", "station: GPU cards, host, totals"),
            ("2  j", "queue & jobs"),
            ("3", "shared loaders"),
            ("4  m", "MIG layout and planner"),
            ("5", "running jobs: SM, GPU memory, CPU, energy per job (nvitop's table)"),
            ("n", "submit a profile or a command"),
            ("ctrl+p", "command palette: every action by name, on any screen (asks which job)"),
            ("?", "this help"),
            ("q", "quit the desk (the engine and its jobs keep running)"),
        ),
    ),
    (
        "queue & jobs",
        (
            ("↑ ↓ pgup pgdn", "move; home / end: the first / last job"),
            ("click", "select a job; a click on the selected one opens it"),
            ("enter", "job detail: placement and why, usage, events, log tail"),
            ("c", "cancel the job (asks first)"),
            ("h", "hold a queued job / release it"),
            ("+  -", "raise / lower its priority"),
            ("r", "requeue a finished job"),
            ("l", "its log in a pane (f: follow on/off)"),
            ("p", "its log in $PAGER"),
            ("/", "filter: words, or state:running; esc clears"),
            ("o  O", "sort by the next column / reverse"),
        ),
    ),
    (
        "job detail",
        (
            ("esc", "back"),
            ("c h r l p", "as in the queue"),
            ("e", "edit a queued job: name, command, time limit, GPUs"),
        ),
    ),
    (
        "MIG",
        (
            ("a", "apply the planned layout (asks first; only where the station allows)"),
            ("g", "choose the next GPU with an applicable plan"),
        ),
    ),
)
READONLY_NOTE = (
    "read-only desk (--readonly): actions are hidden; switching screens, the "
    "palette and help still work"
)


def help_table(readonly: bool) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0), expand=True)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for section, keys in KEYS:
        table.add_row(f"[u]{section}[/u]", "")
        for key, what in keys:
            table.add_row(key, what)
        table.add_row("", "")
    if readonly:
        table.add_row("", READONLY_NOTE)
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "app.pop_screen", "Close"),
    ]

    def __init__(self, readonly: bool) -> None:
        super().__init__()
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog wide"):
            yield Static("[b]gpudesk keys[/b]  (esc closes)")
            yield Static(help_table(self.readonly))
