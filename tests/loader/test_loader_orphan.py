"""A producer the engine started (`--managed`) does not outlive its engine for ever
(gpudesk/loader/orphan.py): once its engine is gone it serves on while consumers read it, and
stops, cleaning up as on a normal stop, once none has read it for the grace
(GPUDESK_LOADER_ORPHAN_GRACE_S, 1 s here). Its engine here is engine_stand_in.py, which starts
a real `gpudesk loader serve ... --managed` as the engine does; a test kills it, as an engine
that stopped. It says so while it serves on: in its info file and status, so in `gpudesk loader
status`. A consumer that finds it just before it stops, and says hello just after, is told at
once (gpudesk/loader/handshake.py). And the home's teardown (conftest.py) kills a producer that
had not yet written its info file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
from conftest import EngineHandle, wait_for
from test_loader import FACTORY, GPUDESK, Loaders, assert_exactly_once

from gpudesk.api.models import LoaderView
from gpudesk.hw import process_start
from gpudesk.loader.orphan import ENV_ORPHAN_GRACE_S, orphan_of
from gpudesk.loader.protocol import process_alive, read_info
from gpudesk.loader.status import collect
from gpudesk.paths import Home
from gpudesk.screens.loaders import loader_line

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
        self.started = process_start.started(self.pid)
        self.info_path = home.loader_paths(NAME)[2]

    def alive(self) -> bool:
        return process_alive(self.pid, self.started)

    def ready(self) -> bool:
        assert self.alive(), f"the producer exited: {self.output()}"
        info = read_info(self.info_path)
        return info is not None and info.pid == self.pid and info.preparing is None

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


def loader_status(*options: str) -> str:
    result = subprocess.run(
        [*GPUDESK, "loader", "status", NAME, *options], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    return result.stdout


def engine_view(status: dict[str, Any]) -> dict[str, Any]:
    """A producer's status as an engine's supervisor lists it (services/loaders.py `summary`)."""
    spec = {"name": NAME, "factory": FACTORY, "args": {"size": SIZE}, "batch_size": BATCH}
    spec |= {"workers": 0, "seed": 0, "slots": 16, "shuffle": True, "selection": None}
    spec |= {"selection_target": None, "selection_target_args": {}}
    running = {"running": True, "restarts": 0}
    cpu = {"cpu_s": None, "unshared_cpu_s": None, "saved_cpu_s": None}
    return {"name": NAME, "pid": status["pid"], "spec": spec, **running, **cpu, "status": status}


def test_an_orphaned_producer_says_so_in_its_info_file_and_in_loader_status(
    managed: Any, home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Since when its engine is gone, which engine, and when it stops: 30 s after it noticed
    while no consumer reads it, `grace_s` after the last one leaves while one does."""
    grace = 30.0  # long enough to look at it while no consumer reads it
    monkeypatch.setenv(ENV_ORPHAN_GRACE_S, str(grace))
    producer = managed()
    wait_for(producer.ready, 30, what="the producer to be ready")
    info = read_info(producer.info_path)
    assert "orphaned" not in producer.status() and info is not None and info.orphaned is None
    assert "orphaned" not in loader_status()
    killed = time.time()
    producer.kill_engine()
    info = wait_for(
        lambda: (i := read_info(producer.info_path)) and i.orphaned and i,
        30,
        what="the info file to say it is orphaned",
    )
    assert info.pid == producer.pid and info.stream_next  # the rest is as it was
    orphan = orphan_of({"orphaned": info.orphaned})
    assert orphan is not None and orphan.engine_pid == producer.engine.pid
    assert orphan.grace_s == grace and killed - 0.5 <= orphan.since <= time.time()
    assert orphan.stops_at is not None and 0 < orphan.stops_at - time.time() <= grace
    [entry] = json.loads(loader_status("--json"))["loaders"]
    assert entry["orphaned"]["engine_pid"] == producer.engine.pid, entry
    assert entry["orphaned"]["since"] == orphan.since and entry["orphaned"]["stops_at"]
    # As an engine that adopted it hands it to its clients (a LoaderView's status), and the desk
    view = msgspec.convert(engine_view(entry), LoaderView)
    assert view.status is not None and view.status.orphaned == orphan_of(entry)
    line = loader_line(view).plain
    assert "(orphaned " in line and f"its engine (pid {producer.engine.pid}) is gone" in line
    text = loader_status()
    assert "orphaned " in text and f"its engine (pid {producer.engine.pid}) is gone" in text
    assert "stops in " in text and "unless a consumer connects" in text, text
    # A consumer reading it: no stop while it does, and the grace after it leaves.
    pause = tmp_path / "pause"
    pause.touch()
    loaders = Loaders(home, tmp_path)
    consumer = loaders.thread(NAME, pause_file=pause)
    try:
        wait_for(lambda: consumer.batches() >= 1, 30, what="the consumer to read")
        wait_for(lambda: producer.status()["consumers"], 10, what="the producer to see it")
        [entry] = json.loads(loader_status("--json"))["loaders"]
        assert "stops_at" not in entry["orphaned"] and entry["orphaned"]["since"] == orphan.since
        assert f"it stops {grace:.0f} s after its last consumer leaves" in loader_status()
        pause.unlink()
        consumer.finish(60)
    finally:
        pause.unlink(missing_ok=True)
        loaders.close()
    info = read_info(producer.info_path)
    assert producer.alive() and info is not None and info.stopping is None


def test_a_status_without_the_orphaned_state_reads_as_not_orphaned() -> None:
    """A producer from before the field (or one whose engine is there) says nothing of it; a
    value that is not one is no state either."""
    assert orphan_of(None) is None and orphan_of({"name": NAME, "pid": 1}) is None
    assert orphan_of({"orphaned": "yes"}) is None and orphan_of({"orphaned": {}}) is None
    state = {"engine_pid": 7, "since": 1.0, "grace_s": 60.0}
    assert orphan_of({"orphaned": state}) is not None


def held_consumer(
    home: Home, tmp_path: Path, producer: Managed, fallback: bool = False
) -> tuple[Loaders, Any, Path]:
    """A consumer process that has found `producer` (alive, its info file read) and waits to
    say hello while the returned file exists (loader_consumer.py --hold-hello); `fallback`: it
    may read locally."""
    hold = tmp_path / "hold"
    hold.touch()
    loaders = Loaders(home, tmp_path)
    local = {"size": SIZE, "shape": [2]} if fallback else None
    consumer = loaders.consumer(NAME, hold_hello=hold, fallback=local)
    wait_for(lambda: consumer.events("holding"), 60, what="the consumer to find the producer")
    assert consumer.events("holding")[0]["pid"] == producer.pid
    return loaders, consumer, hold


def told_at_once(consumer: Any, released: float) -> str:
    """It fails within 7 s of being let say hello at `released` (before handshake.py it took
    10 s or more: see each test); its error message."""
    consumer.finish(60, code=3)
    took = time.monotonic() - released
    [error] = consumer.events("error")
    assert took < 7, (took, error)
    assert "Traceback" not in consumer.out.with_suffix(".log").read_text()
    return str(error["message"])


def test_a_consumer_that_says_hello_just_after_an_orphan_stopped_is_told_at_once(
    managed: Any, home: Home, tmp_path: Path
) -> None:
    """It found the orphan alive and says hello just after it stopped (held there as a slow
    `import torch` holds a real one). It waited 10 s for an answer (CONNECT_TIMEOUT_S) and
    failed with "did not answer within 10 s"."""
    producer = managed()
    wait_for(producer.ready, 30, what="the producer to be ready")
    loaders, consumer, hold = held_consumer(home, tmp_path, producer)
    try:
        producer.kill_engine()
        producer.gone()  # no consumer had said hello: it stopped after its grace
        released = time.monotonic()
        hold.unlink()
        message = told_at_once(consumer, released)
    finally:
        loaders.close()
    assert_stopped_as_an_orphan(producer)
    assert f"the producer for {NAME!r} (pid {producer.pid}) stopped as this consumer" in message
    assert "it has exited" in message and "no shared loader" in message, message
    assert "no local fallback was asked for" in message, message


def test_a_consumer_that_may_read_locally_does_so_at_once_when_its_orphan_stopped(
    managed: Any, home: Home, tmp_path: Path
) -> None:
    """The same, with fallback=True and a factory: it reads locally, as it would have had it
    come a moment later and found no producer, and says why. It failed after 10 s."""
    producer = managed()
    wait_for(producer.ready, 30, what="the producer to be ready")
    loaders, consumer, hold = held_consumer(home, tmp_path, producer, fallback=True)
    try:
        producer.kill_engine()
        producer.gone()
        released = time.monotonic()
        hold.unlink()
        began = lambda: consumer.events("ready") or consumer.events("error")  # noqa: E731
        wait_for(began, 30, what="the consumer to begin reading")
        took = time.monotonic() - released
        assert consumer.events("ready"), consumer.events("error")
        [epoch] = consumer.finish(60)
    finally:
        loaders.close()
    assert took < 7 and consumer.events("ready")[0]["mode"] == "local", took
    assert_exactly_once(epoch["ids"], SIZE)
    said = consumer.out.with_suffix(".log").read_text()
    assert f"(pid {producer.pid}) stopped as this consumer connected: it has exited" in said
    assert "; reading locally" in said and "Traceback" not in said, said


def test_a_consumer_that_says_hello_as_its_producer_stops_is_refused_at_once(
    managed: Any, home: Home, tmp_path: Path
) -> None:
    """Its hello comes as the producer, told to stop (SIGTERM, as the engine stops one), has
    not yet closed its socket: the producer is frozen (SIGSTOP) while both reach it. It was
    welcomed, and then lost the ring's socket as the producer closed it ("could not get the
    shared memory ... Connection reset by peer"), or was told bye and waited 30 s for the
    producer to come back (RESUME_S: a managed producer's consumer). It is refused now."""
    producer = managed()
    wait_for(producer.ready, 30, what="the producer to be ready")
    loaders, consumer, hold = held_consumer(home, tmp_path, producer)
    try:
        sockets = len(psutil.Process(consumer.pid).net_connections("unix"))
        os.kill(producer.pid, signal.SIGSTOP)
        try:
            released = time.monotonic()
            hold.unlink()
            # Its control socket connects (the hello waits in it for the frozen producer's
            # greeting), then the producer is told to stop
            wait_for(
                lambda: len(psutil.Process(consumer.pid).net_connections("unix")) > sockets,
                10,
                what="the consumer to connect",
            )
            os.kill(producer.pid, signal.SIGTERM)
        finally:
            os.kill(producer.pid, signal.SIGCONT)
        message = told_at_once(consumer, released)
    finally:
        loaders.close()
    producer.gone()
    assert f"the producer for {NAME!r} (pid {producer.pid}) stopped as this consumer" in message
    assert "it was told to stop" in message or "it has exited" in message, message


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
