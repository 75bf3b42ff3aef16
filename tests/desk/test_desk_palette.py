"""The command palette (ctrl+p) offers every action on every screen: on a screen without a
selected job it asks which job (its id or name); a read-only desk offers no action that
changes something. Checked against a real engine's own state."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import EngineHandle
from replay import replay_feed
from test_desk_actions import SLEEP, engine_job, run_desk, select_job, until
from test_desk_snapshots import replayed
from textual.command import CommandPalette

from gpudesk.screens.app import DeskApp
from gpudesk.screens.dialogs import ConfirmScreen, JobPromptScreen
from gpudesk.screens.job import JobScreen
from gpudesk.screens.mig import MigScreen


async def palette(pilot: Any, app: DeskApp, typed: str) -> list[str]:
    """Open the palette, type `typed`, and return the commands it offers."""
    await pilot.press("ctrl+p")
    await until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
    await pilot.press(*typed)
    await pilot.pause(0.4)
    found = app.screen.query_one("CommandList")
    return [str(option.prompt).split("\n")[0] for option in found._options]  # type: ignore[attr-defined]


@pytest.mark.slow(15)
def test_job_actions_from_the_palette_on_any_screen(sim_engine: EngineHandle) -> None:
    # one CPU slot, taken by the first job: the second waits in the queue
    sim_engine.client.request(
        "configure", station={"backend": "sim:dgx-station-a100", "slots": 1, "sample_interval": 0.2}
    )
    first, second = sim_engine.submit(
        {"name": "sweep-a-1", "command": SLEEP}, {"name": "sweep-b-2", "command": SLEEP}
    )
    sim_engine.wait_state(first, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await until(pilot, lambda: app.state.job(second) is not None, what="the jobs")
        for key in ("3", "1"):  # loaders, then station: no job selected on either
            await pilot.press(key)
            offered = await palette(pilot, app, "Cancel job")
            assert any(o.startswith("Cancel job…") for o in offered), offered
            await pilot.press("escape")
            await pilot.pause()
        # hold by name, from the station
        await palette(pilot, app, "Hold")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobPromptScreen), what="the prompt")
        await pilot.press(*"sweep-b", "enter")
        await until(pilot, lambda: engine_job(sim_engine, second).held, what="hold")
        # cancel by id, from the MIG screen
        await pilot.press("4")
        await palette(pilot, app, "Cancel job")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobPromptScreen), what="the prompt")
        await pilot.press(*str(first), "enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("y")
        await until(
            pilot, lambda: engine_job(sim_engine, first).state == "cancelled", what="cancel"
        )
        # on the queue the selected job is offered by its id and name
        await select_job(app, pilot, second)
        offered = await palette(pilot, app, "Raise")
        assert f"Raise priority {second} (sweep-b-2)" in offered, offered
        await pilot.press("escape")
        # screens from the palette
        await palette(pilot, app, "Running jobs")
        await pilot.press("enter")
        await until(pilot, lambda: app.current_mode == "processes", what="running jobs")

    run_desk(sim_engine, scenario)
    assert engine_job(sim_engine, second).held


def test_a_readonly_palette_offers_no_action_that_changes_something(
    sim_engine: EngineHandle,
) -> None:
    async def scenario(app: DeskApp, pilot: Any) -> None:
        offered = await palette(pilot, app, "job")
        assert any(o.startswith("Job detail…") for o in offered), offered
        assert not any(o.startswith(("Cancel", "Hold", "Requeue", "Raise")) for o in offered)
        await pilot.press("escape")
        offered = await palette(pilot, app, "Apply")
        assert not any("MIG" in o for o in offered), offered

    run_desk(sim_engine, scenario, readonly=True)


def test_apply_mig_plan_from_the_palette_on_another_screen() -> None:
    """From the station, "Apply MIG plan" opens the MIG screen and applies once the plans are
    read: here the recorded plans allow none, and the desk says so."""
    app = DeskApp(replay_feed(readonly_reason=None), refresh_s=0.05)

    async def main() -> None:
        async with app.run_test(size=(100, 32)) as pilot:
            await replayed(pilot)
            offered = await palette(pilot, app, "Apply MIG")
            assert "Apply MIG plan" in offered, offered
            await pilot.press("enter")
            await until(pilot, lambda: app.current_mode == "mig", what="the MIG screen")
            await until(
                pilot,
                lambda: any("no plan can be applied" in str(n.message) for n in app._notifications),
                what="the answer",
            )

    asyncio.run(main())


def test_the_job_prompt_takes_a_card_label_and_says_what_it_cannot_read() -> None:
    """The prompt takes an id as the cards show it (`j21`, `#21`) as well as `21`; a digit
    that is not a plain one (`²`) is looked up as a name and not found, the desk going on."""
    app = DeskApp(replay_feed(), refresh_s=0.05)

    async def ask(pilot: Any, typed: str) -> None:
        await palette(pilot, app, "Job detail")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobPromptScreen), what="the prompt")
        await pilot.press(*typed, "enter")

    async def main() -> None:
        async with app.run_test(size=(100, 32)) as pilot:
            await replayed(pilot)
            await ask(pilot, "²")
            await until(
                pilot,
                lambda: any("no job named like '²'" in str(n.message) for n in app._notifications),
                what="the answer",
            )
            assert app.is_running
            job = max(app.state.jobs, key=lambda j: j.id)
            for typed in (f"j{job.id}", f"#{job.id}"):
                await ask(pilot, typed)
                await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the job")
                assert app.screen.job_id == job.id
                await pilot.press("escape")
                await until(pilot, lambda: not isinstance(app.screen, JobScreen), what="back")

    asyncio.run(main())


def test_apply_mig_plan_from_a_job_opened_over_the_mig_screen() -> None:
    """On the MIG screen, a job opened from the palette, then "Apply MIG plan": back to the
    MIG screen, which applies (here the recorded plans allow none, and it says so)."""
    app = DeskApp(replay_feed(readonly_reason=None), refresh_s=0.05)

    async def main() -> None:
        async with app.run_test(size=(100, 32)) as pilot:
            await replayed(pilot)
            await pilot.press("4")
            await until(pilot, lambda: isinstance(app.screen, MigScreen), what="the MIG screen")
            await palette(pilot, app, "Job detail")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, JobPromptScreen), what="the prompt")
            await pilot.press(*str(app.state.jobs[0].id), "enter")
            await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the job")
            await palette(pilot, app, "Apply MIG")
            await pilot.press("enter")
            await until(
                pilot,
                lambda: any("no plan can be applied" in str(n.message) for n in app._notifications),
                what="the answer",
            )
            assert isinstance(app.screen, MigScreen)

    asyncio.run(main())


def test_a_job_screen_does_not_offer_to_open_the_job_it_shows() -> None:
    """On a job's own screen the palette offers its actions on that job, but not "Job detail"
    of it again (that pushed a second, identical job screen); "Job detail…" still asks."""
    app = DeskApp(replay_feed(), refresh_s=0.05)

    async def main() -> None:
        async with app.run_test(size=(100, 32)) as pilot:
            await replayed(pilot)
            job = max(app.state.jobs, key=lambda j: j.id)
            app.open_job(job.id)
            await until(pilot, lambda: isinstance(app.screen, JobScreen), what="the job")
            offered = await palette(pilot, app, "Job detail")
            assert "Job detail…" in offered, offered
            assert not any(o.startswith(f"Job detail {job.id}") for o in offered), offered
            await pilot.press("escape")
            offered = await palette(pilot, app, "Open log")
            assert any(o.startswith(f"Open log {job.id} (") for o in offered), offered

    asyncio.run(main())
