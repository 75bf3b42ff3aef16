"""`e` on a queued job: a small form of its name, command, time limit and GPUs, filled with what
it has; what the user changed is sent as `gpudesk edit` sends it (the engine checks it as a new
submission and refuses a job that started meanwhile)."""

from __future__ import annotations

import re
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


# A byte of a command that is not UTF-8 reaches the desk spelled out, `\xff` (replies are strict
# UTF-8: gpudesk.core.protocol), just as four characters a user typed would: the desk can tell
# neither from the other, so it cannot send such a byte back (see `spelled_bytes`).
_SPELLED_BYTE = re.compile(r"\\x[89a-f][0-9a-f]")


def spelled_bytes(words: list[str]) -> set[str]:
    """The spellings in `words` that may stand for a byte that is not UTF-8 (`\\xff`)."""
    return {found for word in words for found in _SPELLED_BYTE.findall(word)}


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
        # A command holding control characters (ESC ...) is shown spelled out, as `gpudesk show`
        # shows it, never written to the terminal; and it is not edited here, where the spelling
        # would be sent back as the command. Bytes that are not UTF-8 come already spelled
        # (`\xff`): the box stays open, and a changed command that keeps one is refused
        # (`_changed_command`).
        command = command_text(job)
        shown = printable_line(command)
        question = f"edit job {job.id} ({job.name}): it has not started"
        if shown != command:
            question += (
                "\nits command holds control characters, spelled out here: "
                f"gpudesk edit {job.id} --command changes it"
            )
        elif maybe_bytes := spelled_bytes(job.spec.command):
            question += (
                "\nits command may hold bytes that are not UTF-8, spelled out here "
                f"({', '.join(sorted(maybe_bytes))}): a changed command that keeps one is "
                f"refused; gpudesk edit {job.id} --command sets such bytes"
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
        command = self._changed_command()
        if command is not None:
            fields["command"] = command
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

    def _changed_command(self) -> list[str] | None:
        """The command's words where the form changed them, else None (the command is not sent
        back: a byte the desk was shown spelled out stays the byte); ValueError says why not."""
        job, box = self.job, self.query_one("#edit-command", Input)
        command = box.value.strip()
        if box.disabled or command_text(job) in (box.value, command):
            return None
        try:
            words = [command] if job.spec.shell else shlex.split(command)
        except ValueError as exc:
            raise ValueError(f"command: {exc}") from None
        if not words or not command:
            raise ValueError("command: type the command to run")
        if words == job.spec.command:  # re-quoted or re-spaced, the same words
            return None
        kept = spelled_bytes(words) & spelled_bytes(job.spec.command)
        if kept:  # sent, it would be those characters where the job had a byte
            raise ValueError(
                f"command: {', '.join(sorted(kept))} may be a byte that is not UTF-8, which "
                "the engine shows spelled out and the desk cannot send back as the byte: "
                f"gpudesk edit {job.id} --command sets the command (or leave it unchanged here)"
            )
        return words
