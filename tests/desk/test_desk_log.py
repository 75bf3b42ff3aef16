"""The desk's log pane: a log this user may not read (another user's, on a system engine, seen
from an admin's desk) comes through the engine instead of showing nothing."""

from __future__ import annotations

import pytest
from conftest import EngineHandle

from gpudesk.screens import feed as feed_module
from gpudesk.screens.feed import EngineFeed


def test_the_log_pane_asks_the_engine_for_a_log_it_cannot_read(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = engine.submit({"name": "talk", "command": ["sh", "-c", "seq 1 5000"]})
    engine.wait_state(job_id, "succeeded")
    path = engine.job(job_id).log
    desk = EngineFeed(engine.home)
    try:
        direct = desk.log_tail(job_id, path, 3)
        # as a desk whose user the file refuses (root reads anything, so say it is refused)
        monkeypatch.setattr(feed_module, "_readable", lambda _path: False)
        served = desk.log_tail(job_id, path, 3)
    finally:
        desk.close()
    assert direct == ["4998", "4999", "5000"]
    assert served == direct
