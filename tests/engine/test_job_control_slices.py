"""A request naming many jobs is acted on a slice a turn of the engine's loop
(engine/requests/job_actions.py, SLICE_JOBS): another client's request is answered, and
placement runs, between two slices; placement never starts a job the request named and has not
acted on yet; a later request naming the same jobs waits for it; the outcomes are what one
request acting on all at once gave.

On a real daemon. What lands between two slices is read from the store's events, whose ids are
the order the engine wrote them: a request acted on all at once (before slices) writes its
events with nothing between them. To make the engine read two clients' requests in one turn,
it is stopped (SIGSTOP) while they are sent, then continued: it reads them in the order their
connections were accepted, so nothing here depends on timing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import EngineHandle, wait_for

from gpudesk.core import protocol
from gpudesk.core.jobs import JobSpec
from gpudesk.paths import Home

SLICE = 250  # engine/offloop.py's SLICE_JOBS
NAMED = 3 * SLICE + 10  # four slices


class RawClient:
    """A connection of its own, which sends a request without waiting for its reply."""

    def __init__(self, home: Home) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(str(home.control_socket))
        self.send("ping")
        self.reply()  # accepted by the engine, after the connections made before it

    def send(self, op: str, **args: Any) -> None:
        self.sock.sendall(protocol.frame(protocol.Request(op=op, args=args, id=1).encode()))

    def reply(self) -> dict[str, Any]:
        header = self._exactly(protocol.FRAME_HEADER.size)
        (length,) = protocol.FRAME_HEADER.unpack(header)
        reply = json.loads(self._exactly(length))
        assert reply["ok"], reply
        return reply["result"]  # type: ignore[no-any-return]

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "the engine closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def engine_stopped(pid: int) -> Iterator[None]:
    """The engine stopped (SIGSTOP) for the block; continued after it."""
    os.kill(pid, signal.SIGSTOP)
    try:
        process = psutil.Process(pid)
        wait_for(lambda: process.status() == psutil.STATUS_STOPPED, what="the engine to stop")
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def events(db: Path, sql: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            f"SELECT id, job_id FROM events WHERE {sql} ORDER BY id", params
        ).fetchall()
    finally:
        conn.close()


def cancelled_ids(db: Path, jobs: list[int]) -> list[int]:
    """The event ids of these jobs' cancels while queued, in order."""
    marks = ",".join("?" * len(jobs))
    rows = events(db, f"message = 'cancelled while queued' AND job_id IN ({marks})", *jobs)
    return [event_id for event_id, _ in rows]


@pytest.fixture
def blocker(engine: EngineHandle, tmp_path: Path) -> Iterator[int]:
    """The only slot, held by a job until the test ends."""
    gate = tmp_path / "gate"
    yield engine.occupy_the_only_slot(gate)
    gate.touch()


def queued(engine: EngineHandle, tmp_path: Path, count: int) -> list[int]:
    """`count` queued jobs (q0, q1, ...), waiting for the slot."""
    specs = [JobSpec(name=f"q{k}", command=("true",), workdir=str(tmp_path)) for k in range(count)]
    return engine.api.submit(specs)


@pytest.fixture
def clients(engine: EngineHandle, blocker: int) -> Iterator[tuple[RawClient, RawClient]]:
    first, second = RawClient(engine.home), RawClient(engine.home)
    yield first, second
    first.close()
    second.close()


def test_another_clients_request_is_answered_between_the_slices_of_a_big_cancel(
    engine: EngineHandle, tmp_path: Path, clients: tuple[RawClient, RawClient]
) -> None:
    """A cancel of 760 queued jobs and, from another client, a hold of another job, read in one
    turn: the hold is done after the cancel's first slice and before its last. A cancel acted
    on all at once (before) wrote all its events before the hold's."""
    named = queued(engine, tmp_path, NAMED)
    (other,) = engine.submit({"name": "other", "command": ["true"]})
    canceller, holder = clients
    assert engine.pid is not None
    with engine_stopped(engine.pid):
        canceller.send("cancel", jobs=named)
        holder.send("hold", jobs=[other])
    assert holder.reply()["results"][0]["outcome"] == "held"
    results = canceller.reply()["results"]
    assert [(r["id"], r["outcome"]) for r in results] == [(i, "cancelled") for i in named]
    cancels = cancelled_ids(engine.home.db, named)
    ((hold, _),) = events(engine.home.db, "kind = 'hold' AND job_id = ?", other)
    assert len(cancels) == NAMED
    assert cancels[0] < hold < cancels[-1], (cancels[0], hold, cancels[-1])
    # a slice a turn: the first slice's events, then the hold's, then the rest
    assert len([c for c in cancels if c < hold]) == SLICE


def test_placement_between_the_slices_never_starts_a_job_the_cancel_named(
    engine: EngineHandle, tmp_path: Path, clients: tuple[RawClient, RawClient]
) -> None:
    """Two slots free up (`configure`) while a cancel of 760 queued jobs is in progress:
    placement runs between its slices and starts the two jobs queued after them, never one of
    the 760, though those are first in the queue."""
    named = queued(engine, tmp_path, NAMED)
    after = engine.submit(*({"name": f"after{k}", "command": ["true"]} for k in range(2)))
    canceller, configurer = clients
    assert engine.pid is not None
    with engine_stopped(engine.pid):
        canceller.send("cancel", jobs=named)
        configurer.send("configure", station={"slots": 3})
    assert configurer.reply()["changed"]
    results = canceller.reply()["results"]
    assert [(r["id"], r["outcome"]) for r in results] == [(i, "cancelled") for i in named]
    assert all(j.state == "cancelled" and j.attempts == 0 for j in engine.api.jobs(ids=named))
    cancels = cancelled_ids(engine.home.db, named)
    marks = ",".join("?" * len(after))
    started = events(engine.home.db, f"state = 'running' AND job_id IN ({marks})", *after)
    assert sorted(job_id for _, job_id in started) == after
    assert all(cancels[0] < event_id < cancels[-1] for event_id, _ in started), (
        cancels[0],
        started,
        cancels[-1],
    )


def test_a_request_naming_jobs_a_cancel_in_progress_named_waits_for_it(
    engine: EngineHandle, tmp_path: Path, clients: tuple[RawClient, RawClient]
) -> None:
    """A hold naming one of the jobs of a cancel in progress, read in the cancel's first turn,
    acts after the cancel has acted on that job: it finds it cancelled, as if the cancel had
    been done at once (acted on in slices without that order, the hold came first)."""
    named = queued(engine, tmp_path, NAMED)
    (other,) = engine.submit({"name": "other", "command": ["true"]})
    canceller, holder = clients
    late = named[-5]  # in the cancel's last slice
    assert engine.pid is not None
    with engine_stopped(engine.pid):
        canceller.send("cancel", jobs=named)
        holder.send("hold", jobs=[late, other])
    held = holder.reply()["results"]
    assert [(r["id"], r["outcome"], r["ok"]) for r in held] == [
        (late, "already cancelled: only a queued job can be held", False),
        (other, "held", True),
    ]
    assert all(r["outcome"] == "cancelled" for r in canceller.reply()["results"])
    (hold,) = [e for e, _ in events(engine.home.db, "kind = 'hold' AND job_id = ?", other)]
    assert hold > max(cancelled_ids(engine.home.db, named))  # the hold waited for the cancel


def test_the_outcomes_of_a_request_over_several_slices_are_each_jobs_in_the_order_given(
    engine: EngineHandle, tmp_path: Path, blocker: int
) -> None:
    """Queued, held, running and finished jobs, by id, as digits and by name, some twice, over
    three slices: each job's outcome once, in the order first named, as one request gave."""
    named = queued(engine, tmp_path, 2 * SLICE)
    (done,) = engine.submit({"name": "done", "command": ["true"]})
    engine.api.hold(named[SLICE : SLICE + 3])
    engine.api.cancel([done])
    refs: list[int | str] = [
        named[0],
        str(named[1]),
        *named[1:SLICE],
        blocker,
        *named[SLICE:],
        done,
        "done",
        named[3],
        f"q{2 * SLICE - 1}",
    ]
    results = engine.client.request("hold", jobs=refs)["results"]
    expected = [
        *[(i, "held") for i in named[:SLICE]],
        (blocker, "running: only a queued job can be held"),
        *[(i, "already held") for i in named[SLICE : SLICE + 3]],
        *[(i, "held") for i in named[SLICE + 3 :]],
        (done, "already cancelled: only a queued job can be held"),
    ]
    assert [(r["id"], r["outcome"]) for r in results] == expected
    results = engine.client.request("cancel", jobs=[*named, blocker, done])["results"]
    assert [r["outcome"] for r in results] == ["cancelled"] * len(named) + [
        "stopping",
        "already cancelled",
    ]
