"""The station fixture's teardown kills what a suspended job leaves (root only; real users, a
real system engine: station_fixture)."""

from __future__ import annotations

import psutil
import pytest
from conftest import wait_for
from station_fixture import make_station


def test_a_suspended_job_left_by_a_test_is_killed_and_named_at_teardown() -> None:
    """A suspended job's root wrapper and its owner's processes are stopped: they outlive the
    engine (and the owner's `pkill` spares the root wrapper), so the next test's member given
    the same uid would find them. The teardown kills them and says which they were."""
    made = make_station()
    station = next(made)
    job = {"name": "long", "command": ["sh", "-c", "sleep 600 & sleep 600"], "workdir": "/tmp"}
    job_id = station.submit("ada", job)
    pgid = station.wait_state(job_id, "running")["pgid"]
    ada = station.users["ada"]

    def adas() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["uids"]) if p.info["uids"].real == ada.uid]

    # "running" is said once the wrapper is spawned; it checks her in the user database before
    # it starts her command: wait for the command's processes (sh and its two sleeps)
    wait_for(lambda: len(adas()) == 3, 30.0, what="the job's command to start")
    assert station.ok("ada", "suspend", jobs=[job_id])["results"][0]["ok"]
    station.wait_state(job_id, "suspended")
    stopped = adas()
    assert len(stopped) == 3, stopped
    wrapper = psutil.Process(pgid)  # the job's group leader: root's wrapper
    assert wrapper.uids().real == 0 and wrapper.status() == psutil.STATUS_STOPPED
    with pytest.warns(UserWarning, match="were left when its engine stopped") as said:
        made.close()  # the test returns: its fixture's teardown
    warned = str(said[0].message)
    assert all(f"{proc.pid} stopped" in warned for proc in [wrapper, *stopped]), warned
    for proc in [wrapper, *stopped]:
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE, proc
