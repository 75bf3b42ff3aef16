"""The transport under `gpudesk.api.Client`: `Connection`, a zmq REQ socket to one engine (raw
`request()` / `exchange()`, and `subscribe()` to its events), and starting the engine when needed
(`start_engine`, `engine_pid`, `connect`). zmq is imported where a socket is made, so asking
whether an engine runs (`engine_pid`) costs no zmq."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gpudesk.api.errors import TOO_LARGE, EngineError
from gpudesk.engine import diskspace, protocol
from gpudesk.engine.station import StationConfig
from gpudesk.paths import Home, UnsafePath, check_owner, open_state_file
from gpudesk.spawn import SAFE_CWD, module_argv
from gpudesk.units import byte_size

if TYPE_CHECKING:
    import zmq

DEFAULT_TIMEOUT_S = 30.0
START_TIMEOUT_S = 20.0
# After the engine drops the connection a request went out on, how long a reply may still come
# (the request may have been queued, and sent again once reconnected) before it counts as lost.
DROPPED_GRACE_S = 1.0
# A line the engine logs when it refuses to start: "<date> <time> ERROR <logger>: <message>".
_LOGGED_ERROR = re.compile(r"^\S+ \S+ (?:ERROR|CRITICAL) \S+: (.*)$")


def engine_pid(home: Home) -> int | None:
    """The pid of the engine holding this home's lock, or None when no engine runs.
    HomeError when the home is another user's."""
    check_owner(home.root)
    try:
        fd = open_state_file(home.lock, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except UnsafePath as exc:
        raise EngineError(str(exc)) from None
    with os.fdopen(fd) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = handle.read(64).strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


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


def start_engine(
    home: Home, station: StationConfig | None = None, timeout: float = START_TIMEOUT_S
) -> int:
    """Start a daemon for `home` in its own session and wait until it answers."""
    try:
        (station or StationConfig()).with_env_override()
    except ValueError as exc:
        raise EngineError(str(exc), "invalid_args") from None
    argv = module_argv("gpudesk.engine.daemon", "--home", str(home.root))
    if station is not None:
        argv += ["--station", json.dumps(station.to_dict())]
    try:
        home.ensure()
        log = open_state_file(home.engine_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except UnsafePath as exc:
        raise EngineError(str(exc)) from None
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
        )
    finally:
        os.close(log)
    deadline = time.monotonic() + timeout
    client = Connection(home, timeout=1.0)
    try:
        while time.monotonic() < deadline:
            if engine_pid(home) is not None:
                try:
                    return int(client.request("ping")["pid"])
                except EngineError:
                    pass
            elif process.poll() is not None:
                if process.returncode == diskspace.EXIT_DISK_FULL:
                    # engine.log could not take the engine's words: say them here instead
                    raise EngineError(diskspace.start_text(home.root))
                refused = _start_failure(home, offset)
                if refused:
                    raise EngineError(f"the engine did not start: {refused}")
                raise EngineError(
                    f"the engine did not start (exit {process.returncode}); "
                    f"the end of {home.engine_log}:\n{_log_tail(home)}"
                )
            time.sleep(0.02)
    finally:
        client.close()
    raise EngineError(
        f"the engine did not answer within {timeout:.0f} s; "
        f"see {home.engine_log}:\n{_log_tail(home)}"
    )


class Connection:
    """A REQ socket to the engine of `home`: one request in flight, replies as raw bytes
    (`exchange`) or as the protocol's plain result (`request`, for tests and tools that speak
    the raw protocol; front ends use `gpudesk.api.Client`, which decodes into the models)."""

    def __init__(self, home: Home, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.home = home
        self.timeout = timeout
        import zmq

        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._dropped: zmq.Socket | None = None  # the socket's disconnect events
        self._ids = itertools.count(1)

    def _socket(self) -> tuple[zmq.Socket, zmq.Socket]:
        """The REQ socket, and a monitor telling when the engine drops its connection: zmq
        would silently reconnect, and the request in flight is lost (the engine refuses a
        message over MAXMSGSIZE that way, or it stopped)."""
        import zmq

        if self._sock is None or self._dropped is None:
            self._check_sockets()
            sock = self._ctx.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            self._dropped = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            sock.connect(self.home.control_endpoint)
            self._sock = sock
        return self._sock, self._dropped

    def _check_sockets(self) -> None:
        """Before anything is sent: the socket folder must be this user's, reached through no
        link, or a request (environment variables included) could go to someone else."""
        try:
            self.home.checked_socket_dir()
        except UnsafePath as exc:
            raise EngineError(str(exc)) from None
        except FileNotFoundError as exc:
            raise EngineError(
                f"no engine is listening for {self.home.root}: {exc.filename} does not exist "
                "(start one with `gpudesk engine start`)"
            ) from None

    def close(self) -> None:
        if self._sock is not None:
            if self._dropped is not None:
                self._sock.disable_monitor()
                self._dropped.close(linger=0)
                self._dropped = None
            self._sock.close(linger=0)
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
        """Send one request and return the engine's reply as it came (JSON bytes)."""
        import zmq

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
        sock, dropped = self._socket()
        try:
            while dropped.poll(0):  # disconnects before this request are not its business
                dropped.recv_multipart()
            sock.send(payload)
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            poller.register(dropped, zmq.POLLIN)
            deadline = time.monotonic() + self.timeout
            dropped_at: float | None = None
            while (left := deadline - time.monotonic()) > 0:
                if dropped_at is not None:
                    left = min(left, dropped_at + DROPPED_GRACE_S - time.monotonic())
                    if left <= 0:
                        raise EngineError(
                            f"the engine for {self.home.root} closed the connection without "
                            f"answering this {op!r} request ({byte_size(len(payload))}): it was "
                            "larger than the engine takes, or the engine stopped "
                            f"(`gpudesk engine status`; its log: {self.home.engine_log})"
                        )
                ready = dict(poller.poll(int(left * 1000) + 1))
                if sock in ready:
                    return sock.recv()
                if dropped in ready:
                    dropped.recv_multipart()
                    dropped_at = dropped_at or time.monotonic()
            raise EngineError(
                f"the engine for {self.home.root} did not answer within {self.timeout:g} s "
                f"(is it running? `gpudesk engine status`; its log: {self.home.engine_log})"
            )
        except BaseException:
            # A REQ socket that missed its reply (a time-out, a Ctrl-C) cannot send again.
            self.close()
            raise

    @contextmanager
    def subscribe(self, topic: str = "") -> Iterator[zmq.Socket]:
        import zmq

        self._check_sockets()
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
        sock.connect(self.home.events_endpoint)
        try:
            yield sock
        finally:
            sock.close(linger=0)


def connect(home: Home | None = None, *, autostart: bool = True) -> Connection:
    """A client for the home's engine, starting the engine first when it is not running."""
    home = home or Home.from_env()
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
