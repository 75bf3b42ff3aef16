"""A profile that asks for a SIMULATED station runs on a station of its own
(gpudesk.api.own_station): that station's engine watches the simulated GPUs whatever the user's
own GPUDESK_BACKEND says, since a run said to be on a SIMULATED station must not place its jobs
on the real GPUs."""

from __future__ import annotations

import pytest
from conftest import EngineHandle, wait_for

from gpudesk.api.connection import engine_pid
from gpudesk.api.own_station import own_station, own_station_home, simulated_backend
from gpudesk.paths import Home
from gpudesk.profile import load_profile


def test_the_station_of_its_own_is_simulated_whatever_gpudesk_backend_says(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the user's engine reads the real GPUs (here: none, the backend every machine has)
    monkeypatch.setenv("GPUDESK_BACKEND", "none")
    profile = load_profile("dgx-station-sweep")
    backend = simulated_backend(profile)
    assert backend == "sim:dgx-station-a100"
    own = own_station_home(backend)
    try:
        with own_station(profile, backend) as client:
            station = client.status().station
            assert (station.effective_backend, station.simulated, station.gpus) == (
                backend,
                True,
                4,
            )
            # asked again for the profile's settings, as `gpudesk run` does, it stays simulated
            result = client.configure(profile.station, profile.station_keys)
            assert result.station.backend == backend and not result.not_applied
        # stopped on the way out: it ran no job
        wait_for(lambda: engine_pid(own) is None, 10.0, what="the station's own engine to stop")
    finally:
        handle = EngineHandle(own)
        handle.stop()
        handle.client.close()


def test_a_simulated_profile_applied_to_the_users_engine_leaves_its_backend(
    engine: EngineHandle,
) -> None:
    """`gpudesk select compare --apply-station` applies a profile's [station] to the user's own
    engine: a simulated backend is not among what it sends, and the run says so."""
    from gpudesk.api.client import Client
    from gpudesk.api.submit import configure_station

    profile = load_profile("dgx-station-sweep")
    with Client.connect(engine.home) as client:
        applied = configure_station(client, profile, apply=True)
        weighed = configure_station(client, profile, how_to_apply="--apply-station applies it")
        assert client.status().station.effective_backend == "none"
    assert applied is not None and weighed is not None
    for report in (applied, weighed):
        assert "backend" not in [c.key for c in report.result.changes], report
        assert report.lines()[-1].startswith(
            "station: not applied: backend sim:dgx-station-a100 (the engine runs none; a profile "
            "never sets a SIMULATED backend on it"
        ), report.lines()
    # the rest of the table is the profile's: its policy and sampling applied
    assert engine.client.request("status")["station"]["sample_interval"] == 0.5
