"""What earlier runs measured is kept per owner on a real system engine (root only; see
station_fixture): ada's run of a command in a shared folder places her own next run, never
bob's (tests/engine/test_owner_history.py shows the same without real users)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from station_fixture import Station, make_station


@pytest.fixture
def sim_station() -> Iterator[Station]:
    # a peak that has not grown for 0.5 s is settled (60 s on a station)
    yield from make_station("sim:a100-40gbx1", engine_env={"GPUDESK_HISTORY_SETTLED_S": "0.5"})


def placed_with(station: Station, role: str, job_id: int) -> tuple[str, float]:
    station.wait_state(job_id, "running", "succeeded", "failed", timeout=60)
    demand = station.ok(role, "show", job=job_id)["attempts"][0]["placement"]["demand"]
    return demand["source"], demand["memory_mib"]


def test_one_members_measured_memory_places_her_runs_and_not_anothers(
    sim_station: Station,
) -> None:
    # no hints; the simulated GPU gives such a job 4 GiB plus a 512 MiB context
    job = {"name": "train", "command": ["sleep", "5"], "gpus": 1, "workdir": "/"}
    first = sim_station.submit("ada", job)
    assert placed_with(sim_station, "ada", first)[0] == "default"
    assert sim_station.wait_state(first, "succeeded", "failed", timeout=60)["state"] == "succeeded"
    bobs = sim_station.submit("bob", job)  # the very command, in the same folder
    assert placed_with(sim_station, "bob", bobs)[0] == "default"
    again = sim_station.submit("ada", job)
    assert placed_with(sim_station, "ada", again) == ("history", 4608.0)
    sim_station.ok(None, "cancel", jobs=[bobs, again], grace=0)  # not left to the teardown
