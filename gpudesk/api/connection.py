"""The transport under `gpudesk.api.Client`: `Connection`, a connection to one engine's control
socket (raw `request()` / `exchange()`, and `subscribe()` to its events), and starting the engine
when needed (`start_engine`, `engine_pid`, `connect`)."""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import shlex
import socket
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpudesk.api.errors import TOO_LARGE, EngineError
from gpudesk.core import protocol
from gpudesk.home_lock import EXIT_ALREADY_RUNNING, EXIT_BAD_HOME, PUT_BACK_WAIT_S, holder
from gpudesk.paths import (
    SYSTEM_SOCKET,
    Home,
    HomeError,
    UnsafePath,
    check_owner,
    open_state_file,
    user_name,
)
from gpudesk.spawn import SAFE_CWD, module_argv
from gpudesk.units import byte_size

if TYPE_CHECKING:  # imported where an engine is started: a client that only asks never loads it
    from gpudesk.core.station import StationConfig

DEFAULT_TIMEOUT_S = 30.0
START_TIMEOUT_S = 20.0
# A line the engine logs when it refuses to start: "<date> <time> ERROR <logger>: <message>".
_LOGGED_ERROR = re.compile(r"^\S+ \S+ (?:ERROR|CRITICAL) \S+: (.*)$")


def engine_pid(home: Home) -> int | None:
    """The pid of the engine holding this home's lock, or None when no engine runs.
    HomeError when the home is another user's. A system engine's lock is root's: it is asked
    instead (None when nothing listens; EngineError when this user may not connect)."""
    if home.is_system:
        return _system_engine_pid(home)
    check_owner(home.root)
    try:
        fd = open_state_file(home.lock, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except UnsafePath as exc:
        raise EngineError(str(exc)) from None
    return holder(fd)


def _system_engine_pid(home: Home) -> int | None:
    try:
        with Connection(home, timeout=5.0) as probe:
            return int(probe.request("ping")["pid"])
    except (EngineNotListening, EngineClosed):  # none runs, or it is stopping
        return None


class EngineNotStarted(EngineError):
    """The engine `start_engine` started refused to start (or was refused before it ran):
    `status` is the daemon's exit status, which `engine start --system` exits with as the
    daemon would (home_lock.EXIT_ALREADY_RUNNING, EXIT_BAD_HOME, …)."""

    def __init__(self, message: str, status: int, code: str = "unavailable") -> None:
        super().__init__(message, code)
        self.status = status


class EngineNotListening(EngineError):
    """Nothing listens at the engine's socket (no engine runs)."""


class EngineClosed(EngineError):
    """The engine closed the connection without answering or saying why (it stopped); when it
    refuses a connection or a request it says why, and that is raised instead."""


class EngineNotAllowed(EngineError):
    """The socket's mode refused this user: not a member of the station's group; or, for a
    moment, a socket an engine starting has made and not yet opened to its group."""


class EngineSilent(EngineError):
    """The engine took a request and did not answer it in time (hung, stopped by a signal,
    or busy starting)."""


class Outage(Protocol):
    """What a connection does while its engine is away (`Connection.outage`)."""

    def away(self, error: EngineError) -> None:
        """No engine answered this request (`error` says why: none listens, it closed the
        connection, the socket refused this user, or it held the request past the timeout):
        wait a while before it is sent again, or raise to give up."""

    def back(self) -> None:
        """A request was answered (after an outage, or not)."""


def _engine_log(home: Home, offset: int | None = None, tail: int = 16384) -> str | None:
    """The engine's log from `offset` (else its last `tail` bytes), read as every state file
    is (never through a link); None when it cannot be read."""
    try:
        with os.fdopen(open_state_file(home.engine_log, os.O_RDONLY), "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - tail) if offset is None else offset)
            return log.read().decode(errors="replace")
    except (OSError, UnsafePath):
        return None


def _log_tail(home: Home, lines: int = 8) -> str:
    text = (_engine_log(home) or "").splitlines()[-lines:]
    return "\n".join("    " + line for line in text)


def _start_failure(home: Home, offset: int) -> str | None:
    """What an engine that refused to start logged (from `offset` of its log on): its error
    paragraphs, or None when it logged none (a crash: the caller shows the log's end)."""
    text = _engine_log(home, offset)
    if text is None:
        return None
    found = [m.group(1) for line in text.splitlines() if (m := _LOGGED_ERROR.match(line))]
    return " ".join(found) if found and "Traceback" not in text else None


def daemon_args(
    home: Home,
    station: StationConfig | None,
    system_args: tuple[str, ...] = (),
    keys: Sequence[str] | None = None,
) -> list[str]:
    """The engine daemon's command line for `home` (`gpudesk.engine.daemon.main`). `keys`: only
    these settings of `station` are sent, laid over what the home's last engine used (`gpudesk
    engine start --slots 4` keeps the saved metrics endpoint and grid); all of them when None."""
    if home.system_socket is not None:
        args = ["--system", "--state-dir", str(home.root), "--socket", str(home.system_socket)]
        args += system_args
    else:
        args = ["--home", str(home.root)]
    if station is not None:
        args += ["--station", json.dumps(station.table(keys))]
    return args


def start_engine(
    home: Home,
    station: StationConfig | None = None,
    timeout: float = START_TIMEOUT_S,
    system_args: tuple[str, ...] = (),
    keys: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start a daemon for `home` in its own session and wait until it answers. A system
    engine's home (root only) is given with the daemon's `--group` / `--admin-group` options in
    `system_args`. `env`: the daemon's environment (default: this process's); its
    GPUDESK_BACKEND wins over `station`'s backend there."""
    from gpudesk.core.station import StationConfig

    try:
        (station or StationConfig()).with_env_override(env)
    except ValueError as exc:
        raise EngineError(str(exc), "invalid_args") from None
    import subprocess  # here: starting an engine is rare, and every command imports this

    from gpudesk import diskspace

    argv = module_argv("gpudesk.engine.daemon", *daemon_args(home, station, system_args, keys))
    try:
        home.ensure()
        log = open_state_file(home.engine_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except HomeError as exc:  # a link or someone else's; a system engine without root
        raise EngineNotStarted(str(exc), EXIT_BAD_HOME) from None
    offset = os.lseek(log, 0, os.SEEK_END)  # what this engine logs starts here
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=SAFE_CWD,
            start_new_session=True,
            close_fds=True,
            env=None if env is None else dict(env),
        )
    finally:
        os.close(log)
    deadline = time.monotonic() + timeout
    client = Connection(home, timeout=1.0)
    another_by: float | None = None  # it said another engine runs the home: waited for until
    try:
        while time.monotonic() < deadline:
            if engine_pid(home) is not None:
                try:
                    return int(client.request("ping")["pid"])
                except EngineError:
                    pass
            elif process.poll() is not None:
                if process.returncode == EXIT_ALREADY_RUNNING:  # one putting its folder back
                    another_by = another_by or time.monotonic() + PUT_BACK_WAIT_S
                    if time.monotonic() < another_by:
                        time.sleep(0.02)
                        continue
                if process.returncode == diskspace.EXIT_DISK_FULL:
                    # engine.log could not take the engine's words: say them here instead
                    raise EngineNotStarted(diskspace.start_text(home.root), process.returncode)
                refused = _start_failure(home, offset)
                if refused:
                    # the daemon's exit 2 is bad arguments (an unknown --group): the command's
                    # exit 2 too, as for any bad input; the rest are failures (exit 1)
                    bad_input = "invalid_args" if process.returncode == 2 else "unavailable"
                    said = f"the engine did not start: {refused}"
                    raise EngineNotStarted(said, process.returncode, bad_input)
                raise EngineNotStarted(
                    f"the engine did not start (exit {process.returncode}); "
                    f"the end of {home.engine_log}:\n{_log_tail(home)}",
                    process.returncode,
                )
            time.sleep(0.02)
    finally:
        client.close()
    raise EngineError(
        f"the engine did not answer within {timeout:.0f} s; "
        f"see {home.engine_log}:\n{_log_tail(home)}"
    )


class Connection:
    """A connection to the engine of `home` on its control socket: one request in flight,
    replies as raw bytes (`exchange`) or as the protocol's plain result (`request`, for tests
    and tools that speak the raw protocol; front ends use `gpudesk.api.Client`, which decodes
    into the models)."""

    def __init__(self, home: Home, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.home = home
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        # Set: a request no engine answered (none listens, it closed the connection without a
        # word, its socket refused us, it held the request past `timeout`: stopped, or
        # restarting for an upgrade) is sent again once `outage.away` returns. Only for a
        # reader's requests (`wait`, `logs -f`): sent twice, they change nothing.
        self.outage: Outage | None = None

    @property
    def socket_path(self) -> Path:
        return self.home.control_socket

    def _connect(self) -> socket.socket:
        """A new connection, after checking whom the socket belongs to."""
        self._check_sockets()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.socket_path))
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise EngineNotListening(
                _not_a_socket(self.socket_path) or _not_listening(self.home)
            ) from None
        except PermissionError:
            sock.close()
            raise EngineNotAllowed(_not_allowed(self.home)) from None
        except OSError as exc:
            sock.close()
            raise EngineError(
                f"cannot reach the engine at {self.socket_path}: {exc.strerror or exc}"
            ) from None
        return sock

    def _socket(self) -> socket.socket:
        """The connection, made again when the engine closed it since the last request (it
        stopped, and another may run now): nothing was in flight on it, so nothing is lost."""
        if self._sock is not None and _closed_by_peer(self._sock):
            self.close()
        if self._sock is None:
            self._sock = self._connect()
        return self._sock

    def _check_sockets(self) -> None:
        """Before anything is sent: the socket folder must be this user's, reached through no
        link, or a request (environment variables included) could go to someone else."""
        try:
            self.home.checked_socket_dir()
        except UnsafePath as exc:
            raise EngineError(str(exc)) from None
        except FileNotFoundError as exc:
            raise EngineNotListening(
                f"{_not_listening(self.home)}: {exc.filename} does not exist"
            ) from None
        except PermissionError:
            raise EngineNotAllowed(_not_allowed(self.home)) from None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        try:
            _, result = protocol.decode_reply(self.exchange(op, args))
        except protocol.ProtocolError as exc:
            raise EngineError(exc.message, exc.code) from None
        return result

    def exchange(self, op: str, args: dict[str, Any]) -> bytes:
        """Send one request and return the engine's reply as it came (JSON bytes); through an
        outage where `outage` is set."""
        while True:
            try:
                reply = self._exchange_once(op, args)
            except (EngineNotListening, EngineClosed, EngineNotAllowed, EngineSilent) as exc:
                if self.outage is None:
                    raise
                self.outage.away(exc)
                continue
            if self.outage is not None:
                self.outage.back()
            return reply

    def _exchange_once(self, op: str, args: dict[str, Any]) -> bytes:
        request_id = next(self._ids)
        payload = protocol.Request(op=op, args=args, id=request_id).encode()
        if len(payload) > protocol.MAX_MESSAGE_BYTES:
            raise EngineError(
                f"this {op!r} request is {byte_size(len(payload))}, more than the "
                f"{byte_size(protocol.MAX_MESSAGE_BYTES)} the engine takes in one message, so it "
                "was not sent: send less at once (fewer jobs per submit), or keep large values "
                "(a big env) out of every job",
                TOO_LARGE,
            )
        values = protocol.json_values(payload)
        if values > protocol.MAX_REQUEST_VALUES:
            raise EngineError(
                f"this {op!r} request holds up to {values:,} JSON values, more than the "
                f"{protocol.MAX_REQUEST_VALUES:,} the engine parses in one message, so it was not "
                "sent: send less at once (fewer jobs per submit, about 2,000 plain ones fit)",
                TOO_LARGE,
            )
        sock = self._socket()
        deadline = time.monotonic() + self.timeout
        try:
            try:
                _send_all(sock, protocol.frame(payload), deadline)
                return _read_frame(sock, deadline)
            except _Closed:
                # The engine may have closed after saying why (it refused the connection): its
                # words are the answer.
                parting = _parting_words(sock)
                if parting is not None:
                    self.close()
                    return parting
                if _greets_like_zmq(self.socket_path):
                    raise _OtherProtocol from None
                raise
        except _OtherProtocol:
            self.close()
            raise EngineError(
                f"{self.home.description} does not speak this gpudesk's protocol: it is an "
                "engine of an older gpudesk (which spoke zmq), still running after an upgrade. "
                "Stop it (`pkill -f gpudesk.engine.daemon`; its running jobs keep running and "
                "the next engine adopts them), then run the command again.",
                "unsupported_version",
            ) from None
        except _Closed:
            self.close()
            raise EngineClosed(
                f"{self.home.description} closed the connection without answering this "
                f"{op!r} request and without saying why: it stopped or restarted, or dropped "
                f"the connection (`gpudesk engine status`; its log: {self.home.log_hint})"
            ) from None
        except TimeoutError:
            self.close()
            raise EngineSilent(
                f"{self.home.description} did not answer within {self.timeout:g} s "
                f"(is it running? `gpudesk engine status`; its log: {self.home.log_hint})"
            ) from None
        except BaseException:
            # a reply may still come on this connection: it must not be read as the next one's
            self.close()
            raise

    @contextmanager
    def subscribe(self, topic: str = "") -> Iterator[EventSocket]:
        """A connection of its own that receives the engine's events on `topic` ("job",
        "telemetry", or "" for both) from now on."""
        sock = self._connect()
        try:
            deadline = time.monotonic() + self.timeout
            request = protocol.Request(op=protocol.SUBSCRIBE_OP, args={"topic": topic}, id=0)
            try:
                try:
                    _send_all(sock, protocol.frame(request.encode()), deadline)
                    reply = _read_frame(sock, deadline)
                except _Closed:
                    parting = _parting_words(sock)
                    if parting is None:
                        raise
                    reply = parting
                protocol.decode_reply(reply)
            except (_Closed, TimeoutError) as exc:
                raise EngineError(f"could not subscribe to the engine's events: {exc}") from None
            except protocol.ProtocolError as exc:
                raise EngineError(exc.message, exc.code) from None
            yield EventSocket(sock)
        finally:
            sock.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle connection is done with: the engine closed it, or sent something
    unasked (its last words before closing it), which must not be read as the next reply."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        pass
    return True


def _parting_words(sock: socket.socket) -> bytes | None:
    """The error frame an engine sent before closing the connection (why it refused it), when
    one is there to read; None when it closed without a word."""
    try:
        raw = _read_frame(sock, time.monotonic() + 1.0)
    except (_Closed, _OtherProtocol, TimeoutError, OSError):
        return None
    try:
        protocol.decode_reply(raw)
    except protocol.ProtocolError:
        return raw
    return None


def who_starts(home: Home) -> str:
    """Who starts the home's engine, and how: "an admin starts it (…)" for a station's."""
    if not home.is_system:
        return "`gpudesk engine start` starts it"
    start = "`sudo systemctl start gpudesk`, or `sudo gpudesk engine start --system`"
    if home.system_socket != SYSTEM_SOCKET:  # that command would start the default one
        socket = shlex.quote(str(home.system_socket))
        start = f"its service, or `sudo gpudesk engine start --system --socket {socket}` "
        start += "with its --state-dir"
    return f"an admin starts it ({start})"


def _not_listening(home: Home) -> str:
    if home.is_system:
        return (
            f"{home.description} is not running; {who_starts(home)}. To use a personal engine "
            "instead, set GPUDESK_HOME"
        )
    return f"no engine is listening for {home.root} (start one with `gpudesk engine start`)"


def _not_a_socket(path: Path) -> str | None:
    """Why no engine can listen at `path` when something other than a socket is there."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return None
    return (
        f"no engine is listening at {path}: something other than a socket is there (a file "
        "or folder left by hand or by another program), and no engine can listen there until "
        f"it is moved away (`mv {path} {path}.old`; for a station's socket an admin does it), "
        "then the engine started again"
    )


def _not_allowed(home: Home) -> str:
    """Connecting was refused by the socket's mode: the user is not in the station's group."""
    from gpudesk.core.known_owner import group_name

    try:
        group = group_name(home.socket_dir.stat().st_gid)
    except OSError:
        group = "the station's group"
    me = user_name(os.getuid())
    return (
        f"you may not use {home.description}: it serves the members of the group {group}, "
        f"and you ({me}) are not one. Ask an admin to add you (`sudo usermod -aG {group} "
        f"{me}`), then log in again so the new group applies; or use a personal engine "
        "(set GPUDESK_HOME)."
    )


class _Closed(Exception):
    """The engine closed the connection."""


def _send_all(sock: socket.socket, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            sent = sock.send(view)
        except (BrokenPipeError, ConnectionResetError):
            raise _Closed("the engine closed the connection") from None
        except TimeoutError:
            raise TimeoutError from None
        view = view[sent:]


def _recv_exact(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    parts = bytearray()
    while len(parts) < size:
        sock.settimeout(None if deadline is None else max(0.001, deadline - time.monotonic()))
        try:
            chunk = sock.recv(min(size - len(parts), 1 << 20))
        except ConnectionResetError:
            chunk = b""
        except TimeoutError:
            raise TimeoutError from None
        if not chunk:
            raise _Closed("the engine closed the connection")
        parts += chunk
    return bytes(parts)


def _greets_like_zmq(path: Path) -> bool:
    """Does whatever listens at `path` speak first, with a ZMTP greeting? gpudesk's engine never
    speaks first; a zmq socket greets every connection at once. Asked only after a connection
    was closed without an answer, so a working engine never pays for it."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
        ready, _, _ = select.select([probe], [], [], 0.5)
        return bool(ready) and probe.recv(1, socket.MSG_PEEK) == b"\xff"
    except OSError:
        return False
    finally:
        probe.close()


class _OtherProtocol(Exception):
    """The peer does not speak gpudesk's frames: a ZMTP greeting (an engine of a gpudesk from
    before the shared station, which spoke zmq on the same socket path) or worse."""


def _read_frame(sock: socket.socket, deadline: float | None) -> bytes:
    header = protocol.FRAME_HEADER
    head = _recv_exact(sock, header.size, deadline)
    if head[0] == 0xFF:  # ZMTP's greeting starts with 0xFF; no reply is 4 GiB long
        raise _OtherProtocol
    (length,) = header.unpack(head)
    return _recv_exact(sock, length, deadline)


class EventSocket:
    """The engine's events on a subscribed connection, one frame each (`protocol.split_event`)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def _frame_ready(self) -> bool:
        header = protocol.FRAME_HEADER
        if len(self._buffer) < header.size:
            return False
        (length,) = header.unpack_from(self._buffer)
        return len(self._buffer) >= header.size + length

    def poll(self, timeout_ms: int) -> bool:
        """True once a whole event can be read, False after `timeout_ms` without one. An
        engine that went away raises EngineError."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while not self._frame_ready():
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._sock], [], [], max(0.0, left))
            if not ready:
                return False
            try:
                chunk = self._sock.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                raise EngineError("the engine closed the event stream (it stopped?)")
            self._buffer += chunk
        return True

    def recv_event(self) -> tuple[bytes, bytes]:
        """The next event's (topic, body); call after `poll` said one is ready."""
        if not self.poll(0):
            raise EngineError("no event is ready")
        header = protocol.FRAME_HEADER
        (length,) = header.unpack_from(self._buffer)
        body = bytes(self._buffer[header.size : header.size + length])
        del self._buffer[: header.size + length]
        if body.startswith(b"{"):  # no topic: the engine's last words before it closes
            try:
                protocol.decode_reply(body)
            except protocol.ProtocolError as exc:
                raise EngineError(exc.message, exc.code) from None
            raise EngineError("the engine sent a reply on its event stream", "bad_reply")
        return protocol.split_event(body)


def connect(home: Home | None = None, *, autostart: bool = True) -> Connection:
    """A client for the home's engine, starting the engine first when it is not running."""
    home = home or Home.from_env()
    if home.is_system:
        return Connection(home)  # never started by a client: its errors say who starts it
    if engine_pid(home) is None:
        if not autostart:
            raise EngineError(
                f"no engine is running for {home.root}; start one with `gpudesk engine start`"
            )
        start_engine(home)
    return Connection(home)


def submit_env() -> dict[str, str]:
    """The environment jobs start from: the submitter's, as it is. PATH is left alone: with
    gpudesk installed as a tool (pipx, uv tool), a job's `python` must be the user's, not the
    interpreter gpudesk runs on (issue 17)."""
    return dict(os.environ)
