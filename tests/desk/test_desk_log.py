"""The desk's log pane: a log this user may not read (another user's, on a system engine, seen
from an admin's desk) comes through the engine instead of showing nothing."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from conftest import EngineHandle
from test_desk_actions import run_desk, until
from textual.widgets import Log

from gpudesk.screens import feed as feed_module
from gpudesk.screens.app import DeskApp
from gpudesk.screens.feed import EngineFeed
from gpudesk.screens.job import LogScreen
from gpudesk.text import printable


def read_and_served(
    engine: EngineHandle, job_id: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], list[str]]:
    """The job's last 3 log lines as the desk reads them itself, then as the engine serves
    them to a desk whose user the file refuses (root reads anything, so it is said refused)."""
    path = engine.job(job_id).log
    desk = EngineFeed(engine.home)
    try:
        direct = desk.log_tail(job_id, path, 3)
        monkeypatch.setattr(feed_module, "_readable", lambda _path: False)
        return direct, desk.log_tail(job_id, path, 3)
    finally:
        desk.close()


def test_the_log_pane_asks_the_engine_for_a_log_it_cannot_read(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = engine.submit({"name": "talk", "command": ["sh", "-c", "seq 1 5000"]})
    engine.wait_state(job_id, "succeeded")
    direct, served = read_and_served(engine, job_id, monkeypatch)
    assert direct == ["4998", "4999", "5000"]
    assert served == direct


# What the walk-through's job printed: an escape sequence, then two bytes that are not UTF-8.
NOT_UTF8 = ["printf", r"\033[31mRED\377\376\n"]
SPELLED = r"\x1b[31mRED\xff\xfe"  # as `gpudesk logs` spells it on a terminal


def test_the_log_tail_spells_bytes_that_are_not_utf8_as_gpudesk_logs_does(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job detail's log tail, read here or through the engine: `\\xff`, not U+FFFD."""
    (job_id,) = engine.submit({"name": "logesc", "command": NOT_UTF8})
    engine.wait_state(job_id, "succeeded")
    logs = subprocess.run(
        [sys.executable, "-m", "gpudesk", "logs", str(job_id)], capture_output=True, timeout=60
    )
    assert printable(logs.stdout.decode("utf-8", "backslashreplace")).strip() == SPELLED
    direct, served = read_and_served(engine, job_id, monkeypatch)
    assert direct == served == [SPELLED]


def test_the_log_pane_spells_bytes_that_are_not_utf8_as_gpudesk_logs_does(
    sim_engine: EngineHandle,
) -> None:
    (job_id,) = sim_engine.submit({"name": "logesc", "command": NOT_UTF8})
    job = sim_engine.wait_state(job_id, "succeeded")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        app.open_log(job)
        pane = await until(
            pilot, lambda: isinstance(app.screen, LogScreen) and app.screen, what="the log pane"
        )
        logs = await until(pilot, lambda: pane.query(Log), what="the pane composed")
        await until(pilot, lambda: logs.first().lines, what="the log's line")
        assert logs.first().lines[0] == SPELLED

    run_desk(sim_engine, scenario)
