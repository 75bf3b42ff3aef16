"""Modal dialogs: confirm an action, and submit jobs (a profile file, or one command)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static, TabbedContent, TabPane


class ConfirmScreen(ModalScreen[bool]):
    """Yes or no, before something that cannot be undone (cancel, drain, a MIG layout): y
    confirms, n or Esc declines. The focus starts on No, the safe answer, so Enter (which
    presses the focused button) declines; it confirms only once Tab moved the focus to Yes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question, self.yes = question, yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question", markup=False)  # a job's name
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # an Enter pressed out of habit does nothing

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


@dataclass(frozen=True)
class SubmitRequest:
    """What the submit dialog asks for: a profile to submit, or one job."""

    profile: Path | None = None
    job: dict[str, Any] | None = None


class SubmitScreen(ModalScreen[SubmitRequest | None]):
    """Submit a profile's jobs, or one command with its GPU needs."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss_none", "Close")]

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"), TabbedContent(initial="by-profile"):
            with TabPane("Profile", id="by-profile"):
                yield Label("profile.toml to submit (its [[jobs]] and [[sweeps]])")
                yield Input(placeholder="profiles/quickstart.toml", id="profile")
            with TabPane("Command", id="by-command"), Grid(classes="form"):
                yield Label("command")
                yield Input(placeholder="python train.py --lr 0.1", id="command")
                yield Label("name")
                yield Input(placeholder="(the program's name)", id="name")
                yield Label("GPUs")
                yield Input("0", id="gpus", type="integer")
                yield Label("GPU memory, GB")
                yield Input(placeholder="(unknown)", id="memory", type="number")
        yield Static("", id="submit-error", classes="error", markup=False)
        with Horizontal(classes="buttons"):
            yield Button("Submit", variant="primary", id="submit")
            yield Button("Cancel (Esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#profile", Input).focus()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "submit":
            self._submit()
        else:
            self.dismiss(None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)

    def _error(self, message: str) -> None:
        self.query_one("#submit-error", Static).update(message)

    def _submit(self) -> None:
        tab = self.query_one(TabbedContent).active
        if tab == "by-profile":
            raw = self.query_one("#profile", Input).value.strip()
            if not raw:
                self._error("name a profile file")
                return
            path = Path(raw).expanduser()
            path = path if path.is_absolute() else self.workdir / path
            if not path.is_file():
                self._error(f"{path} is not a file")
                return
            self.dismiss(SubmitRequest(profile=path))
            return
        command = self.query_one("#command", Input).value.strip()
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            self._error(f"command: {exc}")
            return
        if not argv:
            self._error("type the command to run")
            return
        gpus_text = self.query_one("#gpus", Input).value.strip() or "0"
        memory_text = self.query_one("#memory", Input).value.strip()
        try:
            gpus = int(gpus_text)
            memory = float(memory_text) if memory_text else None
        except ValueError:
            self._error("GPUs must be a whole number and memory a number of GB")
            return
        name = self.query_one("#name", Input).value.strip() or Path(argv[0]).name
        self.dismiss(
            SubmitRequest(
                job={
                    "name": name,
                    "command": argv,
                    "gpus": gpus,
                    "memory_gb": memory,
                    "workdir": str(self.workdir),
                }
            )
        )


class JobPromptScreen(ModalScreen[str | None]):
    """Which job, for an action chosen in the command palette where no job is selected: its
    id or (part of) its name. Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(f"{self.what}: which job?", classes="question")
            yield Input(placeholder="job id or name (Enter; Esc cancels)", id="job-prompt")

    def on_mount(self) -> None:
        self.query_one("#job-prompt", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
