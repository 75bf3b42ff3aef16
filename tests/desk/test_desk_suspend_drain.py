"""The desk's suspend/resume key (`z`, on the queue and the job screen) and its drain in the
command palette, against a real engine on a SIMULATED station, checked in the engine's own
state; the header says DRAINED."""

from __future__ import annotations

from typing import Any

from conftest import EngineHandle
from test_desk_actions import SLEEP, engine_job, run_desk, select_job, until

from gpudesk.screens.app import DeskApp
from gpudesk.screens.dialogs import ConfirmScreen
from gpudesk.screens.widgets.strips import DeskHeader


def test_z_suspends_a_running_job_and_resumes_it(sim_engine: EngineHandle) -> None:
    (job_id,) = sim_engine.submit({"name": "long", "command": SLEEP})
    sim_engine.wait_state(job_id, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job_id)
        await pilot.press("z")
        await until(
            pilot, lambda: engine_job(sim_engine, job_id).state == "suspended", what="suspended"
        )
        await until(
            pilot,
            lambda: (job := app.state.job(job_id)) is not None and job.state == "suspended",
            what="suspended in the table",
        )
        header = str(app.screen.query_one(DeskHeader).render())
        assert "suspended 1" in header
        await pilot.press("z")
        await until(
            pilot, lambda: engine_job(sim_engine, job_id).state == "running", what="resumed"
        )

    run_desk(sim_engine, scenario)
    sim_engine.api.cancel([job_id], grace=1)
    sim_engine.wait_state(job_id, "cancelled")


async def palette(app: DeskApp, pilot: Any, title: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.pause()
    await pilot.press(*title)
    await pilot.pause(0.3)
    await pilot.press("enter")


def test_the_palette_drains_and_undrains_the_station(sim_engine: EngineHandle) -> None:
    async def scenario(app: DeskApp, pilot: Any) -> None:
        await until(pilot, lambda: app.state.status is not None, what="the first frame")
        await palette(app, pilot, "Drain station")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("y")
        await until(pilot, lambda: sim_engine.api.status().drain is not None, what="drained")
        await until(
            pilot,
            lambda: "DRAINED by" in str(app.screen.query_one(DeskHeader).render()),
            what="DRAINED in the header",
        )
        await palette(app, pilot, "Undrain station")
        await until(pilot, lambda: sim_engine.api.status().drain is None, what="undrained")

    run_desk(sim_engine, scenario)
