"""A system engine serving real local users, for the shared-station tests (root only).

`make_station` creates the station's group and its admin group, four throwaway users (ada and
bob in the group, an admin in both, an outsider in neither; tests/local_users.py), and starts a
real system engine (`python -m gpudesk.engine.daemon --system`) with its state and socket in a
temporary folder. Users talk to it with `raw_client.py` under the system's python3 (the project's
environment may sit in root's home, which they cannot read), so the engine learns who they are
from the kernel, as it would from `gpudesk`; root (the tests' own process) with its framing,
in process. Everything is removed afterwards, even on failure: the engine stopped, then what
is left of the jobs killed and named in a warning (kill_leftovers), then the users and groups
(local_users).

`python`: the interpreter the engine runs (default: the tests' own). The engine starts its
tracking workers, as the jobs' owners, with its own interpreter: a test of them gives one the
users may run (tests/security/user_python.py), since the project's may sit in root's home
(`user_python_station`; a module's `user_station` fixture, tests/conftest.py).
`engine_env`: variables for the engine's own environment (GPUDESK_TRACKING_WAIT_S, say)."""

from __future__ import annotations

import errno
import grp
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from local_users import LocalUser, local_accounts
from raw_client import read_reply, request_frame

HERE = Path(__file__).parent
SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass
class Station:
    state_dir: Path
    socket: Path
    group: str
    admin_group: str
    users: dict[str, LocalUser]
    client: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable

    def call(self, role: str | None, op: str, **args: Any) -> dict[str, Any]:
        """One request as `role`'s user (None: root), through a real connection."""
        if role is None:
            return self._call_as_root(op, args)
        argv = [SYSTEM_PYTHON, str(self.client), str(self.socket), op, json.dumps(args)]
        argv = ["runuser", "-u", self.users[role].name, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
        assert done.returncode == 0, f"client failed: {done.stderr}"
        return json.loads(done.stdout)

    def _call_as_root(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Root's request, from the tests' own process (root): what raw_client.py does, with
        its framing, without starting a process for it (the tests poll as root, job states
        several times a second); the engine learns the caller from the kernel all the same."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            try:
                sock.connect(str(self.socket))
            except OSError as exc:
                name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
                return {"connect_error": name, "message": str(exc)}
            try:
                sock.sendall(request_frame(op, args))
                reply = read_reply(sock)
            except (OSError, SystemExit) as exc:  # as the client's failing would say it
                raise AssertionError(f"client failed: {exc}") from None
        return json.loads(reply)

    def ok(self, role: str | None, op: str, **args: Any) -> dict[str, Any]:
        reply = self.call(role, op, **args)
        assert reply.get("ok"), f"{op} as {role}: {reply}"
        return reply["result"]

    def submit(
        self, role: str, job: dict[str, Any], env: dict[str, str] | None = None, **extra: Any
    ) -> int:
        """One job submitted by `role`'s user (`extra`: whatever else the request claims)."""
        env = {"PATH": "/usr/bin:/bin"} if env is None else env
        [job_id] = self.ok(role, "submit", jobs=[job], env=env, **extra)["ids"]
        return job_id  # type: ignore[no-any-return]

    def run_as(
        self, role: str, *argv: str, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """`argv` run to its end as `role`'s user, from /, its output captured (text)."""
        return subprocess.run(
            ["runuser", "-u", self.users[role].name, "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",
            check=False,
        )

    def gpudesk_argv(self, *args: str, env: Sequence[str] = ()) -> list[str]:
        """`gpudesk ARGS` as a member runs it: under the engine's Python (a user Python, where
        the station was given one: user_python_station), with the station's GPUDESK_SOCKET and
        COLUMNS=300 (`env`: env(1)'s further NAME=VALUE, which win)."""
        env = ("env", f"GPUDESK_SOCKET={self.socket}", "COLUMNS=300", *env)
        return [*env, self.python, "-P", "-m", "gpudesk", *args]

    def gpudesk_as(
        self, role: str, *args: str, env: Sequence[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        """`gpudesk ARGS` (gpudesk_argv) run to its end as `role`'s user (run_as)."""
        return self.run_as(role, *self.gpudesk_argv(*args, env=env))

    @contextmanager
    def popen_as(
        self, role: str, *argv: str, end_wait_s: float = 60.0
    ) -> Iterator[subprocess.Popen[str]]:
        """`argv` running as `role`'s user, its stdin, stdout and stderr piped (text), for as
        long as the block lasts; then its stdin is closed, which tells it to end, and it has
        `end_wait_s` to do so before it is killed."""
        process = subprocess.Popen(
            ["runuser", "-u", self.users[role].name, "--", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        try:
            yield process
        finally:
            if process.stdin is not None and not process.stdin.closed:
                process.stdin.close()
            try:
                process.wait(end_wait_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    def job(self, job_id: int) -> dict[str, Any]:
        return self.ok(None, "show", job=job_id)["job"]

    def wait_state(self, job_id: int, *states: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} is {job['state']}, not {states}")
            time.sleep(0.1)

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    self.python,
                    "-P",
                    "-m",
                    "gpudesk.engine.daemon",
                    "--system",
                    "--state-dir",
                    str(self.state_dir),
                    "--socket",
                    str(self.socket),
                    "--group",
                    self.group,
                    "--admin-group",
                    self.admin_group,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while True:
            if self.socket.exists():
                reply = self.call(None, "ping")
                if reply.get("ok"):
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the system engine did not start:\n{self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None


def make_station(
    backend: str = "none",
    python: str | None = None,
    engine_env: Mapping[str, str] | None = None,
    under: str = "/tmp",
) -> Iterator[Station]:
    """The station (see the module's doc); `engine_env` goes into the engine's own environment
    (its PATH, SLURM_CONF: what the site gives root's service; a test's engine settings);
    `under`: the folder its state and the jobs' folders are made in (/dev/shm: on tmpfs)."""
    if shutil.which("runuser") is None:
        pytest.skip("runuser is not installed: the test users' client runs through it")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is missing: the test users' client needs a system Python")
    roles = {"ada": ["station"], "bob": ["station"], "admin": ["station", "admins"], "outsider": []}
    with local_accounts(roles, groups=["station", "admins"], homes=True) as made:
        top = Path(tempfile.mkdtemp(prefix="gdst-", dir=under))
        os.chmod(top, 0o755)  # the users reach the client script and their jobs' folders below
        station = None
        try:
            client = top / "raw_client.py"
            shutil.copy(HERE / "raw_client.py", client)
            os.chmod(client, 0o755)
            env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDESK_")}
            env["GPUDESK_BACKEND"] = backend
            env.update(engine_env or {})
            station = Station(
                state_dir=top / "state",
                socket=top / "run" / "control.sock",
                group=grp.getgrgid(made.groups["station"]).gr_name,
                admin_group=grp.getgrgid(made.groups["admins"]).gr_name,
                users=made.users,
                client=client,
                log=top / "engine-stderr.log",
                env=env,
                python=python or sys.executable,
            )
            station.start()
            yield station
        finally:
            if station is not None:
                station.stop()  # before the users go: their jobs end with the engine's care
                kill_leftovers(top, [user.uid for user in made.users.values()])
            shutil.rmtree(top, ignore_errors=True)


def kill_leftovers(top: Path, uids: Sequence[int]) -> list[str]:
    """Kill what a station's jobs left once its engine is gone, and name it in a warning: any
    process of its members (`uids`), and any whose command line names its folder (`top`): the
    root wrapper of each job, which drops to the owner only in its child. A job still running
    ends with its command; a suspended one does not: its wrapper and children, stopped, outlive
    the engine and the users, and the next test's member given the same uid would find them.
    A test that leaves one is at fault, but the next test must not pay for it: SIGKILL ends a
    stopped process too. Returns the lines it warned of (`pid stat user args`)."""
    left: list[psutil.Process] = []
    for proc in psutil.process_iter(["uids", "cmdline", "status"]):
        info = proc.info
        if info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue  # a zombie runs nothing; its parent (init, here) reaps it or not
        mine = info["uids"] is not None and info["uids"].real in uids
        if mine or str(top) in " ".join(info["cmdline"] or ()):
            left.append(proc)
    lines: list[str] = []
    for proc in left:
        try:
            lines.append(f"{proc.pid} {proc.status()} {proc.username()} {' '.join(proc.cmdline())}")
            proc.kill()
        except psutil.Error:
            pass  # it ended meanwhile
    deadline = time.monotonic() + 10  # dead: gone, or a zombie (init reaps orphans, or not)
    while time.monotonic() < deadline and any(_runs(proc) for proc in left):
        time.sleep(0.05)
    if lines:
        warnings.warn(
            "processes of the station's members or jobs were left when its engine stopped "
            "(killed now; a test should end what it starts, and cancel a job it suspends):\n"
            + "\n".join(lines),
            stacklevel=1,
        )
    return lines


def _runs(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def user_python_station(engine_env: Mapping[str, str] | None = None) -> Iterator[Station]:
    """A station (make_station) whose engine, its tracking workers and its members' `gpudesk`
    (Station.gpudesk_as) run a Python the users may run (tests/security/user_python.py), as
    `station.python`; it and its folder are removed afterwards."""
    # on the tests' path alone (tests/security): bench/hostile_user.py imports this module too
    from user_python import user_python_folder

    with user_python_folder() as python:
        yield from make_station(python=python, engine_env=engine_env)
