"""A profile that asks for a SIMULATED station runs on a station of its own
(gpudesk.api.own_station): that station's engine watches the simulated GPUs whatever the user's
own GPUDESK_BACKEND says, since a run said to be on a SIMULATED station must not place its jobs
on the real GPUs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_a_run_leaves_a_shared_station_as_another_run_set_it_while_its_jobs_run(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two profiles that ask for the same simulated station share it: the second run, finding
    the first one's job on the station's only GPU, neither switches the policy under it nor
    slices that GPU into MIG instances (a job would then run on a slice of a GPU another holds
    whole); it says what it did not apply, and its job runs under the station as it is."""
    monkeypatch.delenv("GPUDESK_BACKEND", raising=False)
    gate = tmp_path / "gate"
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    wait_gate = f"while [ ! -e {gate} ]; do sleep 0.02; done"
    first.write_text(
        '[station]\nbackend = "sim:h100"\npolicy = "exclusive"\n'
        f'[[jobs]]\nname = "long"\ncommand = ["sh", "-c", "{wait_gate}"]\ngpus = 1\n'
    )
    second.write_text(
        '[station]\nbackend = "sim:h100"\npolicy = "mig"\nmig = { 0 = "1g.10gb,1g.10gb" }\n'
        '[[jobs]]\nname = "short"\ncommand = ["true"]\ngpus = 1\nmemory_gb = 5\n'
    )
    own = own_station_home("sim:h100")
    run = [sys.executable, "-m", "gpudesk", "run", "--json"]
    runs = [subprocess.Popen([*run, str(first)], stdout=subprocess.PIPE, text=True)]
    handle: EngineHandle | None = None
    try:
        handle = wait_for(lambda: _listening(own), 30.0, what="the station's own engine")
        (long_id,) = wait_for(
            lambda: [j.id for j in handle.api.jobs() if j.state == "running"],  # type: ignore[union-attr]
            30.0,
            what="the first run's job to run",
        )
        runs.append(subprocess.Popen([*run, str(second)], stdout=subprocess.PIPE, text=True))
        wait_for(lambda: len(handle.api.jobs()) == 2, 30.0, what="the second run's job")  # type: ignore[union-attr]
        station = handle.api.status().station
        assert (station.policy, station.mig) == ("exclusive", None)
        gate.touch()
        outs = [r.communicate(timeout=60)[0] for r in runs]
        assert [r.returncode for r in runs] == [0, 0], outs
    finally:
        gate.touch()
        for r in runs:
            if r.poll() is None:
                r.kill()
        if handle is not None:
            handle.stop()
            handle.client.close()
    notes = json.loads(outs[1])["notes"]
    assert any(
        n.startswith(
            "station: not applied: policy exclusive → mig (the station of its own runs 1 job(s) "
            "of another run under its settings"
        )
        for n in notes
    ), notes
    assert any(
        n.startswith(f"station: not applied: mig 0=1g.10gb,1g.10gb (GPU 0 runs job(s) {long_id}:")
        for n in notes
    ), notes
    (short,) = json.loads(outs[1])["jobs"]
    assert short["state"] == "succeeded"


def _listening(home: Home) -> EngineHandle | None:
    """A handle on the engine of `home` once it answers; None before."""
    from gpudesk.api.connection import EngineNotListening

    if engine_pid(home) is None:
        return None
    handle = EngineHandle(home)
    try:
        handle.api.ping()
    except EngineNotListening:
        handle.client.close()
        return None
    return handle
