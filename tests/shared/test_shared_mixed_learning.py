"""Learning on a shared station, end to end, where an MPS client shares its GPU with another
member's time-sliced job: the client's progress there is observed as time-slicing, and the MPS
parameters are not moved by it (gpudesk/policy/rates.py `shared_mechanism`: "MPS only where
every tenant is an MPS client"; the engine's tenancies apply it, progress_intervals.py).

How the pair comes about on a real station (no mode is forced per job): the station's policy is
`mps`, and an MPS server serves one user at a time. Ada's watched job starts alone on the only
GPU as an MPS client; bob's job then can only time-slice beside it (FilledStation.foreign_host;
its reason says "time-sliced: GPU 0's MPS server serves ..."). At 20 % SM each, two contexts
time-sliced gain the station ~0.8 GPU, so bob's job is placed there rather than kept waiting.

The jobs are those of tests/shared/test_shared_learning.py (tests/engine/progress_jobs.py): ada's
watched job sleeps 1.5 times as long per step while the flag file that bob's sharer makes
exists. GPUDESK_OBSERVE_MIN_S (test-only) shortens the 60 s an interval must last."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from progress_jobs import SHARER, WATCHED
from station_fixture import Station, make_station
from test_shared_learning import LIGHT, stored_observations

from gpudesk.policy.interference import KeptObservation

MPS_PARAMS = ("mps_tenant_cost", "contention")
SLOWER = 1.5  # ada's watched job beside bob's sharer: 0.67 of its speed alone


@pytest.fixture
def one_gpu_station() -> Iterator[Station]:
    # one GPU: bob's job has nowhere to go but beside ada's MPS client
    yield from make_station("sim:a100-40gb", engine_env={"GPUDESK_OBSERVE_MIN_S": "1"})


def model_params(station: Station) -> dict[str, tuple[float, int]]:
    """The station's interference model as `model show` gives it to a member: each
    parameter's (value, observations)."""
    (a100,) = [m for m in station.ok("bob", "model_show")["models"] if m["gpu_model"]]
    return {p["name"]: (p["value"], p["observations"]) for p in a100["params"]}


@pytest.mark.slow(10)
def test_an_mps_client_beside_another_members_time_sliced_job_teaches_time_slicing(
    one_gpu_station: Station,
) -> None:
    station = one_gpu_station
    station.ok(None, "configure", station={"policy": "mps", "sample_interval": 0.2})
    before = model_params(station)
    flags = Path(tempfile.mkdtemp(prefix="gpudesk-flags-", dir="/tmp"))
    flags.chmod(0o1777)  # bob's sharer makes and removes ada's flag here
    flag, stop = flags / "ada", flags / "stop"
    ada_uid = station.users["ada"].uid

    def shared() -> list[KeptObservation]:
        # what ada's job showed beside a co-tenant (its telemetry alone is mechanism
        # "exclusive"), whatever mechanism it was read as
        return [
            k
            for k in stored_observations(station)
            if k.owner == ada_uid and k.obs.mechanism != "exclusive"
        ]

    def sharer(quiet: bool = True) -> int:
        command = ["python3", "-c", SHARER, str(flag), "2.5"]
        job = {**LIGHT, "name": "bob-sharer", "command": command}
        if quiet:  # its own intervals teach nothing (tests/engine/progress_jobs.py)
            job["env"] = {"SHARER_QUIET": "1"}
        return station.submit("bob", job)

    def succeeded(job: int) -> None:
        done = station.wait_state(job, "succeeded", "failed", timeout=60)
        assert done["state"] == "succeeded", done

    def placement(job: int) -> dict[str, Any]:
        placed: dict[str, Any] = station.ok(None, "show", job=job)["attempts"][0]["placement"]
        return placed

    sharers: list[int] = []
    try:
        # bob's sharer alone first: its SM share alone is then known, which an interval beside
        # it is read with (beside a command whose share is unknown, none is)
        succeeded(sharer(quiet=False))
        command = ["python3", "-c", WATCHED, str(flag), "300", str(SLOWER), str(stop)]
        ada = station.submit("ada", {**LIGHT, "name": "ada-watched", "command": command})
        station.wait_state(ada, "running")
        log = Path(station.job(ada)["log"])
        wait_for(lambda: "progress 75/" in log.read_text(), 30.0, what="ada's time alone")
        # a loaded machine may leave an interval unread, or ada's time alone too short to
        # measure her job's SM share: then bob's sharer runs beside it again
        for _ in range(4):
            sharers.append(sharer())
            succeeded(sharers[-1])
            # the engine closes ada's interval at its next step once the sharer has ended
            with contextlib.suppress(AssertionError):
                wait_for(shared, 5.0, what="an observation of ada's job beside bob's")
            if shared():
                break
        stop.touch()
        succeeded(ada)
    finally:
        for left in flags.iterdir():
            left.unlink()
        flags.rmdir()

    # the pair the engine made: ada's job an MPS client, each of bob's time-sliced beside it,
    # on the same GPU, because ada's MPS server cannot serve him
    placed = placement(ada)
    assert placed["mode"] == "mps", placed
    for job in sharers:
        beside = placement(job)
        assert beside["mode"] == "naive" and beside["gpus"] == placed["gpus"], beside
        assert beside["reason"].startswith("time-sliced: GPU 0's MPS server serves"), beside

    # what ada's job showed there is time-slicing, in the store and in her job's events ...
    kept = shared()
    assert kept, "no observation of ada's job beside bob's"
    assert {k.obs.mechanism for k in kept} == {"naive"}, kept
    events = [e["message"] for e in station.ok("ada", "show", job=ada)["events"]]
    assert any("under naive beside job" in m for m in events), events
    assert not any("under mps beside job" in m for m in events), events
    # ... which moves the switch cost, and leaves the MPS parameters where they were
    after = model_params(station)
    assert after["naive_switch_cost"][1] == len(kept), after
    assert {name: after[name] for name in MPS_PARAMS} == {
        name: before[name] for name in MPS_PARAMS
    }, (before, after)
