"""The wire contract: a real engine answers every request and emits every event, and each is
decoded strictly into gpudesk.api.models — a field the models do not know, or one they need that
is missing, fails here, before any view reads it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec
import pytest
from conftest import home_at
from scenario import Recording, StationDriver, run_station_scenario, sim_engine

from gpudesk.api import models
from gpudesk.api.client import decode, decode_event, decode_reply
from gpudesk.api.connection import Connection
from gpudesk.api.errors import EngineError
from gpudesk.paths import Home

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_contract")


def engine_ops(home: Home) -> set[str]:
    """The operations the engine itself says it knows (its unknown-op error lists them)."""
    with Connection(home, timeout=5.0) as client, pytest.raises(EngineError) as raised:
        client.request("no-such-op")
    assert raised.value.code == "unknown_op"
    listed = re.search(r"known: (.*)$", str(raised.value))
    assert listed, str(raised.value)
    return {op.strip() for op in listed.group(1).split(",")}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Recording, set[str]]]:
    """The scenario's exchanges and events, recorded once for the module's tests (it runs a
    simulated station's engine through every request: ~17 s on a 2-core machine)."""
    root = tmp_path_factory.mktemp("contract")
    recording = Recording()
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        home_at(root / "home", monkeypatch) as home,
        sim_engine(home),
    ):
        known = engine_ops(home)
        driver = StationDriver(home, recording, root)
        with driver.client.events() as events:

            def collect() -> None:
                while (frames := events.next_raw(0)) is not None:
                    recording.events.append(frames)

            run_station_scenario(driver, collect)
            # the engine's last word: shutdown, decoded like the rest
            driver.client.shutdown()
    yield recording, known  # the engine stopped and the environment restored


@pytest.mark.slow(19)
def test_every_request_and_event_decodes_strictly(
    recorded: tuple[Recording, set[str]],
) -> None:
    recording, known = recorded
    assert known == set(models.REPLY_MODELS), "a new op needs a model and a place here"
    assert recording.ops() >= known, f"not exercised: {sorted(known - recording.ops())}"
    for exchange in recording.exchanges:
        try:
            decode_reply(models.REPLY_MODELS[exchange.op], exchange.reply, exchange.op)
        except EngineError as exc:
            # refusals are replies too (a hold of a running job is an outcome, not an error)
            assert exc.code != "bad_reply", f"{exchange.op} {exchange.args}: {exc}"
    topics = {topic for topic, _ in recording.events}
    assert topics == {b"job", b"telemetry"}
    for topic, body in recording.events:
        decode_event(topic, body)


def test_the_scenario_covers_what_the_desk_shows(recorded: tuple[Recording, set[str]]) -> None:
    """Placements under MPS and on MIG slices, a shared loader read, a failed and a cancelled
    job: the replies carry each of them (so the recorded desk data does too)."""
    recording, _ = recorded
    jobs = [
        job
        for e in recording.exchanges
        if e.op == "jobs"
        for job in decode_reply(models.JobList, e.reply, "jobs").jobs
    ]
    modes = {job.mode for job in jobs}
    assert {"mps", "mig"} <= modes
    assert all(job.mig_slice for job in jobs if job.mode == "mig")
    assert all(job.gpus for job in jobs if job.mode in ("mps", "mig"))
    states = {job.name: job.state for job in jobs}
    assert (states["failing"], states["victim"]) == ("failed", "cancelled")
    statuses = [
        decode_reply(models.StationStatus, e.reply, "status")
        for e in recording.exchanges
        if e.op == "status"
    ]
    assert any(
        loader.status is not None and loader.status.consumers
        for status in statuses
        for loader in status.loaders
    )
    # a grid code's source, for the desk's header and `engine status`
    assert any(status.station.grid_source for status in statuses)
    assert all(s.station.metrics_url for s in statuses[:1])  # the endpoint, on a free port
    applied = [
        decode_reply(models.MigApplyResult, e.reply, "mig_apply")
        for e in recording.exchanges
        if e.op == "mig_apply"
    ]
    assert applied and applied[0].applied and applied[0].simulated
    observed = [
        decode_reply(models.ModelObserveResult, e.reply, "model_observe")
        for e in recording.exchanges
        if e.op == "model_observe"
    ]
    assert observed and observed[0].moved == {"mps_tenant_cost": 1}
    assert any(p.kind == "calibrated" for p in observed[0].params)
    (series,) = [
        shown.series
        for e in recording.exchanges
        if e.op == "show"
        and (shown := decode_reply(models.JobDetail, e.reply, "show")).series is not None
    ]
    # a GPU job of 4 s sampled every 0.2 s: its SM activity, memory and share of the power
    assert series.simulated and series.gpu_sm_pct and series.gpu_memory_mib and series.gpu_power_w
    # a running job's remaining time, and where it came from
    remaining = [
        shown.remaining
        for e in recording.exchanges
        if e.op == "show"
        and (shown := decode_reply(models.JobDetail, e.reply, "show")).remaining is not None
    ]
    assert remaining and remaining[0].source in ("progress", "history", "unknown")


def test_a_missing_or_unknown_field_fails_to_decode() -> None:
    good = msgspec.json.encode({"pid": 1, "version": "0.1.0", "protocol": 1})
    assert decode(models.PingResult, good, "ping").pid == 1
    for bad in (
        {"pid": 1, "version": "0.1.0"},  # missing
        {"pid": 1, "version": "0.1.0", "protocol": 1, "extra": 2},  # unknown
        {"pid": "1", "version": "0.1.0", "protocol": 1},  # wrong type
    ):
        with pytest.raises(EngineError) as raised:
            decode(models.PingResult, msgspec.json.encode(bad), "ping")
        assert raised.value.code == "bad_reply"
