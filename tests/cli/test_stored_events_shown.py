"""Events kept in the store as they were written, before the engine spelled out what they quote
(c84e003: an edit's event held a command's ESC as it is): `gpudesk show` and `gpudesk engine
status` spell out their control characters when they print them, so an old row in the store
cannot clear the reader's screen or retitle their terminal."""

from __future__ import annotations

import sqlite3
import time

import msgspec
import pytest
from conftest import EngineHandle, Run

from gpudesk.core.station import STATION_EVENT

RAW = "edited by user: command sleep 1 -> printf \x1b[2J\x1b]0;owned\x07\x9b31m"
SPELLED = r"edited by user: command sleep 1 -> printf \x1b[2J\x1b]0;owned\x07\x9b31m"


def store_raw_event(engine: EngineHandle, kind: str, message: str, job_id: int | None) -> None:
    """A row as an engine before c84e003 stored it: the message as it came."""
    with sqlite3.connect(engine.home.db, timeout=30.0) as conn:
        conn.execute(
            "INSERT INTO events (ts, job_id, attempt, kind, state, message) "
            "VALUES (?, ?, NULL, ?, NULL, ?)",
            (time.time(), job_id, kind, message),
        )


def test_show_spells_out_an_old_events_control_characters(
    engine: EngineHandle, gpudesk: Run
) -> None:
    (job,) = engine.submit({"name": "old", "command": ["true"]})
    engine.wait_state(job, "succeeded")
    store_raw_event(engine, "edit", RAW, job)
    code, out, err = gpudesk("show", str(job))
    assert code == 0, err
    assert SPELLED in out.replace("\n" + " " * 23, " "), out  # its lines as `show` wraps them
    assert not {"\x1b", "\x07", "\x9b"} & set(out), out


def test_engine_status_spells_out_an_old_station_changes_control_characters(
    engine: EngineHandle, gpudesk: Run
) -> None:
    store_raw_event(engine, STATION_EVENT, "slots 2 -> 1 by \x1b]0;owned\x07root", None)
    code, out, err = gpudesk("engine", "status")
    assert code == 0, err
    assert r"slots 2 -> 1 by \x1b]0;owned\x07root" in out, out
    assert not {"\x1b", "\x07"} & set(out), out


def test_engine_status_spells_out_what_it_quotes_of_the_station_and_the_stores(
    engine: EngineHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPUs' and the store's problems quote paths, an MLflow store's error and URI come
    from a member's job: each is spelled out, as another member's terminal shows it."""
    from gpudesk.api.models import TrackingHealth
    from gpudesk.cli.engine import _print_engine_and_station, _print_users_and_stores

    status = engine.api.status()
    odd = msgspec.structs.replace(
        status,
        station=msgspec.structs.replace(status.station, gpu_problem="nvidia-smi \x1b[2J gone"),
        store_problem="the disk of /h\x1b]0;x\x07 is full",
        tracking=[
            TrackingHealth(
                user="ada",
                uid=1000,
                mlflow_uri="http://m\x1b[31m/",
                queued=1,
                error="refused \x9b31m",
                error_since=time.time(),
                dropped=0,
            )
        ],
    )
    _print_engine_and_station(odd, engine.home)
    _print_users_and_stores(odd)
    out = capsys.readouterr().out
    for spelled in (
        r"nvidia-smi \x1b[2J gone",
        r"the disk of /h\x1b]0;x\x07 is full",
        r"http://m\x1b[31m/",
        r"refused \x9b31m",
    ):
        assert spelled in out, out
    assert not {"\x1b", "\x07", "\x9b"} & set(out), out


def test_engine_status_says_what_is_starting_and_a_loader_not_serving(
    engine: EngineHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tracking worker whose owner is being asked of the user database is shown starting, as
    a station's producer is; a producer that is not serving says why. Both in the status text
    and its JSON (the wire's fields)."""
    from gpudesk.api.models import LoaderView, TrackingHealth, to_builtins
    from gpudesk.cli.engine import _print_users_and_stores

    spec = {"name": "syn", "factory": "m:make", "args": {}, "batch_size": 8, "workers": 0}
    spec |= {"seed": 0, "slots": 8, "shuffle": True, "selection": None}
    spec |= {"selection_target": None, "selection_target_args": {}}
    loader = {"pid": None, "spec": spec, "running": True, "restarts": 0, "cpu_s": None}
    loader |= {"unshared_cpu_s": None, "saved_cpu_s": None, "status": None}
    loaders = [
        msgspec.convert({**loader, "name": "syn", "starting": True}, LoaderView),
        msgspec.convert({**loader, "name": "gone", "problem": "it died \x1b[2J"}, LoaderView),
    ]
    store = {"user": "ada", "uid": 1000, "mlflow_uri": "http://m/", "queued": 2, "error": None}
    store |= {"error_since": None, "dropped": 0, "starting": True}
    status = msgspec.structs.replace(
        engine.api.status(), loaders=loaders, tracking=[msgspec.convert(store, TrackingHealth)]
    )
    _print_users_and_stores(status)
    out = capsys.readouterr().out
    assert "mlflow:  http://m/ (ada): its tracking worker is starting; 2 update(s)" in out, out
    assert "loader:  syn: starting" in out and r"loader:  gone: it died \x1b[2J" in out, out
    shown = to_builtins(status)
    assert shown["tracking"][0]["starting"] and shown["loaders"][0]["starting"], shown
    assert shown["loaders"][1]["problem"] == "it died \x1b[2J", shown
