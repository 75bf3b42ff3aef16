"""The desk's edit of a queued job (`e` in the job detail, "Edit job" in the palette) against a
real engine on a SIMULATED station: the form filled with what the job has, a bad value said in
the form, the change checked in the engine's own state, and a running job refused."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any

import pytest
from conftest import EngineHandle
from test_desk_actions import SLEEP, engine_job, notices, run_desk, select_job, until
from textual.widgets import Input, Static

from gpudesk.screens.app import DeskApp
from gpudesk.screens.edit_dialog import EditJobScreen
from gpudesk.screens.job import JobScreen


@pytest.fixture
def busy_station(sim_engine: EngineHandle) -> tuple[EngineHandle, int, int]:
    """One CPU slot taken by a long job; a second job waits: (engine, running, queued)."""
    sim_engine.client.request(
        "configure", station={"backend": "sim:dgx-station-a100", "slots": 1, "sample_interval": 0.2}
    )
    blocker, waiter = sim_engine.submit(
        {"name": "blocker", "command": SLEEP}, {"name": "waiter", "command": ["sleep", "1"]}
    )
    sim_engine.wait_state(blocker, "running")
    return sim_engine, blocker, waiter


async def edit_form(app: DeskApp, pilot: Any, job_id: int) -> EditJobScreen:
    """The edit form of `job_id`, opened with `e` from its detail screen."""
    await select_job(app, pilot, job_id)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the job detail")
    await pilot.press("e")
    form: EditJobScreen = await until(
        pilot, lambda: isinstance(app.screen, EditJobScreen) and app.screen, what="the form"
    )
    return form


def test_e_edits_a_queued_job_from_its_detail(busy_station: tuple[EngineHandle, int, int]) -> None:
    engine, blocker, waiter = busy_station

    async def scenario(app: DeskApp, pilot: Any) -> None:
        form = await edit_form(app, pilot, waiter)
        assert form.query_one("#edit-command", Input).value == "sleep 1"
        assert form.query_one("#edit-time", Input).value == ""
        form.query_one("#edit-name", Input).value = "renamed"
        form.query_one("#edit-time", Input).value = "soon"
        await pilot.click("#save")
        error = str(form.query_one("#edit-error", Static).render())
        assert error.startswith("time limit: ") and isinstance(app.screen, EditJobScreen)
        form.query_one("#edit-time", Input).value = "2h"
        form.query_one("#edit-command", Input).value = "sleep 2"
        form.query_one("#edit-command", Input).focus()
        await pilot.press("enter")  # Enter in any field saves, as Save does
        await until(pilot, lambda: engine_job(engine, waiter).name == "renamed", what="the edit")
        spec = engine_job(engine, waiter).spec
        assert (spec.command, spec.time_limit_s, spec.gpus) == (["sleep", "2"], 7200, 0)
        await until(
            pilot,
            lambda: any(
                "edited: name waiter -> renamed; command sleep 1 -> sleep 2; "
                "time none -> 02:00:00" in n
                for n in notices(app)
            ),
            what="the outcome's notice",
        )
        # the running job: refused in the desk, nothing sent
        await pilot.press("escape")
        await select_job(app, pilot, blocker)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen), what="its detail")
        await pilot.press("e")
        await until(
            pilot,
            lambda: any("only a job that has not started" in n for n in notices(app)),
            what="the refusal",
        )
        assert not isinstance(app.screen, EditJobScreen)

    run_desk(engine, scenario)
    assert engine_job(engine, blocker).name == "blocker"


def test_a_readonly_desk_has_no_edit(busy_station: tuple[EngineHandle, int, int]) -> None:
    engine, _, waiter = busy_station

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, waiter)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the job detail")
        assert "edit_job" not in {b.binding.action for b in app.screen.active_bindings.values()}
        await pilot.press("e")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, EditJobScreen)

    run_desk(engine, scenario, readonly=True)
    assert engine_job(engine, waiter).name == "waiter"


def test_a_command_with_control_characters_is_shown_spelled_out_and_kept(
    busy_station: tuple[EngineHandle, int, int],
) -> None:
    engine, _, _ = busy_station
    command = ["printf", "\x1b[2J\x1b[31mred"]  # clear the screen, then red
    (job,) = engine.submit({"name": "colour", "command": command})

    async def scenario(app: DeskApp, pilot: Any) -> None:
        form = await edit_form(app, pilot, job)
        box = form.query_one("#edit-command", Input)
        drawn = "".join(segment.text for segment in box.render_line(0))
        assert "\x1b" not in drawn and r"printf '\x1b[2J\x1b[31mred'" in drawn
        assert box.disabled  # the spelling is not sent back as the command
        question = str(form.query_one(".question", Static).render())
        assert f"gpudesk edit {job} --command changes it" in question
        form.query_one("#edit-name", Input).value = "coloured"
        await pilot.click("#save")
        await until(pilot, lambda: engine_job(engine, job).name == "coloured", what="the edit")

    run_desk(engine, scenario)
    assert engine_job(engine, job).spec.command == command


def test_an_edit_of_a_command_with_escapes_is_spelled_out_in_the_job_events(
    busy_station: tuple[EngineHandle, int, int],
) -> None:
    engine, _, waiter = busy_station
    engine.api.edit_job(waiter, {"command": ["printf", "\x1b[2J"]})  # as `gpudesk edit` sends it

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, waiter)
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen)
        events = screen.query_one("#job-events", Static)
        said = await until(pilot, lambda: "edited by user" in (t := str(events.render())) and t)
        assert r"command sleep 1 -> printf \x1b[2J" in said and "\x1b" not in said

    run_desk(engine, scenario)


def test_an_event_stored_with_raw_escapes_before_they_were_spelled_is_spelled_out(
    busy_station: tuple[EngineHandle, int, int],
) -> None:
    """A row an engine before c84e003 stored, the command's escape sequences as they came
    (inserted here into the engine's own SQLite store): the job detail spells them out when it
    shows the event, so an old store cannot clear the desk's screen or retitle its terminal."""
    engine, _, waiter = busy_station
    raw = "edited by user: command sleep 1 -> printf \x1b[2J\x1b]0;owned\x07\x9b31m"
    with sqlite3.connect(engine.home.db, timeout=30.0) as conn:
        conn.execute(
            "INSERT INTO events (ts, job_id, attempt, kind, state, message) "
            "VALUES (?, ?, NULL, 'edit', NULL, ?)",
            (time.time(), waiter, raw),
        )

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, waiter)
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen)
        events = screen.query_one("#job-events", Static)
        said = await until(pilot, lambda: "edited by user" in (t := str(events.render())) and t)
        assert r"printf \x1b[2J\x1b]0;owned\x07\x9b31m" in said, said
        drawn = "".join(s.text for y in range(events.size.height) for s in events.render_line(y))
        assert not {"\x1b", "\x07", "\x9b"} & set(said + drawn)

    run_desk(engine, scenario)


def stored_command(engine: EngineHandle, job_id: int) -> list[str]:
    """The job's command as the engine keeps it, read from its SQLite store: a byte that is not
    UTF-8 as its surrogate (every reply spells it out as `\\xff`)."""
    with sqlite3.connect(engine.home.db, timeout=30.0) as conn:
        (spec,) = conn.execute("SELECT spec FROM jobs WHERE id = ?", (job_id,)).fetchone()
    command: list[str] = json.loads(spec)["command"]
    return command


def test_a_command_with_bytes_that_are_not_utf8_keeps_them_or_says_why_not(
    busy_station: tuple[EngineHandle, int, int],
) -> None:
    """A byte that is not UTF-8 reaches the desk spelled out (`\\xff`), which the desk cannot
    tell from those four characters typed. Saved unchanged, the command is not sent back (its
    byte stays); changed but still holding the spelling, it is refused in the form, where it
    was sent as the four characters; changed without it, it is sent."""
    engine, _, _ = busy_station
    command = ["printf", os.fsdecode(b"a\xffb")]
    (job,) = engine.submit({"name": "bytes", "command": command})

    async def scenario(app: DeskApp, pilot: Any) -> None:
        form = await edit_form(app, pilot, job)
        box = form.query_one("#edit-command", Input)
        assert box.value == r"printf 'a\xffb'" and not box.disabled
        question = str(form.query_one(".question", Static).render())
        assert r"may hold bytes that are not UTF-8, spelled out here (\xff)" in question
        form.query_one("#edit-name", Input).value = "bytes-2"
        await pilot.click("#save")
        await until(pilot, lambda: engine_job(engine, job).name == "bytes-2", what="the edit")
        assert stored_command(engine, job) == command
        await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the form closed")
        await pilot.press("e")
        form = await until(
            pilot, lambda: isinstance(app.screen, EditJobScreen) and app.screen, what="the form"
        )
        form.query_one("#edit-command", Input).value = r"printf 'a\xffb' again"
        await pilot.click("#save")
        error = form.query_one("#edit-error", Static)
        said = await until(pilot, lambda: str(error.render()), what="the refusal")
        assert said.startswith(r"command: \xff may be a byte that is not UTF-8"), said
        assert f"gpudesk edit {job} --command" in said and isinstance(app.screen, EditJobScreen)
        assert stored_command(engine, job) == command
        form.query_one("#edit-command", Input).value = "printf plain"
        form.query_one("#edit-command", Input).focus()
        await pilot.press("enter")  # (a second click on Save within 0.2 s is not a press)
        await until(
            pilot, lambda: stored_command(engine, job) == ["printf", "plain"], what="the edit"
        )

    run_desk(engine, scenario)


def test_an_untouched_shell_command_is_not_sent_back_trimmed(
    busy_station: tuple[EngineHandle, int, int],
) -> None:
    """A shell job's command is kept as its text: the form shows it with its outer spaces, and
    a save that changed only the name leaves it as it was (it was sent back trimmed)."""
    engine, _, _ = busy_station
    (job,) = engine.submit({"name": "spaced", "command": [" sleep 1 "], "shell": True})

    async def scenario(app: DeskApp, pilot: Any) -> None:
        form = await edit_form(app, pilot, job)
        assert form.query_one("#edit-command", Input).value == " sleep 1 "
        form.query_one("#edit-name", Input).value = "spaced-2"
        await pilot.click("#save")
        await until(pilot, lambda: engine_job(engine, job).name == "spaced-2", what="the edit")

    run_desk(engine, scenario)
    assert stored_command(engine, job) == [" sleep 1 "]
