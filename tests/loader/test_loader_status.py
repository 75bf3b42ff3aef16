"""`gpudesk loader status` (and the engine's ask, `loader.status.collect`) on a producer that stops
or exits while it is being asked.

A producer says it stops in its info file before its sockets close, and its last moments answer
no status request (`producer_info.say_stopping` answers hellos only). A status request that came
just then used to wait out STATUS_TIMEOUT_MS and list the producer as one that "did not answer
within 1 s", a stuck producer's words. The producer here is the test's own control socket (a
ROUTER, as the real one's), which receives the request and never answers, with a real process's
pid in its info file: what the collector sees of a producer stopping as it is asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from gpudesk.hw import process_start
from gpudesk.loader.protocol import STEP_MS, ProducerInfo, write_info
from gpudesk.loader.status import STATUS_TIMEOUT_MS, collect
from gpudesk.paths import Home

NAME = "syn"
# "at once": a few of the collector's steps, well under STATUS_TIMEOUT_MS (assumption: a loaded
# test machine answers a step within twice its length)
AT_ONCE_S = 4 * STEP_MS / 1000


@pytest.fixture
def producer(home: Home) -> Iterator[tuple[Home, subprocess.Popen[bytes], zmq.Socket[bytes]]]:
    """A stand-in producer: a live process named in the info file, the control socket bound."""
    home.ensure()
    home.private_subdir(home.loader_dir)
    control, _, info_path = home.loader_paths(NAME)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    write_info(info_path, info_of(proc))
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"ipc://{control}")
    try:
        yield home, proc, sock
    finally:
        sock.close()
        proc.kill()
        proc.wait()


def info_of(proc: subprocess.Popen[bytes], stopping: str | None = None) -> ProducerInfo:
    started = process_start.started(proc.pid)
    return ProducerInfo(name=NAME, pid=proc.pid, started=started, stopping=stopping)


def asked_while(
    home: Home, sock: zmq.Socket[bytes], then: Callable[[], None]
) -> tuple[dict[str, Any], float]:
    """`collect` in a thread; once its request has reached the socket, `then` happens (the
    request is never answered). Its entry for the producer, and how long it took after."""
    listed: list[list[dict[str, Any]]] = []
    asker = threading.Thread(target=lambda: listed.append(collect(NAME, home)))
    asker.start()
    assert sock.poll(10_000), "the status request never came"
    _, raw = sock.recv_multipart()
    assert json.loads(raw)["type"] == "status"
    began = time.monotonic()
    then()
    asker.join(30)
    took = time.monotonic() - began
    (entry,) = listed[0]
    return entry, took


def test_a_producer_that_stops_as_it_is_asked_is_listed_as_stopping_at_once(
    producer: tuple[Home, subprocess.Popen[bytes], zmq.Socket[bytes]],
) -> None:
    home, proc, sock = producer
    info_path = home.loader_paths(NAME)[2]
    why = "no consumer came for 120 s (--idle-exit)"
    stops = lambda: write_info(info_path, info_of(proc, stopping=why))  # noqa: E731
    entry, took = asked_while(home, sock, stops)
    assert entry == {"name": NAME, "pid": proc.pid, "stopping": why}
    assert took < AT_ONCE_S < STATUS_TIMEOUT_MS / 1000, took


def test_a_producer_that_exits_as_it_is_asked_is_listed_as_not_running_at_once(
    producer: tuple[Home, subprocess.Popen[bytes], zmq.Socket[bytes]],
) -> None:
    home, proc, sock = producer

    def exits() -> None:
        proc.kill()
        proc.wait()

    entry, took = asked_while(home, sock, exits)
    assert entry == {"name": NAME, "error": f"its producer (pid {proc.pid}) is not running"}
    assert took < AT_ONCE_S, took


def test_a_live_producer_that_does_not_answer_is_still_listed_as_such(
    producer: tuple[Home, subprocess.Popen[bytes], zmq.Socket[bytes]],
) -> None:
    home, _, sock = producer
    entry, took = asked_while(home, sock, lambda: None)
    assert entry == {"name": NAME, "error": "its producer did not answer within 1 s"}
    assert took >= STATUS_TIMEOUT_MS / 1000 - AT_ONCE_S, took


def test_the_engines_word_beside_the_info_files_is_no_producer(home: Home) -> None:
    """What a personal engine says of a producer it did not start, gave up or restarts is in
    its loaders folder beside the info files (`station_access.not_started_path`): `loader
    status` lists producers, not that word (as on a station, where it is no dataset's folder)."""
    from gpudesk.loader.restarts import RestartNote
    from gpudesk.loader.station_access import not_started_path, say_not_started, say_restarting

    home.ensure()
    home.private_subdir(home.loader_dir)
    say_not_started(home, NAME, "its factory could not be imported")
    assert not_started_path(home, NAME).exists()
    assert collect(NAME, home) == [] and collect(None, home) == []
    say_restarting(home, "other", RestartNote("died (pid 9, exit 1)", 1))
    assert collect(None, home) == []


def test_an_info_file_that_is_not_one_is_listed_as_such(home: Home) -> None:
    """One a reader takes for none (not JSON, a field of another type) while it is there: the
    listing says so, rather than leaving the loader out as if it had never run."""
    from gpudesk.loader.status import DAMAGED

    home.ensure()
    home.private_subdir(home.loader_dir)
    info_path = home.loader_paths(NAME)[2]
    for text in ("{not json", '{"pid": "twelve"}'):
        info_path.write_text(text)
        assert collect(NAME, home) == [{"name": NAME, "error": DAMAGED}], text
    assert collect("other", home) == []
    info_path.unlink()
    assert collect(NAME, home) == []  # none there: no producer ever ran
