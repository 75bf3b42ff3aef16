"""Work a request needs that may wait runs off the loop: the connection that asked waits for its
reply, every other connection is answered meanwhile, and the wait has a bound."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.engine.control_socket import ControlSocket
from gpudesk.engine.offloop import Busy, OffLoop, Pending

DEADLINE_S = 10.0


class Engine:
    """A control socket and an OffLoop turned by a thread, as the daemon's loop turns them.
    `slow` answers once its event is set (or its bound passes); any other op at once."""

    def __init__(self, path: Path, bound_s: float = 30.0) -> None:
        self.release = threading.Event()
        self.wake_r, self.wake_w = socket.socketpair()
        self.offloop = OffLoop(lambda: self.wake_w.send(b"w"))
        self.bound_s = bound_s
        self.server = ControlSocket(path, self.handle)
        self.server.bind()
        self.stopping = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def handle(self, raw: bytes, caller: Caller) -> bytes | Pending:
        request = protocol.decode_request(raw)
        if request.op != "slow":
            return protocol.encode_result(request.id, {"op": request.op})

        def start(post: Callable[[bytes], None]) -> None:
            def done(result: Any, error: BaseException | None) -> None:
                if error is not None:
                    post(protocol.encode_error(request.id, protocol.REFUSED, str(error)))
                else:
                    post(protocol.encode_result(request.id, {"waited": result}))

            try:
                wait = self.release.wait
                self.offloop.submit(caller.uid, "a slow read", wait, done, self.bound_s)
            except Busy as exc:
                post(protocol.encode_error(request.id, protocol.REFUSED, str(exc)))

        return Pending(start)

    def run(self) -> None:
        while not self.stopping:
            poller = select.poll()
            poller.register(self.wake_r.fileno(), select.POLLIN)
            self.server.register(poller)
            ready = dict(poller.poll(int(self.offloop.poll_timeout(0.05) * 1000)))
            if self.wake_r.fileno() in ready:
                self.wake_r.recv(4096)
            self.server.serve(ready)
            self.offloop.deliver()

    def close(self) -> None:
        self.release.set()
        self.stopping = True
        self.thread.join(DEADLINE_S)
        self.offloop.close()
        self.server.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = Engine(tmp_path / "c.sock")
    made.thread.start()
    yield made
    made.close()


def connect(path: Path) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(DEADLINE_S)
    client.connect(str(path))
    return client


def send(client: socket.socket, op: str, request_id: int) -> None:
    client.sendall(protocol.frame(protocol.Request(op, {}, request_id).encode()))


def receive(client: socket.socket) -> tuple[Any, dict[str, Any]]:
    header = b""
    while len(header) < 4:
        header += client.recv(4 - len(header))
    (length,) = protocol.FRAME_HEADER.unpack(header)
    body = b""
    while len(body) < length:
        body += client.recv(length - len(body))
    return protocol.decode_reply(body)


def test_others_are_answered_while_one_connection_waits_for_its_reply(engine: Engine) -> None:
    slow, other = connect(engine.server.path), connect(engine.server.path)
    with slow, other:
        send(slow, "slow", 1)
        send(slow, "ping", 2)  # waits behind its own slow request, as on one connection it must
        for n in range(20):
            send(other, "ping", 100 + n)
            assert receive(other) == (100 + n, {"op": "ping"})
        slow.settimeout(0.2)
        with pytest.raises(TimeoutError):
            slow.recv(1)  # nothing yet: its work has not finished
        slow.settimeout(DEADLINE_S)
        engine.release.set()
        assert receive(slow) == (1, {"waited": True})
        assert receive(slow) == (2, {"op": "ping"})


def test_work_past_its_bound_is_answered_with_the_bound(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "c.sock", bound_s=0.3)
    engine.thread.start()
    try:
        with connect(engine.server.path) as client:
            started = time.monotonic()
            send(client, "slow", 1)
            with pytest.raises(protocol.ProtocolError, match=r"a slow read took longer than 0.3 s"):
                receive(client)
            assert time.monotonic() - started < DEADLINE_S / 2
    finally:
        engine.close()


def test_one_user_cannot_hold_every_worker(engine: Engine) -> None:
    clients = [connect(engine.server.path) for _ in range(engine.offloop.per_user + 1)]
    try:
        for n, client in enumerate(clients[:-1]):
            send(client, "slow", n)
        # the first ones are in flight once the loop has read them; the next one is refused
        deadline = time.monotonic() + DEADLINE_S
        while len(engine.offloop._in_flight) < engine.offloop.per_user:
            assert time.monotonic() < deadline, "the slow requests never reached the workers"
            time.sleep(0.01)
        send(clients[-1], "slow", 99)
        with pytest.raises(protocol.ProtocolError, match="slow request"):
            receive(clients[-1])
        engine.release.set()
        for n, client in enumerate(clients[:-1]):
            assert receive(client) == (n, {"waited": True})
    finally:
        for client in clients:
            client.close()


def test_threads_stuck_past_their_bound_are_replaced_and_retire_when_they_return() -> None:
    """A user database that never answers holds each thread that asks it: past the bound the
    loop answers, and a fresh thread takes the stuck one's place, so other members' work still
    runs; once the stuck work returns, the pool shrinks back to its size."""
    wakes = threading.Event()
    offloop = OffLoop(wakes.set)
    hung = threading.Event()
    answers: dict[str, tuple[Any, BaseException | None]] = {}

    def answered(what: str) -> Callable[[Any, BaseException | None], None]:
        return lambda result, error: answers.__setitem__(what, (result, error))

    def turn_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            assert time.monotonic() < deadline, f"still waiting; answers so far: {answers}"
            wakes.wait(offloop.poll_timeout(0.05))
            wakes.clear()
            offloop.deliver()

    try:
        for n in range(offloop.workers):  # as many hung lookups as there are workers
            offloop.submit(None, f"lookup {n}", hung.wait, answered(f"lookup {n}"), 0.2)
        turn_until(lambda: len(answers) == offloop.workers)
        assert all(isinstance(error, TimeoutError) for _, error in answers.values())
        offloop.submit(None, "a log read", lambda: "read", answered("read"), DEADLINE_S)
        turn_until(lambda: "read" in answers)
        assert answers["read"] == ("read", None)  # not "took longer than": a thread was free
        assert len(offloop._threads) == 2 * offloop.workers
    finally:
        hung.set()
    deadline = time.monotonic() + DEADLINE_S
    while len(offloop._threads) > offloop.workers:
        assert time.monotonic() < deadline, "the replaced threads did not retire"
        time.sleep(0.01)
    offloop.close()
