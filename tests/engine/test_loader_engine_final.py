"""A producer that cannot work with its settings fails its consumers at once, and the engine does
not restart it (issue 40, item 5).

Before, a loader socket path too long for a Unix socket made the engine restart the producer
five times, and the job's consumer waited START_WAIT_S (60 s) before failing with "no shared
loader is running". Now the producer says why in its info file and exits EXIT_FINAL; the
consumer stops waiting and fails with that reason; the engine starts it once, records why, and
starts it again only once the dataset is registered again. Real daemon, real producer
processes, real consumer jobs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineHandle, home_at, short_home, wait_for
from test_loader_engine import CONSUMER, DATASET

from gpudesk.api.models import LoaderView
from gpudesk.core.datasets import DatasetSpec
from gpudesk.engine.services import loaders as loaders_module
from gpudesk.engine.services.loaders import LoaderSupervisor
from gpudesk.engine.store.database import Store
from gpudesk.loader.consumer import START_WAIT_S
from gpudesk.loader.producer_config import MAX_SOCKET_PATH
from gpudesk.loader.protocol import EXIT_FINAL
from gpudesk.paths import Home

# A home of 80 characters keeps the engine's own socket inside it (paths.py allows 100 for
# run/control.sock), and a loader name of 21 takes its socket past MAX_SOCKET_PATH.
HOME_CHARS = 80
LONG_NAME = "too-long-for-a-socket"
FAST_S = 10.0  # "at once": well under START_WAIT_S, with room for a loaded machine


@pytest.fixture
def long_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    monkeypatch.setenv("GPUDESK_LOADER_GRACE_S", "1")
    short = Path(tempfile.mkdtemp(prefix="gd-final-"))
    try:
        with home_at(short / ("h" * (HOME_CHARS - len(str(short)) - 1)), monkeypatch) as home:
            yield home
    finally:
        shutil.rmtree(short, ignore_errors=True)


def start(home: Home, dataset: dict) -> EngineHandle:
    handle = EngineHandle(home)
    handle.start(slots=2)
    handle.client.request("datasets", datasets=[dataset])
    return handle


def consumer(tmp_path: Path, name: str) -> dict:
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    out = tmp_path / f"{name}.jsonl"
    return {
        "name": "reader",
        "command": [sys.executable, str(script), name, "1", str(out), "0"],
        "dataset": name,
    }


def run_one(engine: EngineHandle, job: dict) -> tuple[str, float, str]:
    """The job's end state, the seconds from its submission to its end, and its output."""
    began = time.monotonic()
    (job_id,) = engine.submit(job)
    (done,) = engine.wait_all_done([job_id], timeout=START_WAIT_S + 30)
    took = time.monotonic() - began
    output = (engine.home.attempt_dir(job_id, 1) / "output.log").read_text()
    return done.state, took, output


def engine_events(home: Home, name: str) -> list[str]:
    store = Store.open(home.db)
    try:
        return [e.message for e in store.events() if f"shared loader {name!r}" in e.message]
    finally:
        store.close()


def starts(home: Home, name: str) -> int:
    return sum(" started (pid " in m for m in engine_events(home, name))


def supervised(engine: EngineHandle, name: str) -> LoaderView:
    """The loader as the engine supervises it: its latest producer's pid, running or not."""
    (view,) = [v for v in engine.api.status().loaders if v.name == name]
    return view


def final_event(home: Home, name: str) -> str | None:
    return next((m for m in engine_events(home, name) if "failed for good" in m), None)


@pytest.mark.slow(12)
def test_a_socket_path_too_long_fails_the_job_at_once_and_is_not_restarted(
    long_home: Home, tmp_path: Path
) -> None:
    assert long_home.sockets_inside  # the engine's socket fits, the loader's does not
    assert len(str(long_home.loader_paths(LONG_NAME)[0])) > MAX_SOCKET_PATH
    engine = start(long_home, {**DATASET, "name": LONG_NAME})
    log = long_home.loader_log(LONG_NAME)

    state, took, output = run_one(engine, consumer(tmp_path, LONG_NAME))
    assert state == "failed"
    assert took < FAST_S, f"the job took {took:.1f} s to fail"
    message = " ".join(output.split())  # the paragraph, however the output wrapped it
    assert "cannot open its socket" in message and f"at most {MAX_SOCKET_PATH}" in message
    assert "GPUDESK_HOME" in message and str(log) in message
    assert "Traceback" not in log.read_text()

    event = wait_for(lambda: final_event(long_home, LONG_NAME), 10.0, what="the engine's event")
    assert "cannot open its socket" in str(event)
    assert starts(long_home, LONG_NAME) == 1  # recorded with it: no restart came before
    failed = supervised(engine, LONG_NAME)
    assert not failed.running and failed.pid is not None
    # A second job on the dataset: told at once, the producer not started again (the engine's
    # view, asked after the job's launch, still has the failed one).
    state, took, output = run_one(engine, consumer(tmp_path, LONG_NAME))
    assert state == "failed" and took < FAST_S and "cannot open its socket" in output
    assert supervised(engine, LONG_NAME) == failed
    assert log.read_text().count("error:") == 1  # one producer ran, and said why once

    # Registering the dataset again is the user's retry: the engine starts it once more.
    engine.client.request("datasets", datasets=[{**DATASET, "name": LONG_NAME}])
    state, took, _ = run_one(engine, consumer(tmp_path, LONG_NAME))
    assert state == "failed" and took < FAST_S
    assert supervised(engine, LONG_NAME).pid != failed.pid
    wait_for(lambda: starts(long_home, LONG_NAME) == 2, 10.0, what="the second start's event")


@pytest.mark.slow(8)
def test_a_factory_that_cannot_be_imported_fails_the_job_at_once_and_is_not_restarted(
    long_home: Home, tmp_path: Path
) -> None:
    name = "syn"
    engine = start(long_home, {**DATASET, "name": name, "factory": "no_such_module:make"})
    state, took, output = run_one(engine, consumer(tmp_path, name))
    assert state == "failed"
    assert took < FAST_S, f"the job took {took:.1f} s to fail"
    assert "cannot import the dataset module 'no_such_module'" in output
    event = wait_for(lambda: final_event(long_home, name), 10.0, what="the engine's event")
    assert "no_such_module" in str(event)
    assert starts(long_home, name) == 1
    assert not any("restarting it" in m for m in engine_events(long_home, name))


def test_registering_a_dataset_again_retries_it_and_its_selections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The supervisor alone, with real producer processes: a failure for good is noted once
    per loader, its variants' (`NAME.PRESET`) too, and registering the dataset again (the
    user's retry) clears them all, so the next job needing one starts it afresh."""
    with short_home("gd-final-", monkeypatch) as home:
        retried(home.ensure())


def retried(home: Home) -> None:
    loaders = LoaderSupervisor(home)
    spec = DatasetSpec.from_dict({**DATASET, "factory": "no_such_module:make"})
    loaders.register([spec])
    variant = loaders.loader_for("syn", "random-25")
    assert variant == "syn.random-25"
    names = {"syn", variant}
    for name in names:
        loaders.ensure(name)
    first = {name: loaders.producers[name].process for name in names}
    for process in first.values():
        assert process is not None and process.wait(timeout=60) == EXIT_FINAL
    loaders.tick(names)
    assert set(loaders.failed) == names
    assert all("no_such_module" in why for why in loaders.failed.values()), loaders.failed
    assert sum("failed for good" in event for event in loaders.events) == 2
    loaders.tick(names)
    loaders.ensure("syn")
    assert not loaders.producers and sum("failed for good" in e for e in loaders.events) == 2
    assert [s.running for s in loaders.summary()] == [False, False]

    loaders.register([spec])
    assert not loaders.failed
    loaders.ensure(variant)
    again = loaders.producers[variant].process
    assert again is not None and again is not first[variant]
    assert again.wait(timeout=60) == EXIT_FINAL


def test_a_staging_producer_is_started_on_its_first_jobs_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dataset served with device = "cuda" stages on one GPU: the producer's only visible
    device is the GPU of the job that started it (its CUDA_VISIBLE_DEVICES entry, a UUID or a
    MIG device's); a "cpu" dataset's producer is given none."""
    # What each producer was started with, as the engine handed it to the kernel: a staging
    # producer on this machine (no CUDA) may end before its /proc/PID/environ could be read.
    started: dict[str, dict[str, str]] = {}
    real_popen = subprocess.Popen

    def recording_popen(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        started[argv[argv.index("serve") + 1]] = kwargs["env"]
        return real_popen(argv, **kwargs)

    monkeypatch.setattr(loaders_module.subprocess, "Popen", recording_popen)
    with short_home("gd-gpu-", monkeypatch) as home:
        loaders = LoaderSupervisor(home.ensure())
        staged = DatasetSpec.from_dict({**DATASET, "name": "st", "device": "cuda"})
        plain = DatasetSpec.from_dict({**DATASET, "name": "pl"})
        loaders.register([staged, plain])
        try:
            for name in ("st", "pl"):
                loaders.job_env(name, None, "GPU-6f3e1b2a-0000-4000-8000-000000000001")
            assert loaders.producers["st"].pid and loaders.producers["pl"].pid  # both started
        finally:
            loaders.stop_all_but(set(), "the test is over")
        gpu = "GPU-6f3e1b2a-0000-4000-8000-000000000001"
        assert [env.get("CUDA_VISIBLE_DEVICES") for env in started.values()] == [gpu, None]
