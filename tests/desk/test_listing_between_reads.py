"""A job that changes state between two of a listing's requests, on a real engine: the desk's
live window reads one state per request, so a job running at one request can have finished by
the next (CI once failed on the desk adding the same job's row twice); `gpudesk queue` reads
queued and running jobs in one listing, page after page in id order. Each shows such a job
exactly once, and never loses one that waits or runs throughout. The job is moved on, for
real, right after the listing's first request."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineHandle

from gpudesk.api.client import Client
from gpudesk.cli.queue_listing import fetch_listed
from gpudesk.screens.feed import EngineFeed


def gated(gate: Path, name: str) -> dict:
    return {"name": name, "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done"]}


def moving_on_between_requests(
    client: Client, job: int, move_on: Callable[[], None], when: str
) -> None:
    """Run `move_on` once, right after the client's first `jobs` request is answered
    (`when` "first") or the first whose answer lists `job` ("listed")."""
    real = client.jobs_page
    done = False

    def jobs_page(**args: Any) -> Any:
        nonlocal done
        page = real(**args)
        if not done and (when == "first" or any(j.id == job for j in page.jobs)):
            done = True
            move_on()
        return page

    client.jobs_page = jobs_page  # type: ignore[method-assign]


def ending(engine: EngineHandle, tmp_path: Path) -> tuple[int, Callable[[], None]]:
    """A running job, and what ends it (waiting until the engine has it succeeded)."""
    gate = tmp_path / "gate"
    (job,) = engine.submit(gated(gate, "ends"))
    engine.wait_state(job, "running")

    def move_on() -> None:
        gate.touch()
        engine.wait_state(job, "succeeded")

    return job, move_on


def starting(engine: EngineHandle, tmp_path: Path) -> tuple[int, Callable[[], None]]:
    """A queued job behind one holding the only slot, and what starts it."""
    first, later = tmp_path / "first", tmp_path / "later"
    engine.occupy_the_only_slot(first)
    (job,) = engine.submit(gated(later, "starts"))

    def move_on() -> None:
        first.touch()
        engine.wait_state(job, "running")

    return job, move_on


MOVES = {"ends": ending, "starts": starting}
WHEN = ["first", "listed"]


@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("move", list(MOVES))
def test_the_desk_shows_a_job_that_moved_between_requests_once(
    engine: EngineHandle, tmp_path: Path, move: str, when: str
) -> None:
    job, move_on = MOVES[move](engine, tmp_path)
    feed = EngineFeed(engine.home, interval=0.2)
    try:
        moving_on_between_requests(feed.client, job, move_on, when)
        feed._read_live_window()
        ids = [j.id for j in feed._jobs]
        states = [j.state for j in feed._jobs if j.id == job]
    finally:
        feed.close()
    assert len(ids) == len(set(ids)), f"a job listed twice: {ids}"
    assert states == ["succeeded" if move == "ends" else "running"]


@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("move", list(MOVES))
def test_queue_shows_a_job_that_moved_between_requests_once(
    engine: EngineHandle, tmp_path: Path, move: str, when: str
) -> None:
    """`gpudesk queue` (queued and running jobs): a job that starts meanwhile is listed once,
    as its page saw it (queued, or running); one that ends meanwhile at most once (running)."""
    job, move_on = MOVES[move](engine, tmp_path)
    with Client.attach(engine.home, timeout=10.0) as client:
        moving_on_between_requests(client, job, move_on, when)
        listed = fetch_listed(client, ["running", "queued"], None, 100, None)
    jobs, damaged = listed.jobs, listed.damaged
    ids = [j.id for j in jobs]
    states = [j.state for j in jobs if j.id == job]
    assert len(ids) == len(set(ids)), f"a job listed twice: {ids}"
    assert damaged == []
    if move == "starts":
        assert states in (["queued"], ["running"]), "a job waiting or running throughout is listed"
    else:
        assert states in ([], ["running"])
