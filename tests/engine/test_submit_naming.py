"""A submit names its owner off the engine's loop (engine/requests/submission.py, `_named`), on
a real daemon: the owner is still stored by name, and that lookup is counted against no one's
limit of slow requests (offloop.PER_USER, 2): a user's submits read in one turn are all queued.

A user database that does not answer is tests/shared/test_slow_user_database.py's (root)."""

from __future__ import annotations

import os

from conftest import EngineHandle
from test_job_control_slices import RawClient, engine_stopped

from gpudesk.engine.offloop import PER_USER
from gpudesk.paths import user_name


def test_a_users_submits_read_in_one_turn_are_all_queued_each_by_name(
    engine: EngineHandle,
) -> None:
    clients = [RawClient(engine.home) for _ in range(PER_USER + 2)]
    job = {"name": "n", "command": ["true"], "workdir": str(engine.home.root)}
    assert engine.pid is not None
    with engine_stopped(engine.pid):
        for client in clients:
            client.send("submit", jobs=[job], hold=True)
    ids = [client.reply()["ids"][0] for client in clients]  # none refused as too many at once
    assert len(set(ids)) == len(clients)
    assert {engine.job(i).user for i in ids} == {user_name(os.getuid())}
    for client in clients:
        client.close()
