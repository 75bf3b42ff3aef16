"""Starting, watching and stopping job attempts as real processes.

Each attempt runs under `wrapper.py` as the leader of its own session and process group, so it
survives the engine, a closed terminal and a dropped SSH connection, and a cancel can signal the
whole group. A process is identified by pid *and* start time, so a recycled pid is never mistaken
for a job after an engine restart.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpudesk.engine import wrapper
from gpudesk.engine.hostmetrics import group_processes

WRAPPER_PATH = Path(wrapper.__file__).resolve()
EXIT_FILE = "exit.json"
WRAPPER_FILE = "wrapper.json"
LOG_FILE = "output.log"
# create_time() is derived from boot time and clock ticks; allow for its rounding.
_START_TIME_TOLERANCE = 0.05


class LaunchError(RuntimeError):
    """The attempt could not be started (bad working directory, no interpreter, …)."""


@dataclass(frozen=True)
class ExitRecord:
    exit_code: int
    signal: int | None
    ended_at: float | None
    error: str | None

    @property
    def description(self) -> str:
        if self.error:
            return self.error
        if self.signal:
            name = _signal_name(self.signal)
            return f"killed by {name} (exit {self.exit_code})"
        return f"exit code {self.exit_code}"


@dataclass(frozen=True)
class Launched:
    pid: int
    start_time: float


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_returncode(returncode: int) -> ExitRecord:
    """The outcome of a wrapper that died without writing its record."""
    if returncode < 0:
        sig = -returncode
        return ExitRecord(
            128 + sig, sig, None, f"the job's wrapper was killed by {_signal_name(sig)}"
        )
    return ExitRecord(
        returncode,
        None,
        None,
        f"the job's wrapper exited with {returncode} without recording an outcome",
    )


def launch(
    attempt_dir: Path,
    command: tuple[str, ...],
    shell: bool,
    workdir: str,
    env: dict[str, str],
) -> Launched:
    """Start the wrapper for one attempt; the caller must reap it (`reap`)."""
    if not os.path.isdir(workdir):
        raise LaunchError(f"the working directory {workdir} does not exist")
    try:
        # Never into an existing folder: that is another attempt's (an earlier database's job
        # of the same id, say), and its logs must not be mixed with this one's.
        attempt_dir.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise LaunchError(
            f"the attempt folder {attempt_dir} already exists (left by an earlier job of the "
            "same id?); gpudesk does not mix a new attempt's log into it"
        ) from None
    except OSError as exc:
        raise LaunchError(
            f"cannot create the attempt folder {attempt_dir}: {exc.strerror or exc}"
        ) from exc
    argv = [
        sys.executable,
        "-I",
        "-S",
        str(WRAPPER_PATH),
        str(attempt_dir),
        workdir,
        "1" if shell else "0",
        "--",
        *command,
    ]
    log = str(attempt_dir / LOG_FILE)
    # posix_spawn (vfork underneath) rather than subprocess: forking a large daemon for every job
    # costs milliseconds on the submit-to-start path. Every fd the engine holds is close-on-exec.
    try:
        pid = os.posix_spawn(
            sys.executable,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
            setsid=True,
        )
    except OSError as exc:
        raise LaunchError(f"cannot start the job: {exc.strerror or exc}") from exc
    try:
        start_time = psutil.Process(pid).create_time()
    except psutil.Error:
        start_time = 0.0
    return Launched(pid, start_time)


def reap(pid: int) -> tuple[bool, int | None]:
    """Has our child `pid` ended? Reaps it; returns (ended, returncode as subprocess gives it,
    or None when the status is unknown)."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True, None  # reaped elsewhere; the exit record says how it ended
    return (True, os.waitstatus_to_exitcode(status)) if done else (False, None)


def read_exit(attempt_dir: str | Path) -> ExitRecord | None:
    """The wrapper's exit record, or None when there is none that makes sense. The job can
    write into its attempt folder, so every field is checked before the store sees it."""
    try:
        data = json.loads((Path(attempt_dir) / EXIT_FILE).read_text())
        exit_code, sig = data["exit_code"], data.get("signal")
        ended_at, error = data.get("ended_at"), data.get("error")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not (_small_int(exit_code) and (sig is None or _small_int(sig))):
        return None
    if not isinstance(ended_at, (int, float, type(None))) or isinstance(ended_at, bool):
        ended_at = None
    return ExitRecord(exit_code, sig, ended_at, error if isinstance(error, str) else None)


def _small_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31


def read_wrapper_pid(attempt_dir: str | Path) -> int | None:
    try:
        return int(json.loads((Path(attempt_dir) / WRAPPER_FILE).read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_alive(pid: int, start_time: float | None) -> bool:
    """Is this exact process (pid started at start_time) still running (not a zombie)?"""
    try:
        proc = psutil.Process(pid)
        if start_time and abs(proc.create_time() - start_time) > _START_TIME_TOLERANCE:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def kill_leftovers(pgid: int) -> int:
    """SIGKILL what is left of a finished attempt's process group; returns how many."""
    if not signal_group(pgid, 0):
        return 0  # the usual case, and far cheaper than scanning every process
    members = group_processes([pgid])[pgid]
    if members:
        signal_group(pgid, signal.SIGKILL)
    return len(members)
