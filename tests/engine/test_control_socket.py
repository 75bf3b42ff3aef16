"""The control socket: who is asking comes from the kernel, frames hold together."""

from __future__ import annotations

import os
import select
import socket
from pathlib import Path

import pytest

from gpudesk.core import protocol
from gpudesk.core.identity import Caller, peer_caller
from gpudesk.engine.control_socket import CannotListen, ControlSocket


def test_peer_caller_is_what_the_kernel_says_of_the_other_end() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        caller = peer_caller(left)
    assert caller.pid == os.getpid()
    assert caller.uid == os.getuid()
    assert caller.identity.gid == os.getgid()
    assert set(caller.identity.groups) == set(os.getgroups())


def _serve_once(server: ControlSocket, timeout: float = 2.0) -> None:
    poller = select.poll()
    server.register(poller)
    server.serve(dict(poller.poll(int(timeout * 1000))))


def test_a_request_is_answered_with_the_callers_identity_whatever_it_claims(tmp_path: Path) -> None:
    seen: list[Caller] = []

    def handle(raw: bytes, caller: Caller) -> bytes:
        seen.append(caller)
        return protocol.encode_result(1, {"echo": raw.decode()})

    server = ControlSocket(tmp_path / "c.sock", handle)
    server.bind()
    assert (tmp_path / "c.sock").stat().st_mode & 0o777 == 0o600
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(tmp_path / "c.sock"))
        _serve_once(server)  # accept
        body = b'{"v": 1, "id": 1, "op": "ping", "args": {"uid": 0, "user": "root"}}'
        wire = protocol.frame(body)
        client.sendall(wire[:3])  # a header in two pieces
        _serve_once(server)
        client.sendall(wire[3:])
        _serve_once(server)
        client.settimeout(2.0)
        header = client.recv(4)
        (length,) = protocol.FRAME_HEADER.unpack(header)
        reply = b""
        while len(reply) < length:
            reply += client.recv(length - len(reply))
        assert b'"echo"' in reply
        assert [c.uid for c in seen] == [os.getuid()]
    finally:
        client.close()
        server.close()
    assert not (tmp_path / "c.sock").exists()


def test_bind_refuses_what_is_not_a_socket(tmp_path: Path) -> None:
    (tmp_path / "c.sock").write_text("keep me")
    server = ControlSocket(tmp_path / "c.sock", lambda raw, caller: raw)
    with pytest.raises(CannotListen) as info:
        server.bind()
    assert "a regular file is there, not a socket" in str(info.value)
    assert (tmp_path / "c.sock").read_text() == "keep me"


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(str(path)) == 0


def test_bind_refuses_a_socket_a_live_engine_listens_at_and_leaves_it_to_that_engine(
    tmp_path: Path,
) -> None:
    """Two engines of different state folders (each with its own lock) named one socket: the
    second replaced the first's, which went on scheduling unreachable, and removed it as it
    ended. Now the second is refused, and the first keeps its socket."""
    path = tmp_path / "c.sock"
    first = ControlSocket(path, lambda raw, caller: raw)
    first.bind()
    second = ControlSocket(path, lambda raw, caller: raw)
    with pytest.raises(CannotListen) as info:
        second.bind()
    assert info.value.busy and "another engine listens there" in str(info.value)
    second.close()
    assert _answers(path)
    first.close()
    assert not path.exists()


def test_bind_replaces_a_dead_engines_socket(tmp_path: Path) -> None:
    path = tmp_path / "c.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # left behind: no one listens
    server = ControlSocket(path, lambda raw, caller: raw)
    server.bind()
    assert _answers(path)
    server.close()


def test_close_leaves_a_socket_that_is_no_longer_its_own(tmp_path: Path) -> None:
    path = tmp_path / "c.sock"
    server = ControlSocket(path, lambda raw, caller: raw)
    server.bind()
    path.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(path))
        other.listen(1)
        server.close()
        assert _answers(path)
