"""The engine's control socket: a Unix stream socket served from the engine's one loop.

Each connection carries length-prefixed frames (`protocol.frame`). The kernel tells who is at the
other end when the connection is accepted (`peer_caller`: SO_PEERCRED for pid, uid and gid,
SO_PEERGROUPS for the supplementary groups); every request on that connection is handed to the
op table with that `Caller`, whatever the request itself says.

Nothing here blocks: reads and writes are non-blocking and buffered per connection, so a client
that stops reading, or sends half a frame and waits, costs the engine a buffer and never a
stall. What those buffers may cost is bounded per user (`SocketLimits`; docs/shared-station.md,
"What one member can cost the engine"): the connections she holds, the unfinished requests she
has sent, the events her subscribers have not read. Admins (`is_admin`: every caller of a
personal engine) answer only to the engine-wide bounds, and connections are kept for them
beyond what all other users together may hold. Whatever is refused or cut off is told why first,
in an error frame ("refused", "too_large", "events_missed"), and then closed.

A connection that sent `subscribe` is answered once and from then on receives events; one that
falls behind by more than its bound is sent `events_missed` and closed (Redis's
client-output-buffer-limit for pubsub does the same): its owner resubscribes and reads the state
anew, instead of the engine holding a pile of events no one reads.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import resource
import select
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from gpudesk.core import protocol
from gpudesk.core.identity import Caller, peer_caller
from gpudesk.engine.offloop import Pending
from gpudesk.env_seconds import env_seconds
from gpudesk.paths import listens_at
from gpudesk.text import file_kind
from gpudesk.units import byte_size

log = logging.getLogger("gpudesk.engine")

MiB = 1024 * 1024
# The bounds (docs/shared-station.md, "What one member can cost the engine"). Each is an
# assumption sized against what a member legitimately uses, unless it says otherwise.
# Connections: a `gpudesk` command holds one, the desk two, `gpudesk wait`/`logs -f` one each; 64
# lets a member run dozens at once. All users together may hold MAX_CONNECTIONS less the
# ADMIN_CONNECTIONS kept for admins, so an admin can always reach the engine to stop it.
CONNECTIONS_PER_USER = 64
MAX_CONNECTIONS = 4096
ADMIN_CONNECTIONS = 64
FD_RESERVE = 1024  # descriptors kept for the rest of the engine: its store, logs, jobs' pipes
NOFILE_WANTED = 8192  # RLIMIT_NOFILE soft limit asked for (up to the hard one) at start-up
# A connection that has not sent a whole request this long after connecting (or after it began
# one) is closed: gpudesk's clients send theirs as soon as they connect, in milliseconds.
CONNECTION_IDLE_S = 10.0
# Unfinished requests one user may have the engine hold, across her connections: two of the
# largest at once (protocol.MAX_MESSAGE_BYTES), charged as announced by each frame's header.
INBOX_BYTES_PER_USER = 2 * (protocol.FRAME_HEADER.size + protocol.MAX_MESSAGE_BYTES)
# Events a subscriber may leave unread (Redis's pubsub limit is 32 MiB hard, 8 MiB for 60 s;
# gpudesk's events are ~0.3 KiB (a job's) and ~1 to 4 KiB a second (telemetry), so 1 MiB is
# minutes of them), and all of one user's subscribers together.
SUBSCRIBER_BACKLOG_BYTES = 1 * MiB
BACKLOG_BYTES_PER_USER = 8 * MiB
# How long a refused or cut-off connection's last words (its error frame) wait to be read.
PARTING_S = 5.0
ACCEPTS_PER_TURN = 256  # one turn of the loop accepts at most this many: it also has others
REFUSAL_LOG_EVERY_S = 60.0  # a refusal is logged once a minute per user and kind, then counted
READ_CHUNK = 1 << 20
TOPICS = ("", "job", "telemetry")  # "" is every topic

Handler = Callable[[bytes, Caller], bytes | Pending]


class SocketLimits(msgspec.Struct, frozen=True):
    """The per-user bounds (see the constants). The engine's environment may set three of them:
    GPUDESK_CONNECTIONS_PER_USER, GPUDESK_CONNECTION_IDLE_S and GPUDESK_SUBSCRIBER_BACKLOG_BYTES
    (a user's subscribers together: 8 times that), for a station with unusual clients; tests
    use small ones."""

    connections_per_user: int = CONNECTIONS_PER_USER
    idle_s: float = CONNECTION_IDLE_S
    inbox_bytes_per_user: int = INBOX_BYTES_PER_USER
    subscriber_backlog_bytes: int = SUBSCRIBER_BACKLOG_BYTES
    backlog_bytes_per_user: int = BACKLOG_BYTES_PER_USER

    @classmethod
    def from_env(cls) -> SocketLimits:
        per_user = env_seconds("GPUDESK_CONNECTIONS_PER_USER", CONNECTIONS_PER_USER, 1, 100_000)
        idle = env_seconds("GPUDESK_CONNECTION_IDLE_S", CONNECTION_IDLE_S, 0.1, 3600.0)
        backlog = int(
            env_seconds(
                "GPUDESK_SUBSCRIBER_BACKLOG_BYTES", SUBSCRIBER_BACKLOG_BYTES, 65536, 1 << 30
            )
        )
        return cls(
            connections_per_user=int(per_user),
            idle_s=idle,
            subscriber_backlog_bytes=backlog,
            backlog_bytes_per_user=8 * backlog,
        )


class _Connection(msgspec.Struct):
    sock: socket.socket
    caller: Caller
    admin: bool = False  # the per-user bounds do not apply (access.Access.is_admin)
    inbox: bytearray = msgspec.field(default_factory=bytearray)
    outbox: bytearray = msgspec.field(default_factory=bytearray)
    topic: bytes | None = None  # set once it subscribed: b"" for every topic
    closing: bool = False  # close once the outbox is sent
    waiting: bool = False  # its request's reply is being worked out off the loop
    # The outbox's first bytes that finish a frame already partly sent: what must go out before
    # anything else may (a cut-off subscriber's reason frame, say).
    started: int = 0
    requests: int = 0  # whole requests received
    waiting_since: float | None = None  # since when a whole request is awaited (idle bound)
    close_by: float | None = None  # a closing connection is dropped then, read or not
    inbox_charge: int = 0  # what it counts against its user's bounds now
    backlog_charge: int = 0


class _Usage(msgspec.Struct):
    """What one user's connections cost the engine now."""

    connections: int = 0
    inbox: int = 0  # unfinished requests, as their headers announce them
    backlog: int = 0  # events queued for her subscribers
    subscribers: dict[int, _Connection] = msgspec.field(default_factory=dict)


class SocketAccess(msgspec.Struct, frozen=True):
    """Who may connect: the socket's mode and group (a system engine: 0660 and the station's
    group, its folder 0750; a personal engine: 0600 in a 0700 folder, group unchanged)."""

    mode: int = 0o600
    group: int | None = None


class ControlSocket:
    def __init__(
        self,
        path: Path,
        handle: Handler,
        access: SocketAccess | None = None,
        is_admin: Callable[[Caller], bool] | None = None,
        limits: SocketLimits | None = None,
    ) -> None:
        self.path = path
        self.handle = handle
        self.access = access or SocketAccess()
        self.is_admin = is_admin or (lambda _caller: True)
        self.limits = limits or SocketLimits()
        self.listener: socket.socket | None = None
        self.bound: int | None = None  # the inode of the socket it made (close removes only it)
        self.connections: dict[int, _Connection] = {}
        self.usage: dict[int, _Usage] = {}  # by uid
        self.users_connections = 0  # held by callers who are not admins
        self.max_connections = MAX_CONNECTIONS
        self._next_sweep = 0.0
        self._deadlines = False  # whether a connection waits on a deadline (_sweep)
        self._said: dict[tuple[int, str], tuple[float, int]] = {}  # refusals logged: when, since

    # ------------------------------------------------------------ life cycle
    def bind(self) -> None:
        """Listen at `path`, replacing a dead engine's socket there; a live one's (an engine of
        another state folder), or anything else, is refused, not removed. A path it cannot
        listen at raises CannotListen, whose text is the whole explanation."""
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(self.path)
            if not stat.S_ISSOCK(st.st_mode):
                raise CannotListen(
                    f"the engine cannot listen at {self.path}: {file_kind(st.st_mode)} is there, "
                    "not a socket, and gpudesk does not remove what it did not make. Look at it, "
                    f"move it away (`mv {self.path} {self.path}.old`), then start the engine again."
                )
            if listens_at(self.path):
                raise CannotListen(
                    f"the engine cannot listen at {self.path}: another engine listens there (one "
                    "of another state folder). Stop that one first, or give this one a socket of "
                    "its own (--socket).",
                    busy=True,
                )
            os.unlink(self.path)
        self.max_connections = _connection_room()
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
            self.bound = os.lstat(self.path).st_ino  # what close() may remove: its own socket
        except OSError as exc:
            listener.close()
            raise CannotListen(
                f"the engine cannot listen at {self.path}: {exc.strerror or exc}. Check the "
                "folder (it must exist and be the engine's) and the path's length (at most 107 "
                "bytes for a Unix socket), then start the engine again."
            ) from None
        except BaseException:
            listener.close()
            raise
        self.listener = listener

    def keep_bound(self) -> None:
        """Listen anew where the socket it made is gone (its folder removed under the engine);
        the connections made stay. CannotListen as `bind`."""
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(self.path).st_ino == self.bound:
                return
        old = self.listener
        self.bind()  # self.listener is replaced once the new one listens
        if old is not None:
            old.close()

    def close(self) -> None:
        for conn in list(self.connections.values()):
            self._drop(conn)
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            with contextlib.suppress(OSError):
                if os.lstat(self.path).st_ino == self.bound:  # not another engine's since
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

    def poll_timeout(self, timeout: float) -> float:
        """`timeout`, shortened to the next check of the connections' deadlines when any waits."""
        if not self._deadlines:
            return timeout
        return min(timeout, max(0.0, self._next_sweep - time.monotonic()))

    def serve(self, ready: dict[int, int]) -> None:
        """Act on what `poll` said is ready: accept, read and answer, write out; then close the
        connections whose time is up."""
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
                    self._account(conn)
        self._sweep(time.monotonic())

    def publish(self, topic: str, body: bytes) -> None:
        """Queue an event frame for each subscriber of `topic`. One that would fall behind by
        more than its bound, or whose user's subscribers would, is cut off instead."""
        wanted = topic.encode()
        frame = protocol.frame(body)
        limits = self.limits
        for conn in list(self.connections.values()):
            if conn.topic is None or conn.closing or conn.topic not in (b"", wanted):
                continue
            if len(conn.outbox) + len(frame) > limits.subscriber_backlog_bytes:
                self._cut_subscriber(
                    conn,
                    "events",
                    f"this subscriber left {byte_size(len(conn.outbox))} of events unread, more "
                    f"than the {byte_size(limits.subscriber_backlog_bytes)} one may",
                )
                continue
            usage = self.usage[conn.caller.uid]
            while not conn.admin and usage.backlog + len(frame) > limits.backlog_bytes_per_user:
                if not usage.subscribers:
                    break
                worst = max(usage.subscribers.values(), key=lambda c: len(c.outbox))
                self._cut_subscriber(
                    worst,
                    "user's events",
                    f"uid {conn.caller.uid}'s subscribers left {byte_size(usage.backlog)} of "
                    f"events unread, more than the {byte_size(limits.backlog_bytes_per_user)} "
                    "one user's may; this one was the furthest behind",
                )
                if worst is conn:
                    break
            if conn.closing:
                continue
            conn.outbox += frame
            self._write(conn)

    # ---------------------------------------------------------------- inside
    def _accept(self) -> None:
        assert self.listener is not None
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of fds, say: the others go on
                log.warning("could not accept a client: %s", exc)
                return
            sock.setblocking(False)
            try:
                caller = peer_caller(sock)
            except OSError as exc:
                log.warning("could not tell who connected (%s); closed the connection", exc)
                sock.close()
                continue
            admin = self.is_admin(caller)
            refusal = self._admission(caller, admin)
            if refusal is not None:
                _turn_away(sock, refusal)
                self._say(caller, "connections", refusal)
                continue
            conn = _Connection(sock, caller, admin, waiting_since=time.monotonic())
            self.connections[sock.fileno()] = conn
            self.usage.setdefault(caller.uid, _Usage()).connections += 1
            if not admin:
                self.users_connections += 1
            self._deadlines = True

    def _admission(self, caller: Caller, admin: bool) -> str | None:
        """Why a new connection of `caller`'s is refused, or None when it is taken."""
        held = len(self.connections)
        if held >= self.max_connections:
            return (
                f"refused: the engine holds {held} connections, the most it may (its open-file "
                "limit); an admin can see who holds them in its log"
            )
        if admin:
            return None
        room = self.max_connections - ADMIN_CONNECTIONS
        if self.users_connections >= room:
            return (
                f"refused: the station's users hold {self.users_connections} connections, the "
                f"most they may together (the rest is kept for admins); try again later"
            )
        usage = self.usage.get(caller.uid)
        if usage is not None and usage.connections >= self.limits.connections_per_user:
            return (
                f"refused: uid {caller.uid} has {usage.connections} connections open to the "
                "engine, the most one user may hold; close some (each running `gpudesk` "
                "command, desk or script's Client holds one or two)"
            )
        return None

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
        self._account(conn)
        if conn.closing:
            return
        usage = self.usage[conn.caller.uid]
        bound = self.limits.inbox_bytes_per_user
        if not conn.admin and not conn.closing and usage.inbox > bound:
            message = (
                f"refused: uid {conn.caller.uid} has sent {byte_size(usage.inbox)} of unfinished "
                f"requests over its connections, more than the {byte_size(bound)} one user may "
                "have the engine hold; this connection was closed"
            )
            self._refuse(conn, protocol.REFUSED, "unfinished", message)

    def _process(self, conn: _Connection) -> None:
        """Answer the whole requests in the inbox, one at a time, while replies go out."""
        header = protocol.FRAME_HEADER
        while len(conn.inbox) >= header.size and not (conn.closing or conn.outbox or conn.waiting):
            (length,) = header.unpack_from(conn.inbox)
            if length > protocol.MAX_MESSAGE_BYTES:
                message = (
                    f"the engine takes messages of at most {protocol.MAX_MESSAGE_BYTES:,} bytes, "
                    f"and this one announced {length:,}; it closed the connection"
                )
                self._refuse(conn, protocol.TOO_LARGE, "too large", message)
                return
            if len(conn.inbox) < header.size + length:
                return
            raw = bytes(conn.inbox[header.size : header.size + length])
            del conn.inbox[: header.size + length]
            conn.requests += 1
            too_large = protocol.too_large(raw)
            if too_large is not None:  # refused before json.loads could hold the loop
                answer: bytes | Pending = protocol.encode_error(None, protocol.TOO_LARGE, too_large)
            else:
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
        self._account(conn)

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
            sent = 0  # its reader is behind: what waits here counts against its user
        except OSError:
            self._drop(conn)
            return
        # Where the frame the last byte sent belongs to ends: a cut keeps up to there.
        header = protocol.FRAME_HEADER
        end = conn.started
        while end < sent:
            (length,) = header.unpack_from(conn.outbox, end)
            end += header.size + length
        conn.started = end - sent
        del conn.outbox[:sent]
        if conn.closing and not conn.outbox:
            self._drop(conn)
        else:
            self._account(conn)

    def _account(self, conn: _Connection) -> None:
        """Bring what `conn` counts against its user's bounds up to date, and whether it is
        awaited: a connection that has sent no whole request yet, or has part of one in."""
        if conn.sock.fileno() not in self.connections:
            return
        usage = self.usage[conn.caller.uid]
        header = protocol.FRAME_HEADER
        inbox = len(conn.inbox)
        announced = header.size + header.unpack_from(conn.inbox)[0] if inbox >= header.size else 0
        charge = max(inbox, announced)
        usage.inbox += charge - conn.inbox_charge
        conn.inbox_charge = charge
        if conn.topic is not None:
            if not conn.closing and conn.sock.fileno() not in usage.subscribers:
                usage.subscribers[conn.sock.fileno()] = conn
            usage.backlog += len(conn.outbox) - conn.backlog_charge
            conn.backlog_charge = len(conn.outbox)
        partial = 0 < inbox < announced or 0 < inbox < header.size
        if conn.closing or conn.topic is not None or (conn.requests and not partial):
            conn.waiting_since = None
        elif conn.waiting_since is None:
            conn.waiting_since = time.monotonic()
            self._deadlines = True

    def _sweep(self, now: float) -> None:
        """Close the connections whose time is up: those that sent no whole request within the
        idle bound, and the refused whose last words were not read."""
        if not self._deadlines or now < self._next_sweep:
            return
        idle = self.limits.idle_s
        self._next_sweep = now + min(0.5, idle / 4)
        pending = False
        for conn in list(self.connections.values()):
            if conn.close_by is not None:
                if now >= conn.close_by:
                    self._drop(conn)
                else:
                    pending = True
            elif conn.waiting_since is not None:
                if now - conn.waiting_since >= idle:
                    what = "part of a request" if conn.inbox else "no request"
                    message = (
                        f"refused: this connection sent {what} and no whole one within "
                        f"{idle:g} s; the engine closed it (gpudesk's clients send theirs as "
                        "soon as they connect)"
                    )
                    self._refuse(conn, protocol.REFUSED, "idle", message)
                pending = True
        self._deadlines = pending

    def _cut_subscriber(self, conn: _Connection, kind: str, why: str) -> None:
        message = (
            f"events were missed: {why}. The engine stopped sending them here; subscribe again "
            "and read the current state (`gpudesk queue`) to catch up"
        )
        self._refuse(conn, protocol.EVENTS_MISSED, kind, message)

    def _refuse(self, conn: _Connection, code: str, kind: str, message: str) -> None:
        """Close `conn` after telling it why: what it was sent of a frame is finished, the rest
        of its outbox (events no one read) gives way to an error frame, and it is dropped once
        that is read or PARTING_S later. The engine's log says so too (`_say`, by `kind`)."""
        self._say(conn.caller, kind, message)
        del conn.outbox[conn.started :]
        if conn.topic is not None:  # no longer a subscriber the user's bound may cut
            self.usage[conn.caller.uid].subscribers.pop(conn.sock.fileno(), None)
        conn.outbox += protocol.frame(protocol.encode_error(None, code, message))
        conn.inbox.clear()
        conn.closing = True
        conn.close_by = time.monotonic() + PARTING_S
        self._deadlines = True
        self._write(conn)

    def _say(self, caller: Caller, kind: str, message: str) -> None:
        """Log a refusal: once a minute per user and kind, with how many went unlogged."""
        now = time.monotonic()
        key = (caller.uid, kind)
        last, since = self._said.get(key, (-REFUSAL_LOG_EVERY_S, 0))
        if now - last < REFUSAL_LOG_EVERY_S:
            self._said[key] = (last, since + 1)
            return
        more = f" ({since} more like it since the last)" if since else ""
        log.warning("pid %s, uid %d: %s%s", caller.pid, caller.uid, message, more)
        self._said[key] = (now, 0)

    def _drop(self, conn: _Connection) -> None:
        conn.closing = True
        fd = conn.sock.fileno()
        if self.connections.pop(fd, None) is not None:
            usage = self.usage[conn.caller.uid]
            usage.connections -= 1
            usage.inbox -= conn.inbox_charge
            usage.backlog -= conn.backlog_charge
            usage.subscribers.pop(fd, None)
            if not conn.admin:
                self.users_connections -= 1
            if not usage.connections:
                del self.usage[conn.caller.uid]
        conn.sock.close()


class CannotListen(Exception):
    """The control socket's path cannot be listened at (`busy`: a live engine listens there)."""

    def __init__(self, message: str, busy: bool = False) -> None:
        super().__init__(message)
        self.busy = busy


def _turn_away(sock: socket.socket, message: str) -> None:
    """Tell a connection why it is not taken, then close it (a new connection's buffer has room
    for these few bytes, so the send does not block)."""
    with contextlib.suppress(OSError):
        sock.send(protocol.frame(protocol.encode_error(None, protocol.REFUSED, message)))
    sock.close()


def _connection_room() -> int:
    """How many connections the engine may hold: MAX_CONNECTIONS, or fewer when its open-file
    limit is lower, after raising the limit's soft value toward NOFILE_WANTED (up to the hard
    limit; systemd gives services 1024 soft, 524288 hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = NOFILE_WANTED if hard == resource.RLIM_INFINITY else min(NOFILE_WANTED, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit to %d: %s", wanted, exc)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(ADMIN_CONNECTIONS + 1, min(MAX_CONNECTIONS, soft - FD_RESERVE))


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
