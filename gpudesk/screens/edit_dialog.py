"""`e` on a queued job: a small form of its name, command, time limit and GPUs, filled with what
it has; what the user changed is sent as `gpudesk edit` sends it (the engine checks it as a new
submission and refuses a job that started meanwhile)."""

from __future__ import annotations

import shlex
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from gpudesk.api import JobView
from gpudesk.text import printable_line
from gpudesk.units import parse_duration


def limit_text(seconds: float | None) -> str:
    """A time limit as the form shows it, in words `parse_duration` reads back: 2h, 90m, 45s."""
    if seconds is None:
        return ""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def command_text(job: JobView) -> str:
    """The command as one line: a shell job's string, else its words quoted as a shell would."""
    command = job.spec.command
    return command[0] if job.spec.shell else shlex.join(command)


class EditJobScreen(ModalScreen[dict[str, Any] | None]):
    """Edit a queued job; dismissed with the fields that changed ({} for none), None on Esc."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss_none", "Close")]

    def __init__(self, job: JobView) -> None:
        super().__init__()
        self.job = job

    def compose(self) -> ComposeResult:
        job = self.job
        # A command holding control characters (ESC ...) or bytes that are not UTF-8 is shown
        # spelled out, as `gpudesk show` shows it, never written to the terminal; and it is not
        # edited here, where the spelling would be sent back as the command.
        command = command_text(job)
        shown = printable_line(command)
        question = f"edit job {job.id} ({job.name}): it has not started"
        if shown != command:
            question += (
                "\nits command holds control characters, spelled out here: "
                f"gpudesk edit {job.id} --command changes it"
            )
        with Vertical(classes="dialog wide"):
            yield Static(question, classes="question", markup=False)
            with Grid(classes="form"):
                yield Label("name")
                yield Input(job.name, id="edit-name")
                yield Label("command")
                yield Input(shown, id="edit-command", disabled=shown != command)
                yield Label("time limit")
                yield Input(
                    limit_text(job.spec.time_limit_s),
                    placeholder="(none) 90m, 2h, 1:30:00",
                    id="edit-time",
                )
                yield Label("GPUs")
                yield Input(str(job.spec.gpus), id="edit-gpus", type="integer")
            yield Static("", id="edit-error", classes="error", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel (Esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#edit-name", Input).focus()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self._save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self._save()
        else:
            self.dismiss(None)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)

    def _value(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value.strip()

    def _save(self) -> None:
        try:
            fields = self.changed_fields()
        except ValueError as exc:
            self.query_one("#edit-error", Static).update(str(exc))
            return
        self.dismiss(fields)

    def changed_fields(self) -> dict[str, Any]:
        """The fields the form changed, as the `edit` op takes them; ValueError names a bad
        one."""
        job, fields = self.job, dict[str, Any]()
        name = self._value("edit-name")
        if name != job.name:
            fields["name"] = name
        box = self.query_one("#edit-command", Input)
        command = box.value.strip()
        if not box.disabled and command != command_text(job):
            try:
                words = [command] if job.spec.shell else shlex.split(command)
            except ValueError as exc:
                raise ValueError(f"command: {exc}") from None
            if not words or not command:
                raise ValueError("command: type the command to run")
            fields["command"] = words
        limit = self._value("edit-time")
        if limit != limit_text(job.spec.time_limit_s):
            try:
                fields["time_limit_s"] = parse_duration(limit) if limit else None
            except ValueError as exc:
                raise ValueError(f"time limit: {exc}") from None
        gpus = self._value("edit-gpus")
        if gpus != str(job.spec.gpus):
            if not (gpus.isascii() and gpus.isdigit()):
                raise ValueError("GPUs: a whole number, 0 or more")
            fields["gpus"] = int(gpus)
        return fields
