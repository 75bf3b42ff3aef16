"""The engine's control socket: a Unix stream socket served from the engine's one loop.

Each connection carries length-prefixed frames (`protocol.frame`). The kernel tells who is at the
other end when the connection is accepted (`peer_caller`: SO_PEERCRED for pid, uid and gid,
SO_PEERGROUPS for the supplementary groups); every request on that connection is handed to the
op table with that `Caller`, whatever the request itself says.

Nothing here blocks: reads and writes are non-blocking and buffered per connection, so a client
that stops reading, or sends half a frame and waits, costs the engine a buffer and never a
stall. A frame announcing more than `protocol.MAX_MESSAGE_BYTES` closes its connection (the
client says "closed the connection without answering"). A connection that sent `subscribe` is
answered once and from then on receives events; when one falls behind by more than
`EVENT_BACKLOG_BYTES`, events are dropped for it (they are in the store too), as a zmq PUB
socket dropped them before.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import select
import socket
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpudesk.engine import protocol
from gpudesk.engine.identity import Caller, Identity
from gpudesk.engine.offloop import Pending

log = logging.getLogger("gpudesk.engine")

EVENT_BACKLOG_BYTES = 8 * 1024 * 1024  # what a subscriber may fall behind before events drop
MAX_CONNECTIONS = 1024  # more are refused (closed at once): a runaway client cannot exhaust fds
READ_CHUNK = 1 << 20
TOPICS = ("", "job", "telemetry")  # "" is every topic
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13; Python has no name for it
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MAX_GROUPS = 65536  # NGROUPS_MAX on Linux

Handler = Callable[[bytes, Caller], bytes | Pending]


def peer_caller(sock: socket.socket) -> Caller:
    """Who is at the other end of a connected Unix socket, as the kernel says: the pid, uid and
    gid the peer had when it connected, and its supplementary groups. Where SO_PEERGROUPS is
    missing (Linux before 4.13), the groups come from the user database for that uid and gid
    (what `initgroups` would give the user, not what that process holds)."""
    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    groups: list[int]
    try:
        size = 4 * 256
        while True:
            try:
                raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, size)
                break
            except OSError as exc:
                if exc.errno != errno.ERANGE or size >= 4 * _MAX_GROUPS:
                    raise
                size *= 4
        groups = list(struct.unpack(f"{len(raw) // 4}I", raw))
    except OSError:
        groups = _groups_of(uid, gid)
    return Caller(Identity.of(uid, gid, groups), pid or None)


def _groups_of(uid: int, gid: int) -> list[int]:
    import pwd

    try:
        return os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except (KeyError, OSError):
        return [gid]


@dataclass
class _Connection:
    sock: socket.socket
    caller: Caller
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    topic: bytes | None = None  # set once it subscribed: b"" for every topic
    closing: bool = False  # close once the outbox is sent
    waiting: bool = False  # its request's reply is being worked out off the loop


@dataclass(frozen=True)
class SocketAccess:
    """Who may connect: the socket's mode and group (a system engine: 0660 and the station's
    group, its folder 0750; a personal engine: 0600 in a 0700 folder, group unchanged)."""

    mode: int = 0o600
    group: int | None = None


class ControlSocket:
    def __init__(self, path: Path, handle: Handler, access: SocketAccess | None = None) -> None:
        self.path = path
        self.handle = handle
        self.access = access or SocketAccess()
        self.listener: socket.socket | None = None
        self.connections: dict[int, _Connection] = {}

    # ------------------------------------------------------------ life cycle
    def bind(self) -> None:
        """Listen at `path` (the caller holds the engine's lock, so a socket already there is a
        dead engine's and is replaced; anything else there is refused, not removed)."""
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(self.path)
            if not stat.S_ISSOCK(st.st_mode):
                raise OSError(
                    errno.EEXIST,
                    f"{self.path} exists and is not a socket; gpudesk does not remove it",
                )
            os.unlink(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            # Made with no access for anyone but the engine, then opened up: no moment when a
            # wider mode than intended applies.
            old = os.umask(0o177)
            try:
                listener.bind(str(self.path))
            finally:
                os.umask(old)
            if self.access.group is not None:
                os.chown(self.path, -1, self.access.group)
            os.chmod(self.path, self.access.mode)
            listener.listen(128)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        self.listener = listener

    def close(self) -> None:
        for conn in list(self.connections.values()):
            self._drop(conn)
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    # ---------------------------------------------------------------- polling
    def register(self, poller: select.poll) -> None:
        """Put the listener and every connection into `poller` (rebuilt by the loop each turn:
        there are a handful of connections)."""
        if self.listener is not None:
            poller.register(self.listener.fileno(), select.POLLIN)
        for fd, conn in self.connections.items():
            # A client's next request is read once its last reply has gone out: one that
            # never reads its replies makes the engine hold one reply, not an endless pile.
            reading = not conn.closing and (
                conn.topic is not None or not (conn.outbox or conn.waiting)
            )
            events = select.POLLIN if reading else 0
            if conn.outbox:
                events |= select.POLLOUT
            poller.register(fd, events)

    def serve(self, ready: dict[int, int]) -> None:
        """Act on what `poll` said is ready: accept, read and answer, write out."""
        if self.listener is not None and self.listener.fileno() in ready:
            self._accept()
        for fd, events in ready.items():
            conn = self.connections.get(fd)
            if conn is None:
                continue
            if events & (select.POLLIN | select.POLLHUP | select.POLLERR) and not conn.closing:
                self._read(conn)
            if fd in self.connections and conn.outbox and events & (select.POLLOUT | select.POLLIN):
                self._write(conn)
                if fd in self.connections and not conn.outbox and conn.inbox:
                    self._process(conn)  # requests that waited for this reply to go out

    def publish(self, topic: str, body: bytes) -> None:
        """Queue an event frame for each subscriber of `topic`."""
        wanted = topic.encode()
        frame = protocol.frame(body)
        for conn in list(self.connections.values()):
            if conn.topic is None or conn.closing or conn.topic not in (b"", wanted):
                continue
            if len(conn.outbox) > EVENT_BACKLOG_BYTES:
                continue  # behind: this one is dropped for it, never waited for
            conn.outbox += frame
            self._write(conn)

    # ---------------------------------------------------------------- inside
    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of fds, say: the others go on
                log.warning("could not accept a client: %s", exc)
                return
            sock.setblocking(False)
            if len(self.connections) >= MAX_CONNECTIONS:
                sock.close()
                continue
            try:
                caller = peer_caller(sock)
            except OSError as exc:
                log.warning("could not tell who connected (%s); closed the connection", exc)
                sock.close()
                continue
            self.connections[sock.fileno()] = _Connection(sock, caller)

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        if conn.topic is not None:
            return  # a subscriber only listens: what it sends is dropped
        conn.inbox += data
        self._process(conn)

    def _process(self, conn: _Connection) -> None:
        """Answer the whole requests in the inbox, one at a time, while replies go out."""
        header = protocol.FRAME_HEADER
        while len(conn.inbox) >= header.size and not (conn.closing or conn.outbox or conn.waiting):
            (length,) = header.unpack_from(conn.inbox)
            if length > protocol.MAX_MESSAGE_BYTES:
                log.warning(
                    "a client (pid %s, uid %d) announced a %d-byte message, more than the "
                    "%d bytes a message may have; closed its connection",
                    conn.caller.pid,
                    conn.caller.uid,
                    length,
                    protocol.MAX_MESSAGE_BYTES,
                )
                self._drop(conn)
                return
            if len(conn.inbox) < header.size + length:
                return
            raw = bytes(conn.inbox[header.size : header.size + length])
            del conn.inbox[: header.size + length]
            answer = self._answer(conn, raw)
            if isinstance(answer, Pending):
                conn.waiting = True  # its next request waits for this reply, as it would here
                answer.start(functools.partial(self._post, conn))
                continue
            conn.outbox += protocol.frame(answer)
            self._write(conn)  # usually all of it: then the next request in the inbox is read

    def _post(self, conn: _Connection, body: bytes) -> None:
        """The reply worked out off the loop (on the loop now): sent, unless its client left."""
        conn.waiting = False
        if conn.closing or self.connections.get(conn.sock.fileno()) is not conn:
            return
        conn.outbox += protocol.frame(body)
        self._write(conn)
        if self.connections.get(conn.sock.fileno()) is conn and not conn.outbox and conn.inbox:
            self._process(conn)  # requests that waited for this reply to go out

    def _answer(self, conn: _Connection, raw: bytes) -> bytes | Pending:
        request = _subscription(raw)
        if request is None:
            return self.handle(raw, conn.caller)
        topic = request.args.get("topic", "")
        if topic not in TOPICS:
            return protocol.encode_error(
                request.id,
                protocol.INVALID_ARGS,
                f"'topic' must be one of {', '.join(repr(t) for t in TOPICS)}",
            )
        conn.topic = topic.encode()
        return protocol.encode_result(request.id, {"topic": topic})

    def _write(self, conn: _Connection) -> None:
        try:
            sent = conn.sock.send(conn.outbox)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        del conn.outbox[:sent]
        if conn.closing and not conn.outbox:
            self._drop(conn)

    def _drop(self, conn: _Connection) -> None:
        conn.closing = True
        self.connections.pop(conn.sock.fileno(), None)
        conn.sock.close()


def _subscription(raw: bytes) -> protocol.Request | None:
    """A `subscribe` request, or None for any other (the op table answers those, bad ones
    included)."""
    if protocol.SUBSCRIBE_OP.encode() not in raw:
        return None
    try:
        request = protocol.decode_request(raw)
    except protocol.ProtocolError:
        return None
    return request if request.op == protocol.SUBSCRIBE_OP else None
