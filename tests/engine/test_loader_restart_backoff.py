"""A producer that dies and cannot be started again is retried, backing off, and then given up
with its consumers told (loader/restarts.py); a personal engine that cannot start one says so
where the job's consumer looks, as a station's does.

Before: a restart that could not be launched was never tried again (the producer had no pid, so
the engine's tick took it for one never started), and its resuming consumers waited their 30 s
out ("No producer came back"); a producer restarted five times in 2.5 s was then left down in
silence; and a personal engine that could not launch one left its job's consumer waiting its
60 s. Real daemon, real producer processes, real consumer jobs; the launch is refused for real
(the producer's log is a link, which the engine does not open through).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EngineHandle, short_home, wait_for
from test_loader_engine import DATASET, consumer_job, loader_engine, producer_pid
from test_loader_engine_final import engine_events, supervised

from gpudesk.engine.services.loaders import RESUME_S
from gpudesk.engine.store.database import Store
from gpudesk.loader.consumer import START_WAIT_S
from gpudesk.loader.restarts import FIRST_DELAY_S, RESTART_LIMIT
from gpudesk.screens.loaders import loader_line

__all__ = ["loader_engine"]  # the fixture, used by name

ATTEMPT = "restarting it, attempt "


def refuse_its_log(engine: EngineHandle) -> Path:
    """The producer's log made a link: the engine opens it only as a plain file of its own, so
    every launch of the producer from now on is refused (UnsafePath), with the reason."""
    log = engine.home.loader_log("syn")
    log.unlink(missing_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    log.symlink_to(os.devnull)
    return log


def attempts_at(engine: EngineHandle) -> list[float]:
    """When the engine made each restart attempt of `syn` (its events' times)."""
    store = Store.open(engine.home.db)
    try:
        return [e.ts for e in store.events() if ATTEMPT in e.message and "'syn'" in e.message]
    finally:
        store.close()


def failed(engine: EngineHandle, job_id: int, timeout: float, since: float) -> tuple[float, str]:
    """(seconds from `since` until the job ended, what it said): it must end failed."""
    (done,) = engine.wait_all_done([job_id], timeout=timeout)
    took = time.monotonic() - since
    text = (engine.home.attempt_dir(job_id, 1) / "output.log").read_text()
    said = " ".join(text.split())  # the paragraph, however the output wrapped it
    print(f"to failed: {took:.1f} s")
    assert done.state == "failed", said
    return took, said


@pytest.mark.slow(16)
def test_a_restart_that_cannot_launch_is_retried_backing_off_then_its_consumer_is_told(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    job, out = consumer_job(tmp_path, "long", 10_000, delay=0.02)  # reads until it fails
    (job_id,) = loader_engine.submit(job)
    pid = wait_for(lambda: producer_pid(loader_engine), 30.0, what="the producer to start")
    wait_for(lambda: out.exists() and out.read_text(), 30.0, what="a first epoch")
    refuse_its_log(loader_engine)
    os.kill(pid, signal.SIGKILL)
    took, said = failed(loader_engine, job_id, RESUME_S + 30, since=time.monotonic())
    # told why, before its resume wait ran out (the 7.5 s of delays, and the engine's ticks)
    assert took < RESUME_S - 5, f"the job took {took:.1f} s to fail: {said}"
    assert "the engine did not start the producer of the shared loader 'syn'" in said, said
    assert f"after {RESTART_LIMIT} restarts in a row" in said and "syn.log" in said, said
    assert "No producer came back" not in said, said

    # every restart tried, each after twice the delay of the one before (the first at once)
    times = attempts_at(loader_engine)
    assert len(times) == RESTART_LIMIT, engine_events(loader_engine.home, "syn")
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    for n, gap in enumerate(gaps):
        assert gap >= FIRST_DELAY_S * 2**n - 0.05, gaps
    events = engine_events(loader_engine.home, "syn")
    assert sum("given up" in m for m in events) == 1, events
    # status says why it is not started again, in its view, in JSON and in text
    view = wait_for(lambda: (v := supervised(loader_engine, "syn")).problem and v, 10.0)
    assert not view.running and "registered again" in str(view.problem), view
    assert "(stopped: its producer could not be restarted" in loader_line(view).plain  # the desk
    shown = subprocess.run(
        [sys.executable, "-m", "gpudesk", "engine", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "loader: syn: its producer could not be restarted" in " ".join(shown.split()), shown


@pytest.mark.slow(6)
def test_a_personal_engine_that_cannot_launch_a_producer_fails_its_job_at_once(
    loader_engine: EngineHandle, tmp_path: Path
) -> None:
    """Its first start refused: the job's consumer, which waits START_WAIT_S (60 s) for a
    producer coming up, reads the engine's word at once and fails with the reason."""
    refuse_its_log(loader_engine)
    job, _out = consumer_job(tmp_path, "first", 1)
    began = time.monotonic()
    (job_id,) = loader_engine.submit(job)
    took, said = failed(loader_engine, job_id, START_WAIT_S + 30, since=began)
    assert took < 15.0, f"the job took {took:.1f} s to fail: {said}"
    assert "the engine did not start the producer of the shared loader 'syn'" in said, said
    assert "syn.log" in said and "tries again for the next job" in said, said
    assert "waited" not in said, said
    events = engine_events(loader_engine.home, "syn")
    assert sum("not started" in m for m in events) == 1 and not attempts_at(loader_engine), events


# A dataset module that says why on stderr (the producer's log) and ends the process as it is
# imported: an exit status that is not EXIT_FINAL, so the engine restarts it.
SAYS_WHY_AND_EXITS = (
    "import os, sys\n"
    "print('gd_says_why: cannot reach /data/syn: mount it first', file=sys.stderr, flush=True)\n"
    "os._exit(3)\n"
)


@pytest.mark.slow(14)
def test_a_personal_engines_producer_that_exits_at_once_is_said_at_each_restart_then_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its dataset's module ends the process as it is imported (no word in its info file, an
    exit status that is not EXIT_FINAL: it may be passing, as an OOM kill is): the engine
    restarts it, backing off. From its first restart on (not only once the engine gives up,
    ~9 s later), the job's consumer says on stderr how the producer went down (its exit status
    and its log's last line) and which restart this is, and the engine's status says the same
    as the loader's problem (`engine status`'s `loader:` line). After RESTART_LIMIT the engine
    gives up, and the consumer, waiting START_WAIT_S for it, fails then with the reason."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "gd_says_why.py").write_text(SAYS_WHY_AND_EXITS)
    monkeypatch.setenv("PYTHONPATH", str(modules))  # the engine's, and so its producers'
    with short_home("gd-why-", monkeypatch) as home:
        engine = EngineHandle(home)
        engine.start(slots=2)
        engine.client.request("datasets", datasets=[{**DATASET, "factory": "gd_says_why:m"}])
        job, _out = consumer_job(tmp_path, "first", 1)
        began = time.monotonic()
        (job_id,) = engine.submit(job)
        log = engine.home.attempt_dir(job_id, 1) / "output.log"
        why = "exit 3; its log's last line: gd_says_why: cannot reach /data/syn: mount it first"

        def said() -> str:
            return " ".join(log.read_text().split()) if log.exists() else ""

        # the engine's status, while it restarts it
        view = wait_for(
            lambda: (
                (v := supervised(engine, "syn")).problem and "restarting it (" in v.problem and v
            ),
            30.0,
            what="the loader's problem while it is restarted",
        )
        assert why in str(view.problem), view
        assert f" of {RESTART_LIMIT} at most)" in str(view.problem), view
        # the job's consumer, while it still waits (from the restart after its start-up on)
        wait_for(
            lambda: (
                "the engine restarts it (attempt " in said()
                or engine.job(job_id).state != "running"
            ),
            30.0,
            what="the job's consumer to say the producer is restarted",
        )
        noted = time.monotonic() - began
        assert engine.job(job_id).state == "running", said()
        took, text = failed(engine, job_id, START_WAIT_S + 30, since=began)
        print(f"first note at {noted:.1f} s; failed at {took:.1f} s")
        assert "waiting for the shared loader 'syn': its producer died (pid " in text, text
        assert why in text, text
        counts = [text.count(f"(attempt {n} of {RESTART_LIMIT})") for n in range(1, 6)]
        assert max(counts) == 1 and counts[-1] == 1, text  # each restart said once, the last too
        assert took < START_WAIT_S - 20, f"the job took {took:.1f} s to fail: {text}"
        assert "the engine did not start the producer of the shared loader 'syn'" in text, text
        assert f"after {RESTART_LIMIT} restarts in a row" in text, text  # then given up
        assert "loader register" not in text and "registering the dataset again" in text, text
        assert len(attempts_at(engine)) == RESTART_LIMIT
