"""The desk against a real engine on a SIMULATED DGX Station A100: every action through keys
(and the palette), checked in the engine's own state, not only on screen. And the desk on a
recording of a real engine (tests/desk/data): reads answered, actions refused."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineHandle, wait_for
from replay import STATION, replay_feed

from gpudesk.core.wire.jobs import JobView
from gpudesk.screens.app import DeskApp
from gpudesk.screens.dialogs import ConfirmScreen, SubmitScreen
from gpudesk.screens.feed import EngineFeed
from gpudesk.screens.help import HelpScreen
from gpudesk.screens.job import JobScreen, LogScreen
from gpudesk.screens.queue import QueueScreen
from gpudesk.screens.widgets.gpu_card import GpuCard
from gpudesk.selection.cache import SelectionCache

SIZE = (100, 32)
SLEEP = [sys.executable, "-c", "import time; print('epoch 1/3', flush=True); time.sleep(60)"]


def run_desk(
    engine: EngineHandle,
    scenario: Callable[[DeskApp, Any], Awaitable[None]],
    readonly: bool = False,
    notifications: bool = False,  # drawn as on a terminal (run_test leaves them out)
) -> DeskApp:
    feed = EngineFeed(engine.home, interval=0.2)
    app = DeskApp(feed, readonly=readonly, refresh_s=0.2, workdir=engine.home.root)

    async def main() -> None:
        async with app.run_test(size=SIZE, notifications=notifications) as pilot:
            await scenario(app, pilot)

    try:
        asyncio.run(main())
    finally:
        feed.close()
    return app


async def until(
    pilot: Any, predicate: Callable[[], object], timeout: float = 15.0, what: str = "the desk"
) -> Any:
    """Let the app run until `predicate` holds (the engine and the feed work meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def notices(app: DeskApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def engine_job(engine: EngineHandle, job_id: int) -> JobView:
    return engine.job(job_id)


async def select_job(app: DeskApp, pilot: Any, job_id: int) -> QueueScreen:
    await pilot.press("2")
    screen = await until(
        pilot, lambda: isinstance(app.screen, QueueScreen) and app.screen, what="the queue"
    )
    await until(pilot, lambda: app.state.job(job_id) is not None, what=f"job {job_id}")
    table = screen.table
    await until(pilot, lambda: str(job_id) in table.row_keys, what=f"job {job_id}'s row")
    table.move_cursor(table.row_keys.index(str(job_id)))
    await pilot.pause()
    assert screen.selected_id() == job_id
    return screen


@pytest.fixture
def desk_engine(sim_engine: EngineHandle) -> EngineHandle:
    return sim_engine


def test_station_shows_every_simulated_gpu_with_sm_and_energy(desk_engine: EngineHandle) -> None:
    desk_engine.submit({"name": "warm", "command": SLEEP, "gpus": 1, "memory_gb": 8, "sm_pct": 60})

    async def scenario(app: DeskApp, pilot: Any) -> None:
        cards = await until(
            pilot,
            lambda: len(app.screen.query(GpuCard)) == 4 and app.screen.query(GpuCard),
            what="4 GPU cards",
        )
        await until(
            pilot,
            lambda: "j1" in str(app.screen.query_one("#gpu-0").render()),
            what="the job on GPU 0",
        )
        text = "\n".join(str(card.render()) for card in cards)
        assert text.count("SIMULATED") == 4
        assert "SM " in text and "kernel-active" in text and "MEM " in text
        assert "A100" in text and "E " in text and "since open" in text
        assert [card.border_title for card in cards] == [f"GPU {i}" for i in range(4)]

    run_desk(desk_engine, scenario)


def test_switching_screens_by_key_and_palette(desk_engine: EngineHandle) -> None:
    async def scenario(app: DeskApp, pilot: Any) -> None:
        for key, mode in (
            ("2", "queue"),
            ("3", "loaders"),
            ("4", "mig"),
            ("1", "station"),
            ("j", "queue"),
            ("m", "mig"),
            ("s", "station"),
        ):
            await pilot.press(key)
            assert app.current_mode == mode
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Loaders")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: app.current_mode == "loaders", what="the palette's choice")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

    run_desk(desk_engine, scenario)


def test_submit_a_command_from_the_form(desk_engine: EngineHandle) -> None:
    async def scenario(app: DeskApp, pilot: Any) -> None:
        await pilot.press("2", "n")
        dialog = await until(
            pilot,
            lambda: isinstance(app.screen, SubmitScreen) and app.screen,
            what="the submit dialog",
        )
        dialog.query_one("TabbedContent").active = "by-command"
        await pilot.pause()
        dialog.query_one("#command").value = f"{sys.executable} -c \"print('hi')\""
        dialog.query_one("#name").value = "from-desk"
        await pilot.click("#submit")
        await until(
            pilot,
            lambda: any(j.name == "from-desk" for j in app.state.jobs),
            what="the submitted job in the table",
        )

    run_desk(desk_engine, scenario)
    jobs = desk_engine.client.request("jobs")["jobs"]
    assert [j["name"] for j in jobs] == ["from-desk"]
    done = desk_engine.wait_all_done([jobs[0]["id"]])
    assert done[0].state == "succeeded"


def selection_profile(tmp_path: Path, station_line: str) -> Path:
    """A profile whose one job trains on a 25 % random selection of a small dataset: its
    pre-pass job runs first. `station_line` is added to its [station] table."""
    profile = tmp_path / "sel.toml"
    profile.write_text(
        textwrap.dedent(f"""
        name = "sel"
        [station]
        backend = "sim:dgx-station-a100"
        {station_line}
        [datasets.syn]
        factory = "gpudesk.workloads.synthetic:make_dataset"
        args = {{ size = 120, shape = [4] }}
        batch_size = 8
        workers = 0
        selection = "random-25"
        [[jobs]]
        name = "train"
        dataset = "syn"
        command = ["{sys.executable}", "-c", "pass"]
    """)
    )
    return profile


async def submit_profile_from_the_dialog(app: DeskApp, pilot: Any, profile: Path) -> None:
    """`n`, the profile's path in the dialog, enter: what a user does to submit a profile."""
    await pilot.press("n")
    dialog = await until(
        pilot,
        lambda: isinstance(app.screen, SubmitScreen) and app.screen,
        what="the submit dialog",
    )
    dialog.query_one("#profile").value = str(profile)
    await pilot.press("enter")


def test_submit_a_profile(desk_engine: EngineHandle, tmp_path: Path) -> None:
    profile = tmp_path / "two.toml"
    profile.write_text(
        f'name = "two"\n[[sweeps]]\nname = "p{{n}}"\ncommand = '
        f'["{sys.executable}", "-c", "pass"]\ngrid = {{ n = [1, 2] }}\n'
    )

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await submit_profile_from_the_dialog(app, pilot, profile)
        await until(
            pilot,
            lambda: {j.name for j in app.state.jobs} == {"p1", "p2"},
            what="the profile's jobs",
        )

    run_desk(desk_engine, scenario)


def test_submit_a_profile_leaves_the_station_and_runs_its_prepasses_first(
    desk_engine: EngineHandle, tmp_path: Path
) -> None:
    """Submit-by-profile is `gpudesk run`'s workflow: [station] weighed and left as the station
    has it (the desk says what differs), the selection's pre-pass job queued and finished
    first (its cost recorded), then the profile's job."""
    before = desk_engine.client.request("status")["station"]["grid_intensity"]
    assert before != 123
    profile = selection_profile(tmp_path, "grid_intensity = 123")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await submit_profile_from_the_dialog(app, pilot, profile)
        await until(
            pilot,
            lambda: any("not applied: grid_intensity" in n for n in notices(app)),
            what="the setting left as it is, said",
        )
        await until(
            pilot,
            lambda: any(j.name == "train" for j in app.state.jobs),
            timeout=90,
            what="the profile's job, after its pre-pass",
        )

    run_desk(desk_engine, scenario)
    assert desk_engine.client.request("status")["station"]["grid_intensity"] == before
    prepass, train = sorted(
        desk_engine.client.request("jobs", usage=True)["jobs"], key=lambda j: j["id"]
    )
    assert (prepass["name"], prepass["state"]) == ("prepass-syn-random-25", "succeeded")
    assert train["name"] == "train" and train["submitted_at"] >= prepass["ended_at"]
    assert prepass["group"] == train["group"] and train["group"].startswith("sel@")
    (entry,) = SelectionCache(desk_engine.home.selection_dir).entries()
    assert entry.method == "random" and entry.cost.job == prepass["id"]


def test_closing_the_desk_while_a_prepass_waits_leaves_it_to_the_engine(
    desk_engine: EngineHandle, tmp_path: Path
) -> None:
    """The submit worker waits for pre-passes off the UI thread, and stops waiting when the desk
    closes: `q` closes at once; the pre-pass stays queued, the profile's job is not submitted."""
    desk_engine.client.request("configure", station={"slots": 1})
    (blocker,) = desk_engine.submit({"name": "blocker", "command": SLEEP})
    desk_engine.wait_state(blocker, "running")
    profile = selection_profile(tmp_path, "slots = 1")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await submit_profile_from_the_dialog(app, pilot, profile)
        await until(
            pilot,
            lambda: any(j.name.startswith("prepass-") for j in app.state.jobs),
            what="the pre-pass job",
        )
        await pilot.press("q")

    started = time.monotonic()
    run_desk(desk_engine, scenario)
    assert time.monotonic() - started < 30
    jobs = desk_engine.client.request("jobs")["jobs"]
    assert sorted((j["name"], j["state"]) for j in jobs) == [
        ("blocker", "running"),
        ("prepass-syn-random-25", "queued"),
    ]


def test_cancel_asks_first_and_then_stops_the_job(desk_engine: EngineHandle) -> None:
    (job_id,) = desk_engine.submit({"name": "long", "command": SLEEP})
    desk_engine.wait_state(job_id, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job_id)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("n")  # declined: nothing happens
        await pilot.pause(0.3)
        assert engine_job(desk_engine, job_id).state == "running"
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("y")
        await until(
            pilot,
            lambda: (job := app.state.job(job_id)) is not None and job.state == "cancelled",
            what="the cancelled state in the table",
        )

    run_desk(desk_engine, scenario)
    assert engine_job(desk_engine, job_id).state == "cancelled"


def test_enter_in_the_question_answers_the_focused_button_which_starts_on_no(
    desk_engine: EngineHandle,
) -> None:
    """A question before something that cannot be undone (cancel, drain, a MIG layout) opens
    with its focus on No, the safe answer: Enter, pressed out of habit, declines. Enter confirms
    only once the user moved the focus to Yes."""
    (job_id,) = desk_engine.submit({"name": "long", "command": SLEEP})
    desk_engine.wait_state(job_id, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job_id)
        await pilot.press("c")
        dialog = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen)
        assert dialog.focused is dialog.query_one("#no")
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="an answer")
        await pilot.pause(0.3)
        assert engine_job(desk_engine, job_id).state == "running"
        await pilot.press("c")
        dialog = await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen)
        await pilot.press("shift+tab")
        assert dialog.focused is dialog.query_one("#yes")
        await pilot.press("enter")
        await until(
            pilot,
            lambda: (job := app.state.job(job_id)) is not None and job.state == "cancelled",
            what="the cancelled state in the table",
        )

    run_desk(desk_engine, scenario)
    assert engine_job(desk_engine, job_id).state == "cancelled"


def test_hold_release_and_priority(desk_engine: EngineHandle) -> None:
    # one CPU slot, taken by a long job: the next two wait in the queue
    desk_engine.client.request(
        "configure", station={"backend": "sim:dgx-station-a100", "slots": 1, "sample_interval": 0.2}
    )
    blocker, first, second = desk_engine.submit(
        {"name": "blocker", "command": SLEEP},
        {"name": "first", "command": SLEEP},
        {"name": "second", "command": SLEEP},
    )
    desk_engine.wait_state(blocker, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, first)
        await pilot.press("h")
        await until(pilot, lambda: engine_job(desk_engine, first).held, what="held")
        await until(
            pilot,
            lambda: (job := app.state.job(first)) is not None and job.held,
            what="held in the table",
        )
        await pilot.press("h")
        await until(pilot, lambda: not engine_job(desk_engine, first).held, what="released")
        await select_job(app, pilot, second)
        await pilot.press("plus")
        await until(
            pilot,
            lambda: engine_job(desk_engine, second).spec.priority == 1,
            what="priority raised",
        )
        await pilot.press("minus", "minus")
        await until(
            pilot,
            lambda: engine_job(desk_engine, second).spec.priority == -1,
            what="priority lowered",
        )

    run_desk(desk_engine, scenario)


def test_a_key_on_an_arrays_first_job_acts_on_that_row_alone(desk_engine: EngineHandle) -> None:
    """Its id names the whole array (docs/jobs.md): the desk names its row's job by `ID_TASK`."""
    desk_engine.client.request(
        "configure", station={"backend": "sim:dgx-station-a100", "slots": 1, "sample_interval": 0.2}
    )
    blocker, head, task = desk_engine.submit(
        {"name": "blocker", "command": SLEEP},
        {"name": "sw_0", "command": SLEEP, "array_task": 0},
        {"name": "sw_1", "command": SLEEP, "array_task": 1, "array_job": -2},
    )
    desk_engine.wait_state(blocker, "running")
    assert engine_job(desk_engine, task).spec.array_job == head

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, head)
        await pilot.press("h")
        await until(pilot, lambda: engine_job(desk_engine, head).held, what="held")
        assert not engine_job(desk_engine, task).held

    run_desk(desk_engine, scenario)


def test_requeue_a_failed_job(desk_engine: EngineHandle) -> None:
    (job_id,) = desk_engine.submit(
        {"name": "flaky", "command": [sys.executable, "-c", "raise SystemExit(3)"]}
    )
    desk_engine.wait_state(job_id, "failed")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job_id)
        await pilot.press("r")
        await until(
            pilot, lambda: engine_job(desk_engine, job_id).attempts >= 2, what="a second attempt"
        )

    run_desk(desk_engine, scenario)


def test_job_detail_and_log_pane(desk_engine: EngineHandle) -> None:
    (job_id,) = desk_engine.submit(
        {"name": "talker", "command": SLEEP, "gpus": 1, "memory_gb": 4, "sm_pct": 30}
    )
    desk_engine.wait_state(job_id, "running")
    wait_for(
        lambda: "epoch 1/3" in Path(engine_job(desk_engine, job_id).log).read_text(),
        what="the job's first line",
    )

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job_id)
        await pilot.press("enter")
        screen = await until(
            pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, what="the job detail"
        )
        await until(
            pilot,
            lambda: "placed on" in str(screen.query_one("#job-events").render()),
            what="placement events",
        )
        summary = str(screen.query_one("#job-summary").render())
        assert "talker" in summary and "gpu:" in summary
        await until(
            pilot,
            lambda: "epoch 1/3" in str(screen.query_one("#job-log").render()),
            what="the log tail",
        )
        await pilot.press("l")
        log = await until(
            pilot, lambda: isinstance(app.screen, LogScreen) and app.screen, what="the log pane"
        )
        await until(
            pilot,
            lambda: "epoch 1/3" in "\n".join(log.query_one("#log").lines),
            what="the log's lines",
        )
        await pilot.press("escape", "escape")
        assert isinstance(app.screen, QueueScreen)

    run_desk(desk_engine, scenario)


def test_readonly_hides_actions_and_refuses_them(desk_engine: EngineHandle) -> None:
    (job_id,) = desk_engine.submit({"name": "watched", "command": SLEEP})
    desk_engine.wait_state(job_id, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job_id)
        shown = {b.binding.action for b in app.screen.active_bindings.values()}
        assert "filter" in shown and "sort" in shown
        assert not shown & {"cancel_job", "hold_job", "requeue_job", "submit"}
        await pilot.press("c", "y")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert not isinstance(app.screen, SubmitScreen)

    run_desk(desk_engine, scenario, readonly=True)
    assert engine_job(desk_engine, job_id).state == "running"


def test_q_leaves_the_engine_and_its_jobs_running(desk_engine: EngineHandle) -> None:
    (job_id,) = desk_engine.submit({"name": "survivor", "command": SLEEP})
    desk_engine.wait_state(job_id, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await until(pilot, lambda: app.state.counts().get("running") == 1, what="the count")
        await pilot.press("q")

    app = run_desk(desk_engine, scenario)
    assert "the engine goes on with 1 running" in (app.return_value or "")
    assert all(len(line) <= 80 for line in (app.return_value or "").splitlines())
    assert desk_engine.pid is not None
    assert engine_job(desk_engine, job_id).state == "running"


def test_pager_without_a_terminal_falls_back_to_the_log_pane(
    desk_engine: EngineHandle, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PAGER", "cat")
    (job_id,) = desk_engine.submit({"name": "paged", "command": SLEEP})
    desk_engine.wait_state(job_id, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job_id)
        await pilot.press("p")  # headless: the terminal cannot be handed to a pager
        await until(pilot, lambda: isinstance(app.screen, LogScreen), what="the log pane")

    run_desk(desk_engine, scenario)


def test_a_recorded_replay_answers_reads_and_refuses_actions() -> None:
    """The job detail shows the engine's recorded placement reason; a replay takes no action."""
    feed = replay_feed(STATION, readonly_reason="a recorded replay")
    app = DeskApp(feed, refresh_s=0.05)

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.state.updates >= len(feed.frames), what="the replay")
            mig_job = next(j for j in app.state.jobs if j.mode == "mig")
            await select_job(app, pilot, mig_job.id)
            assert app.readonly
            await pilot.press("c")
            await pilot.pause(0.2)
            assert not isinstance(app.screen, ConfirmScreen)
            await pilot.press("enter")
            detail = await until(
                pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, what="the detail"
            )
            await until(
                pilot,
                lambda: "placed on gpu:" in str(detail.query_one("#job-events").render()),
                what="the recorded placement",
            )
            summary = str(detail.query_one("#job-summary").render())
            assert f"on {mig_job.slot} (" in summary and "g." in summary  # the slice's profile

    asyncio.run(main())
