"""`p` (the job's log in $PAGER) where the pager cannot run: the desk comes back, says why and
shows the log pane. It hung for good when the pager could not be started: Textual's
`App.suspend` skips resuming the terminal when its block raises, so the desk stayed off the
alternate screen with the terminal in cooked mode, deaf to every key but Ctrl-C. Run as the real
`gpudesk` on a real pseudo-terminal (the pilot's headless driver cannot suspend at all), and in
the pilot for what the notice says."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineHandle
from terminal import TerminalSession
from test_desk_actions import SLEEP, notices, run_desk, select_job, until

from gpudesk.screens.app import DeskApp
from gpudesk.screens.job import LogScreen
from gpudesk.screens.pager import NoPager, pager_command


def _desk_on_a_terminal(pager: str) -> TerminalSession:
    env = {**os.environ, "TERM": "xterm-256color", "PAGER": pager}
    entry = "from gpudesk.cli.entry import main; main()"
    return TerminalSession([sys.executable, "-c", entry], env)


@pytest.mark.parametrize(
    ("pager", "said"),
    [
        ("nosuchpager", b"nosuchpager"),
        ("unrunnable", b"Exec"),
        ("false", b"status"),
        # a Ctrl-C, as the terminal sends it: to every process of its foreground group
        ("sh -c 'kill -INT 0'", b"SIGINT"),
    ],
    ids=["not on PATH", "fails once started", "exits non-zero", "Ctrl-C"],
)
def test_a_pager_that_cannot_run_leaves_the_desk_working(
    sim_engine: EngineHandle, tmp_path: Path, pager: str, said: bytes
) -> None:
    """Not on PATH (the default `less` where less is not installed): said before the desk
    hands the terminal over. Found but failing to start (a file the system cannot run), or
    failing once started, or interrupted: the desk takes the terminal back all the same."""
    if pager == "unrunnable":
        unrunnable = tmp_path / "pager"
        unrunnable.write_bytes(b"\0\1\2 not a program")
        unrunnable.chmod(0o755)
        pager = str(unrunnable)
    (job_id,) = sim_engine.submit({"name": "paged", "command": SLEEP})
    sim_engine.wait_state(job_id, "running")
    desk = _desk_on_a_terminal(pager)
    try:
        drawn = desk.wait_for(b"paged")
        desk.type(b"2")
        drawn = desk.wait_for(b"running", since=drawn)  # the queue: its cursor on the job
        desk.type(b"p")
        desk.wait_for(f"log of job {job_id}".encode(), since=drawn)
        desk.wait_for(said, since=drawn)  # a word of the notice that no wrapping of it splits
        # `q` leaves the log pane, then closes the desk (keys a hung desk would only echo)
        assert desk.exit_code(keys=b"q") == 0
    finally:
        desk.close()
    assert b"desk closed" in desk.seen


def test_the_notice_names_the_pager_that_is_not_on_path(
    sim_engine: EngineHandle, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PAGER", "nosuchpager -R")
    (job_id,) = sim_engine.submit({"name": "paged", "command": SLEEP})
    sim_engine.wait_state(job_id, "running")

    async def scenario(app: DeskApp, pilot: Any) -> None:
        await select_job(app, pilot, job_id)
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, LogScreen), what="the log pane")
        assert any("nosuchpager is not on PATH" in notice for notice in notices(app))

    run_desk(sim_engine, scenario)


def test_the_pager_is_found_before_the_terminal_is_handed_over(tmp_path: Path) -> None:
    assert pager_command("cat -n") == [shutil.which("cat"), "-n"]
    if shutil.which("less"):  # unset or empty: less, as git and man take it
        assert pager_command("") == [shutil.which("less"), "-R", "+G"]
    else:
        with pytest.raises(NoPager, match="less is not on PATH"):
            pager_command("")
    for setting, why in [
        ("nosuchpager -R", "nosuchpager is not on PATH"),
        (f"{tmp_path}/pager", f"{tmp_path}/pager is not an executable file"),
        ("less 'unclosed", "$PAGER cannot be read (No closing quotation)"),
    ]:
        with pytest.raises(NoPager) as refused:
            pager_command(setting)
        assert str(refused.value) == why


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["TERM", "HUP"])
def test_a_desk_ended_by_a_signal_takes_the_terminal_back(
    sim_engine: EngineHandle, signum: int
) -> None:
    """`kill` (SIGTERM) or a dropped SSH link (SIGHUP) ended the desk at once, leaving the
    terminal in the alternate screen with mouse reporting on. It now closes as on `q`: it
    leaves the alternate screen, and exits 128 + the signal's number, as a shell expects."""
    (job_id,) = sim_engine.submit({"name": "watched", "command": SLEEP})
    sim_engine.wait_state(job_id, "running")
    desk = _desk_on_a_terminal("cat")
    try:
        drawn = desk.wait_for(b"watched")
        assert b"\x1b[?1049h" in desk.seen[:drawn]  # it is in the alternate screen
        desk.proc.send_signal(signum)
        assert desk.exit_code() == 128 + signum
    finally:
        desk.close()
    left = desk.seen[drawn:]
    assert b"\x1b[?1049l" in left and b"\x1b[?1000l" in left, left[-500:]
