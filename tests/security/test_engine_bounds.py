"""What one member can cost a system engine (issue 36, findings 2, 3, 11): the per-user bounds of
its control socket, with real users (root only; tests/shared/station_fixture.py).

Each test fails on the engine before the bounds: 1,100 idle connections of one member locked
everyone out; a connection that never sent a request was kept for ever; every member's partial
frames were buffered whole; a subscriber that never read was kept, its events dropped in
silence; and each refusal reached the client as "larger than the engine takes"."""

from __future__ import annotations

import json
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from station_fixture import SYSTEM_PYTHON, Station, make_station
from user_python import user_python

from gpudesk.api.connection import Connection
from gpudesk.api.errors import EngineError
from gpudesk.core import protocol
from gpudesk.paths import Home

HOG = Path(__file__).with_name("socket_hog.py")
MiB = 1024 * 1024

# What a member's own `gpudesk` client says when it asks the engine for something: run as her,
# with the project's client code (user_python), so the message is the one she would read.
ASK_AS_USER = """
import json, sys
from pathlib import Path
from gpudesk.api.connection import Connection
from gpudesk.api.errors import EngineError
from gpudesk.paths import Home
home = Home.system(Path(sys.argv[1]), Path(sys.argv[2]))
try:
    with Connection(home, timeout=20.0) as client:
        print(json.dumps({"pid": client.request("ping")["pid"]}))
except EngineError as exc:
    print(json.dumps({"code": exc.code, "message": str(exc)}))
"""


@pytest.fixture
def station() -> Iterator[Station]:
    yield from make_station()


@pytest.fixture
def quick_station() -> Iterator[Station]:
    """Short bounds, so a test reaches them in seconds."""
    env = {"GPUDESK_CONNECTION_IDLE_S": "1", "GPUDESK_SUBSCRIBER_BACKLOG_BYTES": "65536"}
    yield from make_station(engine_env=env)


@contextmanager
def hog(station: Station, role: str, *args: str) -> Iterator[dict[str, Any]]:
    """socket_hog.py run as `role`'s user: yields its report once its connections are in
    place, and holds them until the block ends."""
    argv = [SYSTEM_PYTHON, str(station.client.parent / "socket_hog.py"), str(station.socket)]
    shutil.copy(HOG, station.client.parent / "socket_hog.py")
    with station.popen_as(role, *argv, *args, end_wait_s=30) as process:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 180)
        line = process.stdout.readline() if ready else ""
        assert line, f"the hog did not report: {process.stderr.read() if ready else ''}"
        yield json.loads(line)


def ask_as(station: Station, role: str, python: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            *("runuser", "-u", station.users[role].name, "--", python, "-c", ASK_AS_USER),
            *(str(station.socket), str(station.state_dir)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def rss_kib(station: Station) -> int:
    assert station.process is not None
    status = Path(f"/proc/{station.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))


def timed_ping(station: Station, role: str | None) -> float:
    started = time.monotonic()
    reply = station.call(role, "ping")
    assert reply.get("ok"), reply
    return time.monotonic() - started


def test_one_member_holding_1100_connections_locks_no_one_else_out(station: Station) -> None:
    python = user_python(station.client.parent)
    with hog(station, "ada", "idle", "1100") as held:
        # she keeps the most one user may hold; the rest were refused, each told why
        assert held["held"] == 64, held
        [(reason, count)] = held["reasons"].items()
        assert count == 1100 - 64 and held["closed_silently"] == 0, held
        uid = station.users["ada"].uid
        assert reason.startswith(f"refused: refused: uid {uid} has 64 connections open"), reason
        for role in ("bob", "admin", None):
            assert timed_ping(station, role) < 10.0
        # her own client says the real reason, not "larger than the engine takes"
        said = ask_as(station, "ada", python)
        assert said.get("code") == "refused", said
        assert f"uid {uid} has 64 connections open to the engine" in said["message"], said
        assert "larger" not in said["message"]
        assert "pid" in ask_as(station, "bob", python)


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_bound(
    quick_station: Station,
) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(quick_station.socket))
    half = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    half.connect(str(quick_station.socket))
    half.sendall(protocol.FRAME_HEADER.pack(100) + b"{")  # part of a request, never the rest
    try:
        for conn, what in ((sock, "no request"), (half, "part of a request")):
            conn.settimeout(20.0)  # the bound is 1 s; on the engine before it, never
            with conn.makefile("rb") as said:
                (length,) = protocol.FRAME_HEADER.unpack(said.read(protocol.FRAME_HEADER.size))
                error = json.loads(said.read(length))["error"]
                assert said.read(1) == b""
            assert error["code"] == "refused"
            assert f"this connection sent {what} and no whole one within 1 s" in error["message"]
    finally:
        sock.close()
        half.close()
    assert quick_station.call(None, "ping")["ok"]


def test_partial_frames_past_the_per_user_bound_are_refused_and_others_stay_fast(
    station: Station,
) -> None:
    before = rss_kib(station)
    largest = protocol.MAX_MESSAGE_BYTES
    with hog(station, "ada", "partial", "12", str(largest)) as held:
        # two of the largest requests fit her bound (16 MiB); the other ten are refused
        assert held["held"] == 2, held
        [(reason, count)] = held["reasons"].items()
        assert count == 10, held
        assert reason.startswith("refused: refused: uid ") and "of unfinished requests" in reason
        during = rss_kib(station)
        pings = [timed_ping(station, "bob") for _ in range(5)]
    assert max(pings) < 10.0, pings
    # what her partial frames cost: about her bound, where 12 were kept whole before (96 MiB)
    grown_mib = (during - before) / 1024
    assert grown_mib < 2 * 16 + 8, f"the engine grew {grown_mib:.0f} MiB"


def test_a_subscriber_that_never_reads_is_cut_off_and_its_client_told_so(
    quick_station: Station,
) -> None:
    home = Home.system(quick_station.socket, quick_station.state_dir)
    job = {"name": "e", "command": ["true"], "gpus": 0, "workdir": "/"}
    with Connection(home, timeout=20.0).subscribe("job") as events:
        # events pile up for it: a cut-off one is logged, and then told why on its stream
        deadline = time.monotonic() + 120
        while "events were missed" not in quick_station.log.read_text():
            assert time.monotonic() < deadline, "the subscriber was never cut off"
            quick_station.ok(None, "submit", jobs=[job] * 200, env={"PATH": "/usr/bin:/bin"})
        with pytest.raises(EngineError) as info:
            while events.poll(20_000):
                events.recv_event()
    assert info.value.code == "events_missed"
    message = str(info.value)
    assert message.startswith("events were missed: this subscriber left"), message
    assert "of events unread, more than the 65536 bytes one may" in message, message
    assert "subscribe again" in message
    assert quick_station.call(None, "ping")["ok"]


def test_a_request_of_too_many_values_is_refused_before_it_is_parsed(station: Station) -> None:
    """A small request of many tiny values (what costs json.loads the most per byte) is
    refused from its count alone, and the engine answers the next one at once."""
    values = 100_010  # protocol.MAX_REQUEST_VALUES is 100,000
    bomb = b'{"v":1,"id":7,"op":"submit","args":{"jobs":[' + b"[]," * values + b"[]]}}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20.0)
        sock.connect(str(station.socket))
        sock.sendall(
            protocol.frame(bomb) + protocol.frame(protocol.Request("ping", {}, 8).encode())
        )
        with sock.makefile("rb") as replies:
            answers = []
            for _ in range(2):
                (length,) = protocol.FRAME_HEADER.unpack(replies.read(protocol.FRAME_HEADER.size))
                answers.append(json.loads(replies.read(length)))
    error = answers[0]["error"]
    assert error["code"] == "too_large", answers[0]
    assert "more than the 100,000 the engine parses" in error["message"]
    assert answers[1]["ok"] is True


def test_a_regular_file_where_the_socket_goes_is_one_paragraph(
    home: Home, gpudesk: Any, gpudesk_cmd: list[str]
) -> None:
    """Something left at run/control.sock: `gpudesk engine start` and any client say what is
    there and what to do, in one paragraph with no traceback, and exit non-zero."""
    home.ensure()
    home.control_socket.write_text("not a socket\n")
    code, out, err = gpudesk("engine", "start")
    assert code != 0
    assert "Traceback" not in out + err, err
    assert f"{home.control_socket}: a regular file is there, not a socket" in err, err
    assert "move it away" in err
    # the engine itself says the same, in one line of its log, and exits 4 (a bad home)
    done = subprocess.run(
        [*gpudesk_cmd[:1], "-m", "gpudesk.engine.daemon", "--home", str(home.root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    assert [line for line in done.stderr.splitlines() if "ERROR" in line] == [
        line for line in done.stderr.splitlines() if line.strip()
    ][-1:]
    code, out, err = gpudesk("submit", "--", "true")
    assert code != 0 and "Traceback" not in out + err
    # a client that starts a personal engine first (submit does): its words, once more
    assert "a regular file is there, not a socket" in err, err
    assert home.control_socket.read_text() == "not a socket\n"  # never removed


def test_one_members_subscribers_together_are_cut_off_at_her_bound(
    quick_station: Station,
) -> None:
    """20 subscribers of hers that never read: past 8 x 64 KiB unread between them, the one
    furthest behind is cut off, each in turn; the engine never holds more for her."""
    uid = quick_station.users["ada"].uid
    job = {"name": "e", "command": ["true"], "gpus": 0, "workdir": "/"}
    with hog(quick_station, "ada", "subscribe", "20") as held:
        assert held["held"] == 20, held
        deadline = time.monotonic() + 90
        said = f"uid {uid}'s subscribers left"
        while said not in quick_station.log.read_text():
            tail = quick_station.log.read_text()[-1500:]
            assert time.monotonic() < deadline, f"her subscribers were never cut off: {tail}"
            quick_station.ok(None, "submit", jobs=[job] * 200, env={"PATH": "/usr/bin:/bin"})
        assert "more than the 524288 bytes one user's may; this one was the furthest behind" in (
            quick_station.log.read_text()
        )
        assert timed_ping(quick_station, "bob") < 10.0
