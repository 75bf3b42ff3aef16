"""Another local user creates the socket folder first (finding 4).

A GPUDESK_HOME whose path is too long for a Unix socket keeps its sockets in the predictable
`$TMPDIR/gpudesk-<uid>/<digest>/`. A second, real Unix user (made with `useradd`, removed after)
creates that folder first, or plants a symbolic link in its place, and listens on the control
socket. gpudesk run as root must refuse with one paragraph, and the squatter's socket must receive
nothing: no request, no environment variables.

Each test uses a temporary directory of its own as TMPDIR (sticky and world-writable, like /tmp),
so the real /tmp/gpudesk-0 of other engines on this machine is never touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import local_users
import pytest
from conftest import wait_for
from local_users import LocalUser

from gpudesk.api.connection import engine_pid
from gpudesk.paths import Home

other_user = local_users.other_user  # the fixture (tests/local_users.py)

GPUDESK = [sys.executable, "-m", "gpudesk"]


@pytest.fixture
def base() -> Iterator[Path]:
    """A private stand-in for /tmp, world-writable and sticky as /tmp is (removed after)."""
    folder = Path(tempfile.mkdtemp(prefix="gdsq-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def long_home(tmp_path: Path) -> Path:
    home = tmp_path / ("h" * 90)
    assert len(str(home / "run" / "control.sock")) > 100  # the sockets go to the fallback
    return home


def fallback_dirs(base: Path, home: Path) -> tuple[Path, Path]:
    """Where gpudesk puts the sockets of `home` (worked out here, not asked of gpudesk)."""
    digest = hashlib.sha1(str(home.absolute()).encode()).hexdigest()[:16]
    top = base / f"gpudesk-{os.getuid()}"
    return top, top / digest


class Squatter:
    """A forked child running as `user`: it makes the socket folder (or a link in its place),
    listens on control.sock and events.sock, and reports every byte it receives."""

    def __init__(self, user: LocalUser, top: Path, sockets: Path, link: bool) -> None:
        self.top, self.sockets, self.link = top, sockets, link
        self.real = top.with_name(top.name + "-real")  # the link's target
        read_end, write_end = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into pytest
            os.close(read_end)
            code = 1
            try:
                os.setgroups([])
                os.setgid(user.gid)
                os.setuid(user.uid)
                self._serve(write_end)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        self.reports = read_end
        self.received = b""
        assert self._read(10.0).startswith(b"ready"), "the squatter did not come up"

    def _serve(self, out: int) -> None:
        os.umask(0o022)
        if self.link:
            self.real.mkdir(mode=0o755)
            os.symlink(self.real, self.top)
        else:
            self.top.mkdir(mode=0o755)
        self.sockets.mkdir(mode=0o777)  # through the link in the link variant
        listeners = []
        for name in ("control.sock", "events.sock"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(self.sockets / name))
            os.chmod(self.sockets / name, 0o777)
            sock.listen(16)
            listeners.append(sock)
        os.write(out, b"ready\n")
        clients: list[socket.socket] = []
        while True:
            readable, _, _ = select.select(listeners + clients, [], [], 60.0)
            if not readable:
                return
            for sock in readable:
                if sock in listeners:
                    clients.append(sock.accept()[0])
                    continue
                data = sock.recv(65536)
                if not data:
                    clients.remove(sock)
                    sock.close()
                    continue
                os.write(out, b"got " + data.hex().encode() + b"\n")

    def _read(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self.reports], [], [], timeout)
        return os.read(self.reports, 1 << 20) if ready else b""

    def drain(self, timeout: float = 0.5) -> bytes:
        """Everything the squatter reported receiving so far."""
        while chunk := self._read(timeout):
            self.received += chunk
        return self.received

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        os.close(self.reports)


def gpudesk(home: Path, base: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUDESK_HOME": str(home), "TMPDIR": str(base)}
    env.pop("GPUDESK_BACKEND", None)
    return subprocess.run(
        [*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def assert_refused(result: subprocess.CompletedProcess, path: Path, owner: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert str(path) in result.stderr and owner in result.stderr, result.stderr
    assert "GPUDESK_HOME" in result.stderr, result.stderr  # and says what to do


def kill_engine(home: Path) -> None:
    pid = engine_pid(Home(home))
    if pid and pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: engine_pid(Home(home)) is None, 10.0, what="the engine to die")


@pytest.mark.parametrize("link", [False, True], ids=["squatted-folder", "planted-link"])
def test_a_squatted_socket_folder_is_refused_and_gets_nothing(
    other_user: LocalUser, base: Path, tmp_path: Path, link: bool
) -> None:
    home = long_home(tmp_path)
    top, sockets = fallback_dirs(base, home)
    squatter = Squatter(other_user, top, sockets, link)
    try:
        before = os.lstat(top)
        for command in (["engine", "start", "--backend", "none"], ["submit", "--", "true"]):
            result = gpudesk(home, base, *command)
            assert_refused(result, top, other_user.name)
            assert "symbolic link" in result.stderr if link else "belongs to" in result.stderr
        assert squatter.drain() == b"", "a request reached the squatter's socket"
        assert engine_pid(Home(home)) is None, "an engine started on a squatted folder"
        after = os.lstat(top)
        assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)  # not chmod-ed
    finally:
        squatter.stop()
        kill_engine(home)


def test_a_client_never_sends_to_a_socket_folder_taken_over_later(
    other_user: LocalUser, base: Path, tmp_path: Path
) -> None:
    """The engine runs; its socket folder in the temporary directory is cleaned away (as
    systemd-tmpfiles does with old folders in /tmp), and the other user creates it again with a
    socket of their own. `gpudesk submit` must check before it sends: the request carries the
    submitter's whole environment."""
    home = long_home(tmp_path)
    top, sockets = fallback_dirs(base, home)
    squatter = None
    try:
        started = gpudesk(home, base, "engine", "start", "--backend", "none")
        assert started.returncode == 0, started.stderr
        assert os.lstat(top).st_uid == 0 and os.lstat(sockets).st_mode & 0o777 == 0o700
        shutil.rmtree(top)
        squatter = Squatter(other_user, top, sockets, link=False)
        result = gpudesk(home, base, "submit", "--", "true")
        assert squatter.drain() == b"", "gpudesk connected to the squatter's socket"
        assert_refused(result, top, other_user.name)
    finally:
        if squatter is not None:
            squatter.stop()
        kill_engine(home)


def test_a_socket_folder_others_can_write_to_is_refused(tmp_path: Path) -> None:
    """Our own socket folder, opened to everyone after the engine made it: someone could put a
    socket of theirs beside the engine's, so the client refuses rather than connect."""
    home = tmp_path / "home"
    env = {**os.environ, "GPUDESK_HOME": str(home)}
    env.pop("GPUDESK_BACKEND", None)
    run = [*GPUDESK, "engine", "start", "--backend", "none"]
    try:
        assert subprocess.run(run, env=env, capture_output=True, check=False).returncode == 0
        (home / "run").chmod(0o777)
        result = subprocess.run(
            [*GPUDESK, "queue"], env=env, capture_output=True, text=True, check=False
        )
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert f"{home / 'run'} is writable by others" in result.stderr, result.stderr
    finally:
        kill_engine(home)
