"""What the desk shows of a job's name, of what the user typed and of the engine's messages is
plain text: brackets in it (a sweep's `lr[0.1]`, a profile's `[station]`) are shown, never
read as Textual markup, where `[/]` closed the desk with a traceback and `[b]` hid words."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec
from conftest import EngineHandle
from replay import still_desk
from test_desk_actions import SLEEP, run_desk, select_job, until
from test_desk_palette import palette
from textual.widgets import Static
from textual.widgets._toast import Toast

from gpudesk.screens.app import DeskApp
from gpudesk.screens.dialogs import ConfirmScreen, JobPromptScreen, SubmitScreen
from gpudesk.screens.edit_dialog import EditJobScreen
from gpudesk.screens.feed import Frame
from gpudesk.screens.job import JobScreen, LogScreen
from gpudesk.screens.queue import QueueScreen

NAME = "sweep[b]lr[/b]-[/]"


def shown(widget: Static) -> str:
    return str(widget.render())


def test_a_name_with_brackets_is_shown_as_typed(sim_engine: EngineHandle) -> None:
    (job,) = sim_engine.submit({"name": NAME, "command": SLEEP})
    sim_engine.wait_state(job, "running")
    (waiting,) = sim_engine.submit({"name": NAME, "command": SLEEP, "after": [job]})

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job)
        await pilot.press("c")  # the confirmation names the job
        dialog = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen)
        assert NAME in shown(dialog.query_one(".question", Static))
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), what="the queue back")
        await pilot.press("l")  # the log pane's title
        pane = await until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen)
        assert f"log of job {job} {NAME}:" in shown(pane.query_one("#log-title", Static))
        await pilot.press("escape")
        offered = await palette(pilot, app, "Cancel job")  # the selected job's commands
        assert f"Cancel job {job} ({NAME})" in offered, offered
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), what="the queue back")
        # a notice repeats what was typed: `[/x]` is no markup either
        await pilot.press("1")  # no job selected: the palette asks which
        await palette(pilot, app, "Hold")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobPromptScreen), what="the prompt")
        await pilot.press(*"[/x]", "enter")
        toasts = await until(pilot, lambda: list(app.screen.query(Toast)), what="the notice")
        assert "no job named like '[/x]'" in shown(toasts[-1])
        await pilot.press("n")  # the submit form repeats a profile's path that is no file
        form = await until(pilot, lambda: isinstance(app.screen, SubmitScreen) and app.screen)
        await pilot.press(*"[/]p.toml", "enter")
        error = form.query_one("#submit-error", Static)
        await until(pilot, lambda: "[/]p.toml is not a file" in shown(error), what="the error")
        await pilot.press("escape")
        await select_job(app, pilot, waiting)  # the edit form of a queued job names it
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the job")
        await pilot.press("e")
        edit = await until(pilot, lambda: isinstance(app.screen, EditJobScreen) and app.screen)
        assert f"edit job {waiting} ({NAME})" in shown(edit.query_one(".question", Static))
        assert app.is_running

    run_desk(sim_engine, scenario, notifications=True)


def test_the_station_note_shows_the_engines_words_as_they_are() -> None:
    """The note over the GPU cards says what the engine says of the GPUs and of its store,
    which quote paths a user chose (the state folder, the nvidia-smi to call): brackets in them
    are shown, where `[/]` closed the desk with a MarkupError and `[bold]` hid a path's part."""
    gpu_problem = "nvidia-smi (/opt/[/]bin/nvidia-smi) failed: NVML [link=x] not loaded"
    store_problem = (
        "cannot be written: the disk holding gpudesk's state folder "
        "(/home/ana/[bold]runs[/bold]/state, 12 KiB free) is full"
    )

    def troubled(frame: Frame) -> Frame:
        station = msgspec.structs.replace(frame.status.station, gpu_problem=gpu_problem)
        status = msgspec.structs.replace(frame.status, station=station, store_problem=store_problem)
        return dataclasses.replace(frame, status=status)

    app, _ = still_desk(troubled)

    async def main() -> str:
        async with app.run_test(size=(120, 40)) as pilot:
            note = app.screen.query_one("#station-note", Static)
            return str(await until(pilot, lambda: note.display and shown(note)))

    said = asyncio.run(main())
    assert said == f"{gpu_problem}\nstore: {store_problem}"
