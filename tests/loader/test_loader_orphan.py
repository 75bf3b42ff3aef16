"""A producer the engine started (`--managed`) does not outlive its engine for ever
(gpudesk/loader/orphan.py): once its engine is gone it serves on while consumers read it, and
stops, cleaning up as on a normal stop, once none has read it for the grace
(GPUDESK_LOADER_ORPHAN_GRACE_S, 1 s here). Its engine here is engine_stand_in.py, which starts
a real `gpudesk loader serve ... --managed` as the engine does; a test kills it, as an engine
that stopped. And the home's teardown (conftest.py) kills a producer that had not yet written
its info file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import EngineHandle, wait_for
from test_loader import FACTORY, GPUDESK, Loaders, assert_exactly_once

from gpudesk.loader.orphan import ENV_ORPHAN_GRACE_S
from gpudesk.loader.protocol import process_alive, read_info
from gpudesk.loader.status import collect
from gpudesk.paths import Home

STAND_IN = Path(__file__).with_name("engine_stand_in.py")
GRACE_S = 1.0
NAME, SIZE, BATCH = "syn", 64, 8  # 8 batches an epoch
SERVE = [
    *GPUDESK,
    "loader",
    "serve",
    NAME,
    "--dataset",
    FACTORY,
    "--arg",
    f"size={SIZE}",
    "--arg",
    "shape=[2]",
    "--batch-size",
    str(BATCH),
    "--workers",
    "0",
    "--managed",
]


class Managed:
    """A managed producer, started by an engine stand-in that lives until `kill_engine`."""

    def __init__(self, home: Home, tmp: Path, exit_at_once: bool = False) -> None:
        self.home, self.log = home, tmp / "producer.log"
        pidfile = tmp / "producer.pid"
        argv = [sys.executable, str(STAND_IN), str(pidfile), str(self.log)]
        argv += ["--exit"] * exit_at_once + ["--", *SERVE]
        self.engine = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        self.pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), 30, what="pid"))
        self.create_time = psutil.Process(self.pid).create_time()
        self.info_path = home.loader_paths(NAME)[2]

    def alive(self) -> bool:
        return process_alive(self.pid, self.create_time)

    def ready(self) -> bool:
        assert self.alive(), f"the producer exited: {self.output()}"
        info = read_info(self.info_path)
        return bool(info) and info.get("pid") == self.pid and "preparing" not in info

    def status(self) -> dict[str, Any]:
        (entry,) = collect(NAME, self.home)
        assert "error" not in entry, entry
        return entry

    def serves_on_for(self, seconds: float) -> dict[str, Any]:
        """Wait until the producer itself says it has been up `seconds` longer than now (it
        answers status requests all the while); its last status."""
        until = self.status()["uptime_s"] + seconds
        return wait_for(  # type: ignore[return-value]
            lambda: (s := self.status())["uptime_s"] >= until and s, 30, what="the producer"
        )

    def kill_engine(self) -> None:
        self.engine.kill()
        self.engine.wait(10)

    def gone(self, timeout: float = 30.0) -> None:
        wait_for(lambda: not self.alive(), timeout, what="the orphaned producer to stop")

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def close(self) -> None:
        if self.engine.poll() is None:
            self.kill_engine()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.alive():
                os.killpg(self.pid, signal.SIGKILL)  # it leads its session, workers and all


@pytest.fixture
def managed(home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv(ENV_ORPHAN_GRACE_S, str(GRACE_S))
    started: list[Managed] = []

    def start(exit_at_once: bool = False) -> Managed:
        started.append(Managed(home, tmp_path, exit_at_once))
        return started[-1]

    yield start
    for producer in started:
        producer.close()


def assert_stopped_as_an_orphan(producer: Managed) -> None:
    """It said why, and left nothing behind: info file, sockets (its ring is a memfd, gone
    with the process)."""
    output = producer.output()
    assert f"its engine (pid {producer.engine.pid}) is gone" in output, output
    assert f"no consumer has read it for {GRACE_S:.0f} s: stopping" in output, output
    assert "Traceback" not in output, output
    ctl, fd, info = producer.home.loader_paths(NAME)
    assert not info.exists() and not ctl.exists() and not fd.exists()


@pytest.mark.parametrize("engine_ends", ["after", "at-once"])
def test_an_orphaned_producer_with_no_consumer_stops_after_the_grace_and_cleans_up(
    managed: Any, engine_ends: str
) -> None:
    """Its engine stopped once it served ("after"), or 50 ms after starting it, before the
    producer had even looked ("at-once")."""
    producer = managed(exit_at_once=engine_ends == "at-once")
    if engine_ends == "after":
        wait_for(producer.ready, 30, what="the producer to be ready")
        began = time.monotonic()
        producer.kill_engine()
        producer.gone()
        assert time.monotonic() - began >= GRACE_S  # not before its grace
    else:
        producer.engine.wait(10)
        producer.gone(60)  # it starts (imports torch) with no engine from the first
    assert_stopped_as_an_orphan(producer)


def test_a_producer_whose_engine_lives_serves_on_with_no_consumer(managed: Any) -> None:
    producer = managed()
    wait_for(producer.ready, 30, what="the producer to be ready")
    status = producer.serves_on_for(4 * GRACE_S)  # no consumer, its engine there: it stays
    assert status["consumers"] == [] and producer.alive()
    assert "is gone" not in producer.output()


def test_an_orphaned_producer_serves_its_consumers_to_the_end_then_stops(
    managed: Any, home: Home, tmp_path: Path
) -> None:
    producer = managed()
    wait_for(producer.ready, 30, what="the producer to be ready")
    pause = tmp_path / "pause"
    pause.touch()  # the consumer holds its second batch while this exists
    loaders = Loaders(home, tmp_path)
    consumer = loaders.thread(NAME, epochs=2, pause_file=pause, pause_from=1)
    try:
        wait_for(lambda: consumer.batches() >= 2, 30, what="the consumer to read")
        producer.kill_engine()
        wait_for(lambda: "is gone" in producer.output(), 30, what="the producer to notice")
        # Orphaned for 4 graces with a consumer that reads nothing meanwhile: it stays
        status = producer.serves_on_for(4 * GRACE_S)
        assert [c["pid"] for c in status["consumers"]] == [os.getpid()]
        pause.unlink()
        epochs = consumer.finish(60)  # every batch of both epochs, from the orphan
    finally:
        pause.unlink(missing_ok=True)
        loaders.close()
    assert [e["batches"] for e in epochs] == [SIZE // BATCH] * 2
    for epoch in epochs:
        assert_exactly_once(epoch["ids"], SIZE)
        assert epoch["data_ok"]
    producer.gone()  # its consumer said goodbye: no engine, no consumer, so it stops
    assert_stopped_as_an_orphan(producer)


def test_the_homes_teardown_kills_a_producer_that_has_not_written_its_info_file(
    home: Home, tmp_path: Path
) -> None:
    """A producer the engine started just before it stopped: its info file comes seconds later,
    after the teardown looked for it. Here it is held before it imports gpudesk at all (its
    sitecustomize waits on a pipe the test never writes), so it has no info file."""
    hold = tmp_path / "hold"
    hold.mkdir()
    log = home.loader_log("syn")  # the engine opens the producer's log before it launches it
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    (hold / "sitecustomize.py").write_text("import os\nos.read(int(os.environ['HOLD_FD']), 1)\n")
    read_end, write_end = os.pipe()
    env = {
        **os.environ,
        "GPUDESK_HOME": str(home.root),
        "HOLD_FD": str(read_end),
        "PYTHONPATH": os.pathsep.join([str(hold), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        SERVE, env=env, pass_fds=(read_end,), start_new_session=True, stdin=subprocess.DEVNULL
    )
    os.close(read_end)
    try:
        # Popen returns once the exec began; the kernel fills in /proc/PID/cmdline and environ a
        # moment later (a loaded machine showed the gap). An engine's producer is seconds old by
        # the time the teardown looks; this one must be as far as that.
        wait_for(lambda: "serve" in psutil.Process(proc.pid).cmdline(), what="its command line")
        assert not home.loader_dir.exists() or not list(home.loader_dir.glob("*.json"))
        EngineHandle(home).cleanup_jobs()
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        os.close(write_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
