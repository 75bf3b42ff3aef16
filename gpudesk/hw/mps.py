"""CUDA MPS: one control daemon per GPU (or MIG device), started, watched and stopped here.

gpudesk runs one `nvidia-cuda-mps-control` daemon per device, keyed by the device's UUID, each with
its own pipe and log directory::

    $GPUDESK_HOME/mps/<key>/uuid    the device's UUID (so a later engine finds its daemons)
    $GPUDESK_HOME/mps/<key>/pipe    CUDA_MPS_PIPE_DIRECTORY (0700), or a short folder under
                                    /tmp/gpudesk-<uid>/ when the home's path is too long
    $GPUDESK_HOME/mps/<key>/log     CUDA_MPS_LOG_DIRECTORY: control.log, server.log

A job joins a device's MPS server by running with `client_env(...)`; the daemon starts the server
lazily, when its first client connects.

What this relies on about the real tool (NVIDIA MPS documentation, "Appendix: Tools and Interface
Reference" and "Legacy MPS v2 Interface" at docs.nvidia.com/deploy/mps/, and the
nvidia-cuda-mps-control(1) man page):

- `nvidia-cuda-mps-control -d` forks the daemon and returns; the daemon serves the devices in
  its CUDA_VISIBLE_DEVICES (UUIDs are the recommended form) and listens on the socket `control`
  in CUDA_MPS_PIPE_DIRECTORY, where it also writes `nvidia-cuda-mps-control.pid`.
- Commands are read from stdin: `get_server_list` prints one server PID a line,
  `get_server_status <PID>` prints the server's state (ACTIVE, or FAULT after a fatal GPU
  exception: such a server refuses new clients until all of its clients have exited, docs
  "Error Containment"), `quit` stops the daemon (`echo quit | nvidia-cuda-mps-control`).
- Without a daemon listening, a command prints "Cannot find MPS control daemon process" (on
  stderr) and exits with status 1; a second `-d` on the same pipe directory prints "An instance of
  this daemon is already running" and exits with status 1; `get_server_status` of a server that
  is gone prints "Server <PID> not found" and exits 0 (all seen on an H200, driver 580.159.04,
  2026-11-29: bench/results/h200-2026-11-29/run2/raw_probe.json).
- Client environment: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (a percentage of the device's threads),
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT as a comma list of `<device>=<size>` such as "0=4096M"
  ("Appendix: Environment Variables"); device ordinals are those the client sees.
- Unix socket paths are limited by sun_path (108 bytes with the terminator on Linux).

tests/fakes/nvidia-cuda-mps-control is a stand-in with the same interface, used by the tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import msgspec

from gpudesk.paths import UnsafePath, private_dir

CONTROL_ENV = "GPUDESK_MPS_CONTROL"
CONTROL_BINARY = "nvidia-cuda-mps-control"
CONTROL_SOCKET = "control"
PID_FILE = "nvidia-cuda-mps-control.pid"
NOT_RUNNING = "Cannot find MPS control daemon process"
ALREADY_RUNNING = "An instance of this daemon is already running"
SERVER_GONE = "Server {pid} not found"  # get_server_status of a server that has exited
# Same budget as gpudesk/paths.py for its sockets (sun_path is 108 bytes on Linux), with room in
# the pipe folder for socket names longer than "control" that some driver versions may create.
_MAX_SOCKET_PATH = 100
_PIPE_ENTRY_ROOM = 24
_POLL_INTERVAL = 0.02

MpsState = Literal["running", "fault", "stopped", "unavailable"]


class MpsError(RuntimeError):
    """MPS could not be started, queried or stopped; the message says why and what to do."""


class _DaemonNotRunning(Exception):
    """No control daemon answers on the pipe directory (internal)."""


class MpsServer(msgspec.Struct, frozen=True):
    """The MPS control daemon serving one device, and where it lives.

    `pid` is the daemon's pid from its pid file (None when unknown); `adopted` is True when the
    daemon was already running (left by a previous engine) and reused rather than started.
    """

    uuid: str
    key: str
    root: Path
    pipe_dir: Path
    log_dir: Path
    pid: int | None = None
    adopted: bool = False

    @property
    def control_socket(self) -> Path:
        return self.pipe_dir / CONTROL_SOCKET

    @property
    def control_log(self) -> Path:
        return self.log_dir / "control.log"


class MpsStatus(msgspec.Struct, frozen=True):
    """Health of one device's MPS.

    state: `running` (daemon up, every server ACTIVE or none started yet), `fault` (a server
    reports FAULT or another non-ACTIVE state, or the daemon does not answer), `stopped` (no
    daemon), `unavailable` (no control binary). `usable` says whether a new job may join MPS on
    this device now; when False it must fall back to naive time-slicing (or wait).
    """

    uuid: str
    state: MpsState
    usable: bool
    message: str
    daemon_pid: int | None = None
    servers: dict[int, str] = msgspec.field(default_factory=dict)  # server pid -> reported state


def _private_dir(path: Path) -> Path:
    """The pipe folders: this user's only, never a link (a squatter's folder in /tmp would
    receive every MPS control command)."""
    remedy = (
        "gpudesk puts an MPS daemon's pipe there when the home's path is too long for it; "
        "remove the folder (as root if need be) or choose a shorter GPUDESK_HOME."
    )
    try:
        return private_dir(path, remedy)
    except UnsafePath as exc:
        raise MpsError(str(exc)) from None


def device_key(uuid: str) -> str:
    """A short, stable folder name for a device: "gpu-"/"mig-" and 12 hex digits of a hash."""
    kind = uuid.split("-", 1)[0].lower() if "-" in uuid else ""
    prefix = kind if kind in ("gpu", "mig") else "dev"
    return f"{prefix}-{hashlib.sha1(uuid.encode()).hexdigest()[:12]}"


def _runs_binary(pid: int, names: Iterable[str]) -> bool:
    """pid is alive and runs one of `names` (so a recycled pid is not mistaken for a daemon)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot look: trust the pid file
    return any(name.encode() in cmdline for name in names)


def short_pipe_root(home_root: Path) -> Path:
    """Where a home's MPS pipe folders go when its own path is too long for a socket's: a
    folder of its own under /tmp/gpudesk-<uid>/, named by a hash of the home's path."""
    digest = hashlib.sha1(str(Path(home_root).absolute()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"gpudesk-{os.getuid()}" / f"mps-{digest}"


class MpsManager:
    """Starts, adopts, queries and stops the per-device MPS control daemons of one gpudesk home.

    Thread-safe. Every subprocess call is bounded by a timeout; failures raise MpsError.
    """

    def __init__(
        self,
        home_root: Path,
        control: str | None = None,
        *,
        command_timeout: float = 5.0,
        start_timeout: float = 10.0,
        stop_timeout: float = 10.0,
        shared: bool = False,
    ) -> None:
        self.home_root = Path(home_root).absolute()
        # A system engine's daemons (root's) serve the jobs of every user of the station: their
        # pipe folders must be reachable by those users' MPS clients (traverse only; the
        # daemon's sockets in them carry their own modes). NVIDIA's multi-user MPS: one control
        # daemon per GPU started by root, its server serving one uid at a time.
        self.shared = shared
        requested = control or os.environ.get(CONTROL_ENV) or CONTROL_BINARY
        self._requested = requested
        self._from_env = control is None and bool(os.environ.get(CONTROL_ENV))
        self.control = self._resolve(requested)
        self.command_timeout = command_timeout
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._lock = threading.RLock()
        self._known: set[str] = set()

    # --- discovery ----------------------------------------------------------------------------

    @staticmethod
    def _resolve(requested: str) -> str | None:
        if os.sep in requested:
            path = Path(requested).expanduser()
            return str(path.absolute()) if path.is_file() else None
        return shutil.which(requested)

    @property
    def available(self) -> bool:
        """The control binary was found (it may still fail to run: see ensure())."""
        return self.control is not None

    def _missing_binary_error(self) -> MpsError:
        if self._from_env or os.sep in self._requested:
            where = (
                f"{CONTROL_ENV}={self._requested}"
                if self._from_env
                else f"the configured path {self._requested}"
            )
            return MpsError(
                f"MPS is unavailable: {where} does not name an existing file. Point "
                f"{CONTROL_ENV} at the nvidia-cuda-mps-control executable of the NVIDIA driver, "
                "or unset it to search PATH."
            )
        return MpsError(
            f"MPS is unavailable: {CONTROL_BINARY} was not found on PATH. Install the NVIDIA "
            f"driver's compute utilities, or set {CONTROL_ENV} to the executable's path; until "
            "then jobs share GPUs by time-slicing."
        )

    @property
    def mps_root(self) -> Path:
        return self.home_root / "mps"

    def layout(self, uuid: str) -> MpsServer:
        """Where the daemon for `uuid` keeps its pipe and logs (computed only, nothing created)."""
        if not uuid or any(c.isspace() for c in uuid) or "," in uuid:
            raise ValueError(f"not a device UUID: {uuid!r}")
        key = device_key(uuid)
        root = self.mps_root / key
        pipe = root / "pipe"
        if len(str(pipe).encode()) + _PIPE_ENTRY_ROOM > _MAX_SOCKET_PATH:
            pipe = short_pipe_root(self.home_root) / key
        return MpsServer(uuid=uuid, key=key, root=root, pipe_dir=pipe, log_dir=root / "log")

    def known_uuids(self) -> list[str]:
        """Devices this home has run a daemon for: this manager's and earlier engines'."""
        found = set(self._known)
        if self.mps_root.is_dir():
            for record in self.mps_root.glob("*/uuid"):
                with contextlib.suppress(OSError):
                    text = record.read_text().strip()
                    if text:
                        found.add(text)
        return sorted(found)

    def _prepare(self, server: MpsServer) -> None:
        try:
            server.root.mkdir(parents=True, exist_ok=True)
            (server.root / "uuid").write_text(server.uuid + "\n")
            if not server.pipe_dir.is_relative_to(server.root):  # the short /tmp fallback
                _private_dir(server.pipe_dir.parent.parent)
                _private_dir(server.pipe_dir.parent)
            _private_dir(server.pipe_dir)
            if self.shared:
                for folder in (self.mps_root, server.root, server.pipe_dir):
                    os.chmod(folder, 0o711)
            server.log_dir.mkdir(exist_ok=True)
        except PermissionError as exc:
            raise MpsError(
                f"MPS for {server.uuid}: no permission to create {exc.filename}. The gpudesk home "
                "and its mps/ folder must belong to the user running the engine (a folder "
                "created by root, e.g. by `sudo gpudesk`, causes this)."
            ) from exc
        except OSError as exc:
            raise MpsError(
                f"MPS for {server.uuid}: cannot create {exc.filename}: {exc.strerror}."
            ) from exc
        for path in (server.pipe_dir, server.log_dir):
            if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
                raise MpsError(
                    f"MPS for {server.uuid}: {path} is not writable by this user (uid "
                    f"{os.getuid()}); a daemon started by another user, often root, may own it. "
                    "Stop that daemon (`echo quit | nvidia-cuda-mps-control` with "
                    f"CUDA_MPS_PIPE_DIRECTORY={server.pipe_dir}) and remove the folder."
                )
        self._known.add(server.uuid)

    def _daemon_env(self, server: MpsServer) -> dict[str, str]:
        # An inherited CUDA_MPS_* (e.g. an active thread percentage) would become the daemon's
        # default for every server it starts; only ours go in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(server.pipe_dir)
        env["CUDA_MPS_LOG_DIRECTORY"] = str(server.log_dir)
        return env

    def _daemon_pid(self, server: MpsServer) -> int | None:
        try:
            pid = int((server.pipe_dir / PID_FILE).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if pid > 0 and self._is_daemon(pid) else None

    def _is_daemon(self, pid: int) -> bool:
        names = {CONTROL_BINARY}
        if self.control:
            names.add(os.path.basename(self.control))
        return _runs_binary(pid, names)

    # --- talking to the daemon ----------------------------------------------------------------

    def _command(self, server: MpsServer, command: str) -> str:
        """Send one command; its stdout. Raises _DaemonNotRunning or MpsError."""
        if self.control is None:
            raise self._missing_binary_error()
        try:
            done = subprocess.run(
                [self.control],
                input=command + "\n",
                capture_output=True,
                text=True,
                env=self._daemon_env(server),
                timeout=self.command_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise MpsError(
                f"MPS for {server.uuid}: the control daemon did not answer `{command}` within "
                f"{self.command_timeout:g}s; it may be hung. See {server.control_log}."
            ) from exc
        except PermissionError as exc:
            raise self._permission_error(exc) from exc
        except OSError as exc:
            raise MpsError(
                f"MPS: cannot run {self.control}: {exc.strerror}. Check {CONTROL_ENV}."
            ) from exc
        output = done.stdout + done.stderr
        if NOT_RUNNING in output:
            raise _DaemonNotRunning(output.strip())
        if done.returncode != 0:
            raise MpsError(
                f"MPS for {server.uuid}: `{command}` failed with exit status {done.returncode}: "
                f"{output.strip() or '(no output)'}. See {server.control_log}."
            )
        return done.stdout

    def _permission_error(self, exc: OSError) -> MpsError:
        return MpsError(
            f"MPS: permission denied running {self.control} ({exc.strerror}). Make it executable "
            f"by this user, or point {CONTROL_ENV} at one that is."
        )

    def _answers(self, server: MpsServer) -> bool:
        try:
            self._command(server, "get_server_list")
        except _DaemonNotRunning:
            return False
        return True

    # --- lifecycle ----------------------------------------------------------------------------

    def ensure(self, uuid: str) -> MpsServer:
        """The running daemon for `uuid`: reused if one answers on its pipe dir, else started."""
        with self._lock:
            server = self.layout(uuid)
            if self.control is None:
                raise self._missing_binary_error()
            self._prepare(server)
            if self._answers(server):
                return self._with_pid(server, adopted=True)
            self._start(server)
            deadline = time.monotonic() + self.start_timeout
            while not self._answers(server):
                if time.monotonic() > deadline:
                    raise MpsError(
                        f"MPS for {uuid}: the control daemon did not come up within "
                        f"{self.start_timeout:g}s of `{CONTROL_BINARY} -d`. "
                        f"{self._log_tail(server)}"
                    )
                time.sleep(_POLL_INTERVAL)
            return self._with_pid(server, adopted=False)

    def _with_pid(self, server: MpsServer, adopted: bool) -> MpsServer:
        return MpsServer(
            uuid=server.uuid,
            key=server.key,
            root=server.root,
            pipe_dir=server.pipe_dir,
            log_dir=server.log_dir,
            pid=self._daemon_pid(server),
            adopted=adopted,
        )

    def _start(self, server: MpsServer) -> None:
        assert self.control is not None
        env = self._daemon_env(server)
        env["CUDA_VISIBLE_DEVICES"] = server.uuid
        # A file, not a pipe, for the output: a daemon that kept the inherited stdout open would
        # make reading a pipe wait for it to exit.
        with tempfile.TemporaryFile(mode="w+") as output:
            try:
                proc = subprocess.Popen(
                    [self.control, "-d"],
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd="/",
                    start_new_session=True,
                )
            except PermissionError as exc:
                raise self._permission_error(exc) from exc
            except OSError as exc:
                raise MpsError(
                    f"MPS: cannot run {self.control}: {exc.strerror}. Check {CONTROL_ENV}."
                ) from exc
            try:
                code = proc.wait(timeout=self.start_timeout)
            except subprocess.TimeoutExpired as exc:
                proc.kill()
                proc.wait()
                raise MpsError(
                    f"MPS for {server.uuid}: `{CONTROL_BINARY} -d` did not return within "
                    f"{self.start_timeout:g}s. {self._log_tail(server)}"
                ) from exc
            output.seek(0)
            text = output.read().strip()
        if code == 0 or ALREADY_RUNNING in text:
            return  # a racing start is fine: ensure() waits for whichever daemon answers
        lowered = text.lower()
        hint = (
            " It looks like a permission problem: the pipe and log folders must be writable "
            "by this user, and a GPU in EXCLUSIVE_PROCESS mode may need the daemon run as the "
            "same user as the jobs."
            if "permission" in lowered or "denied" in lowered
            else ""
        )
        raise MpsError(
            f"MPS for {server.uuid}: `{CONTROL_BINARY} -d` failed with exit status {code}: "
            f"{text or '(no output)'}.{hint} {self._log_tail(server)}"
        )

    def _log_tail(self, server: MpsServer, lines: int = 5) -> str:
        try:
            tail = server.control_log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"No control log at {server.control_log}."
        if not tail:
            return f"The control log {server.control_log} is empty."
        return f"Last lines of {server.control_log}: " + " | ".join(tail)

    def stop(self, uuid: str, timeout: float | None = None, force: bool = False) -> bool:
        """Quit the daemon of `uuid` and wait for it to exit. False when none was running.

        With `force`, a daemon that ignores `quit` gets SIGTERM, then SIGKILL; without it, that
        raises MpsError.
        """
        limit = self.stop_timeout if timeout is None else timeout
        with self._lock:
            server = self.layout(uuid)
            if self.control is None:
                return False
            pid = self._daemon_pid(server)
            try:
                self._command(server, "quit")
            except _DaemonNotRunning:
                if pid is None:
                    return False
            except MpsError:
                if not (force and pid):
                    raise
            if self._wait_gone(server, pid, limit):
                return True
            if force and pid:
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                    if self._wait_gone(server, pid, 2.0):
                        return True
            raise MpsError(
                f"MPS for {uuid}: the control daemon (pid {pid or 'unknown'}) was told to quit but "
                f"is still running after {limit:g}s; clients may still be attached. "
                f"{self._log_tail(server)}"
            )

    def _wait_gone(self, server: MpsServer, pid: int | None, limit: float) -> bool:
        deadline = time.monotonic() + limit
        while True:
            if pid is not None:
                gone = not self._is_daemon(pid)
            else:
                try:
                    gone = not self._answers(server)
                except MpsError:
                    gone = False
            if gone:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_INTERVAL)

    def stop_idle(self, busy_uuids: Iterable[str]) -> list[str]:
        """Quit the daemons of devices not in `busy_uuids`; the UUIDs whose daemon was stopped."""
        busy = set(busy_uuids)
        return self._stop_many(uuid for uuid in self.known_uuids() if uuid not in busy)

    def stop_all(self) -> list[str]:
        """Quit every daemon this home started (by this engine or an earlier one)."""
        return self._stop_many(self.known_uuids())

    def _stop_many(self, uuids: Iterable[str]) -> list[str]:
        stopped, errors = [], []
        for uuid in uuids:
            try:
                if self.stop(uuid):
                    stopped.append(uuid)
            except MpsError as exc:
                errors.append(str(exc))
        if errors:
            raise MpsError(" ".join(errors))
        return stopped

    # --- status and clients -------------------------------------------------------------------

    def status(self, uuid: str) -> MpsStatus:
        """Ask the daemon of `uuid` about its servers. Never raises for an unhealthy daemon."""
        server = self.layout(uuid)
        if self.control is None:
            return MpsStatus(uuid, "unavailable", False, str(self._missing_binary_error()))
        pid = self._daemon_pid(server)
        states: dict[int, str] = {}
        try:
            listing = self._command(server, "get_server_list")
            for word in listing.split():
                if not word.isdigit():
                    continue
                reply = self._command(server, f"get_server_status {word}").strip()
                if reply and reply != SERVER_GONE.format(pid=word):
                    states[int(word)] = reply.split()[0]
                # else the server exited between the listing and this question
        except _DaemonNotRunning:
            return MpsStatus(
                uuid,
                "stopped",
                False,
                f"no MPS control daemon for {uuid}; ensure() starts one",
                pid,
            )
        except MpsError as exc:
            return MpsStatus(
                uuid, "fault", False, f"{exc} New jobs fall back to time-slicing.", pid
            )
        faulted = [p for p, state in states.items() if state == "FAULT"]
        if faulted:
            return MpsStatus(
                uuid,
                "fault",
                False,
                f"MPS server {', '.join(map(str, faulted))} on {uuid} is in FAULT state (a client "
                "hit a fatal GPU error); it refuses new clients until its current ones exit, so "
                "new jobs fall back to time-slicing.",
                pid,
                states,
            )
        odd = {p: state for p, state in states.items() if state != "ACTIVE"}
        if odd:
            described = ", ".join(f"{p} reports {state}" for p, state in odd.items())
            return MpsStatus(
                uuid,
                "fault",
                False,
                f"MPS server {described} on {uuid}; new jobs fall back to "
                "time-slicing until it is ACTIVE.",
                pid,
                states,
            )
        if states:
            message = f"MPS server {', '.join(map(str, states))} ACTIVE on {uuid}"
        else:
            message = (
                f"MPS control daemon running for {uuid}; its server starts with the first client"
            )
        return MpsStatus(uuid, "running", True, message, pid, states)

    def client_env(
        self,
        uuid: str,
        active_thread_pct: int | None = None,
        pinned_mem_limit_mib: int | None = None,
    ) -> dict[str, str]:
        """The environment a job needs to run as an MPS client on `uuid`.

        The job sees its one device as device 0, hence "0=<N>M" for the memory limit.
        """
        server = self.layout(uuid)
        env = {
            "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(server.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(server.log_dir),
        }
        if active_thread_pct is not None:
            if not 1 <= active_thread_pct <= 100:
                raise ValueError(f"active thread percentage must be 1-100, not {active_thread_pct}")
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(int(active_thread_pct))
        if pinned_mem_limit_mib is not None:
            if pinned_mem_limit_mib <= 0:
                raise ValueError(
                    f"pinned memory limit must be positive, not {pinned_mem_limit_mib} MiB"
                )
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={int(pinned_mem_limit_mib)}M"
        return env
