"""Starting, watching and stopping job attempts as real processes.

Each attempt runs under `wrapper.py` as the leader of its own session and process group, so it
survives the engine, a closed terminal and a dropped SSH connection, and a cancel can signal the
whole group. A process is identified by pid *and* start time, so a recycled pid is never mistaken
for a job after an engine restart.

Launching is exactly once across an engine crash: before the wrapper starts, the engine takes an
exclusive flock on the attempt's `launch.lock` and hands that open file to the wrapper, which
holds it for its whole life. An engine that died between starting a wrapper and recording its pid
leaves a held lock behind, and the next engine adopts that wrapper instead of starting the attempt
again (`wrapper_holds_lock`). Before the start, the engine also reserves the disk space of the
exit record (`prepare`), so a disk that fills while the job runs cannot lose its outcome.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import sys
from pathlib import Path

import msgspec
import psutil

from gpudesk import paths, trust
from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec, workdir_problem
from gpudesk.core.umask import umask_text
from gpudesk.hw import process_start, wrapper
from gpudesk.hw.hostmetrics import group_processes
from gpudesk.secure_path import insecure_step

WRAPPER_PATH = Path(wrapper.__file__).resolve()
EXIT_FILE = "exit.json"
EXIT_RESERVE_FILE = EXIT_FILE + wrapper.RESERVE_SUFFIX
EXIT_RESERVE_BYTES = 4096  # a record is ~100 bytes; one block, the least a file takes anyway
WRAPPER_FILE = "wrapper.json"
LOCK_FILE = "launch.lock"
LOG_FILE = wrapper.LOG_FILE
# How the engine opens a job's log for the wrapper: never through a link (the folder is the
# engine's, but a name is checked where it costs nothing).
LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
PRIVATE_DIR_MODE = 0o711  # a job run as its owner: its folders, the engine's, enterable only


class LaunchError(RuntimeError):
    """The attempt could not be started (bad working directory, no interpreter, …)."""

    def __init__(self, message: str, no_space: bool = False) -> None:
        super().__init__(message)
        self.no_space = no_space  # the disk is full: worth trying again later, not a failure


class ExitRecord(msgspec.Struct, frozen=True):
    exit_code: int
    signal: int | None
    ended_at: float | None
    error: str | None
    # False: its wrapper refused to run the command (the owner is no longer the user who
    # submitted it: wrapper.owner_refused) and left the launch lock unmarked; it never ran
    ran: bool = True

    @property
    def description(self) -> str:
        if self.error:
            return self.error
        if self.signal:
            name = _signal_name(self.signal)
            return f"killed by {name} (exit {self.exit_code})"
        return f"exit code {self.exit_code}"


class Launched(msgspec.Struct, frozen=True):
    pid: int
    start_time: float  # the wrapper's start from boot (process_start); 0.0 where none was read


class WrapperRecord(msgspec.Struct, frozen=True):
    """What a wrapper said about itself (wrapper.json)."""

    pid: int
    child_pid: int | None  # the command's pid, once it was started
    started_at: float | None
    containment: str | None  # "cgroup PATH (its limits)" or "process group only: why"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_returncode(returncode: int) -> ExitRecord:
    """The outcome of a wrapper that ended without an exit record. The wrapper exits with its
    command's exit code whatever happens to its record, so that code is the outcome."""
    if returncode < 0:
        sig = -returncode
        return ExitRecord(
            128 + sig, sig, None, f"the job's wrapper was killed by {_signal_name(sig)}"
        )
    return ExitRecord(
        returncode,
        None,
        None,
        f"exit code {returncode} (from the wrapper's exit status: it could not write {EXIT_FILE})",
    )


def _no_space(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def prepare(attempt_dir: Path, *, private: bool = False) -> None:
    """Create the attempt's folder and reserve the space of its exit record (EXIT_RESERVE_FILE,
    written in full, so its blocks are allocated now: the wrapper overwrites them in place).
    `private`: the job runs as its owner (`run_as`): the job's folder and the attempt's stay the
    engine's, PRIVATE_DIR_MODE (no one else lists them; only the log inside is the owner's, see
    `_create_owned_log`). Raises LaunchError, with `no_space` set when the disk is full."""
    # For another user's job, root makes nothing through a path a member could change (a state
    # folder whose parent an admin later let her write; the put-back of a removed one): every
    # folder on the way checked as the engine's start checks them (gpudesk.secure_path), each
    # time, since a few lstat calls cost nothing beside starting a job.
    problem = insecure_step(attempt_dir, paths.user_name) if private else None
    if problem is not None:
        raise LaunchError(f"the attempt folder {attempt_dir} {problem}: root makes nothing there")
    try:
        attempt_dir.mkdir(parents=True, exist_ok=True)
        if private:
            for folder in (attempt_dir.parent, attempt_dir):
                _chmod_own_folder(folder, PRIVATE_DIR_MODE)
    except OSError as exc:
        raise LaunchError(
            f"cannot create the attempt folder {attempt_dir}: {exc.strerror or exc}",
            no_space=_no_space(exc),
        ) from exc
    # Never into a folder another attempt used (an earlier database's job of the same id, say):
    # its logs must not be mixed with this one's. What an earlier `prepare` of this very attempt
    # left (a full disk keeps the job queued and it is prepared again) is only the reserve.
    try:
        left = set(os.listdir(attempt_dir)) - {EXIT_RESERVE_FILE}
    except OSError as exc:
        raise LaunchError(f"cannot read the attempt folder {attempt_dir}: {exc}") from exc
    if left:
        raise LaunchError(
            f"the attempt folder {attempt_dir} already exists (left by an earlier job of the "
            "same id?); gpudesk does not mix a new attempt's log into it"
        )
    try:
        fd = os.open(
            attempt_dir / EXIT_RESERVE_FILE,
            os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        try:
            if os.pwrite(fd, b" " * EXIT_RESERVE_BYTES, 0) != EXIT_RESERVE_BYTES:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        finally:
            os.close(fd)
    except OSError as exc:
        raise LaunchError(
            f"cannot reserve the exit record's space in {attempt_dir}: {exc.strerror or exc}",
            no_space=_no_space(exc),
        ) from exc


def run_as(owner: Identity) -> Identity | None:
    """Whom a job of `owner` runs as, where that is not the engine's own user: its owner on an
    engine run by root (a system engine), else None (a personal engine's jobs are all its
    user's; an engine that is not root cannot change its uid anyway)."""
    if os.geteuid() != 0 or owner.uid == os.getuid():
        return None
    return owner


def log_owner_uid(owner: Identity) -> int:
    """Whose files a job's output.log and its parts must be when the engine reads them
    (gpudesk.joblog reads them as files a user may have planted): its owner's where the job ran
    as them, else the engine's own."""
    return owner.uid if run_as(owner) is not None else os.geteuid()


def _create_owned_log(log: Path, owner: Identity) -> None:
    """The log of a job run as its owner: created by the engine before the job starts, new
    (O_EXCL, never a name found there), owned by the owner, readable by them alone."""
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(log, flags, 0o600)
        try:
            os.fchown(fd, owner.uid, owner.gid)
            os.fchmod(fd, 0o600)  # whatever the umask
        finally:
            os.close(fd)
    except OSError as exc:
        raise LaunchError(
            f"cannot create the job's log {log}: {exc.strerror or exc}", no_space=_no_space(exc)
        ) from exc


def _write_job_env(attempt_dir: Path, env: dict[str, str]) -> None:
    """The job's environment for the wrapper of a job run as its owner (wrapper.ENV_FILE):
    new (O_EXCL), root's, 0600, in the attempt's folder (root's, PRIVATE_DIR_MODE), so only
    root reads it and no one else can put it there. Raises ValueError for an environment the
    OS refuses (as posix_spawn would), LaunchError when it cannot be written."""
    data = wrapper.encode_env(env)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(attempt_dir / wrapper.ENV_FILE, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except OSError as exc:
        raise LaunchError(
            f"cannot write the job's environment in {attempt_dir}: {exc.strerror or exc}",
            no_space=_no_space(exc),
        ) from exc


def _chmod_own_folder(folder: Path, mode: int) -> None:
    """Set the mode of a folder the engine made, through an fd (never a link), and only when it
    is the engine's own: a folder someone else made there is refused."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise PermissionError(errno.EPERM, "the folder is not the engine's own", str(folder))
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _take_launch_lock(attempt_dir: Path) -> int:
    """Open the attempt's launch lock and take it (exclusive); the open fd, close-on-exec."""
    try:
        fd = os.open(
            attempt_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError as exc:
        raise LaunchError(
            f"cannot create the launch lock in {attempt_dir}: {exc.strerror or exc}",
            no_space=_no_space(exc),
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # its first byte: the wrapper overwrites it in place just before it starts the command
        if os.pwrite(fd, wrapper.LOCK_LAUNCHING, 0) != 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if fd == wrapper.LOCK_FD:  # dup2 onto itself would leave it close-on-exec
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            fd = moved
    except BlockingIOError as exc:
        os.close(fd)
        raise LaunchError(f"the attempt folder {attempt_dir} is in use by another wrapper") from exc
    except OSError as exc:
        os.close(fd)
        raise LaunchError(
            f"cannot take the launch lock in {attempt_dir}: {exc.strerror or exc}",
            no_space=_no_space(exc),
        ) from exc
    return fd


def launch(
    attempt_dir: Path,
    spec: JobSpec,
    workdir: str,
    env: dict[str, str],
    containment: str,
    owner: Identity | None = None,
    station_group: int | None = None,
) -> Launched:
    """Start the wrapper for one attempt (its folder `prepare`d); the caller must reap it
    (`reap`). `containment` is the attempt's cgroup for the wrapper to join, or why there is
    none (`containment.Containment.prepare`). `owner`: the identity to run the command as,
    where it is not the engine's (a system engine's job; `run_as`): the wrapper checks that she
    is still the user who submitted it, in `station_group` (the system engine's) where one is
    given, as it starts (core/known_owner.py; never here: the user database may hang, and this
    runs on the engine's loop). The command is `spec`'s, run with its umask where it has one
    (the submitter's: core/umask.py)."""
    problem = workdir_problem(workdir) if owner is None else None
    if problem is not None:
        # (a job run as its owner learns this in the wrapper, as its owner: whether root can
        # see the folder says nothing of whether its owner may enter it)
        raise LaunchError(problem)
    lock = _take_launch_lock(attempt_dir)
    identity = [] if spec.umask is None else ["--umask", umask_text(spec.umask)]
    if owner is not None:
        groups = ",".join(str(g) for g in owner.groups)
        station = "" if station_group is None else str(station_group)
        identity += ["--as", f"{owner.uid}:{owner.gid}:{groups}"]
        identity += ["--check", f"{station}:{owner.login or ''}"]
    argv = [
        sys.executable,
        "-I",
        "-S",
        str(WRAPPER_PATH),
        str(attempt_dir),
        workdir,
        "1" if spec.shell else "0",
        str(wrapper.LOCK_FD),
        containment,
        *identity,
        "--",
        *spec.command,
    ]
    log = str(attempt_dir / LOG_FILE)
    if owner is not None:
        _create_owned_log(Path(log), owner)
        # The wrapper stays root: it gets the engine's environment, never the job's (whose
        # LD_PRELOAD … the loader would obey as root); the job's waits in a file of root's
        # for the wrapper's child, which applies it after the switch to the owner.
        _write_job_env(attempt_dir, env)
        env = trust.engine_environment(None)
    # posix_spawn (vfork underneath) rather than subprocess: forking a large daemon for every job
    # costs milliseconds on the submit-to-start path. Every fd the engine holds is close-on-exec
    # but the launch lock, which becomes the wrapper's fd 3.
    try:
        pid = os.posix_spawn(
            sys.executable,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, log, LOG_FLAGS, 0o644),
                (os.POSIX_SPAWN_DUP2, 1, 2),
                (os.POSIX_SPAWN_DUP2, lock, wrapper.LOCK_FD),
            ],
            setsid=True,
        )
    except OSError as exc:
        raise LaunchError(
            f"cannot start the job: {exc.strerror or exc}", no_space=_no_space(exc)
        ) from exc
    finally:
        os.close(lock)  # the wrapper's copy holds the lock from here on
    return Launched(pid, process_start_time(pid) or 0.0)


def wrapper_holds_lock(attempt_dir: str | Path) -> bool | None:
    """Is a wrapper of this attempt alive? True while its launch lock is held, False once it is
    free (the wrapper ended, or never started), None where there is no lock (an attempt started
    by a gpudesk before the lock)."""
    try:
        fd = os.open(Path(attempt_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the probe's lock with it
    return False


def command_started(attempt_dir: str | Path) -> bool:
    """Did the wrapper get as far as starting the command? It marks the launch lock (in place,
    so a full disk cannot stop it) just before; a wrapper that died sooner never ran it."""
    try:
        with open(Path(attempt_dir) / LOCK_FILE, "rb") as fh:
            return fh.read(1) == wrapper.LOCK_STARTED
    except OSError:
        return True  # not knowing, assume it ran: better lost than run twice


def process_start_time(pid: int) -> float | None:
    """When `pid` started, from this boot (gpudesk.hw.process_start): what the store keeps."""
    return process_start.started(pid)


def lock_holder(attempt_dir: str | Path) -> int | None:
    """The pid of the wrapper holding this attempt's launch lock, found by its fd 3 (for a
    wrapper that has not written wrapper.json yet), or None."""
    try:
        lock = os.stat(Path(attempt_dir) / LOCK_FILE)
    except OSError:
        return None
    for pid in psutil.pids():
        if pid == os.getpid():
            continue
        try:
            held = os.stat(f"/proc/{pid}/fd/{wrapper.LOCK_FD}")
        except OSError:
            continue
        if (held.st_dev, held.st_ino) == (lock.st_dev, lock.st_ino):
            return pid
    return None


def clean(attempt_dir: str | Path) -> None:
    """Remove what a settled attempt no longer needs: the unused exit reserve, a job's
    environment its wrapper never took (wrapper.ENV_FILE: it may hold secrets), and temporary
    files a write on a full disk left behind."""
    folder = Path(attempt_dir)
    for name in (EXIT_RESERVE_FILE, wrapper.ENV_FILE, EXIT_FILE + ".tmp", WRAPPER_FILE + ".tmp"):
        with contextlib.suppress(OSError):
            (folder / name).unlink()


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
    # RecursionError: the job wrote `[[[[…` nested past the stack there, no record either
    except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
        return None
    if not (_small_int(exit_code) and (sig is None or _small_int(sig))):
        return None
    if not isinstance(ended_at, (int, float, type(None))) or isinstance(ended_at, bool):
        ended_at = None
    if not isinstance(error, str):
        return ExitRecord(exit_code, sig, ended_at, None)
    return ExitRecord(exit_code, sig, ended_at, error, ran=command_started(attempt_dir))


def _small_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31


def read_wrapper(attempt_dir: str | Path) -> WrapperRecord | None:
    try:
        data = json.loads((Path(attempt_dir) / WRAPPER_FILE).read_text())
        child = data.get("child_pid")
        started = data.get("started_at")
        containment = data.get("containment")
        return WrapperRecord(
            int(data["pid"]),
            int(child) if child is not None else None,
            float(started) if started is not None else None,
            str(containment) if containment is not None else None,
        )
    # RecursionError: the job wrote `[[[[…` nested past the stack there, no record either
    except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
        return None


def read_wrapper_pid(attempt_dir: str | Path) -> int | None:
    record = read_wrapper(attempt_dir)
    return record.pid if record else None


def is_alive(pid: int, start_time: float | None) -> bool:
    """Is this exact process (pid started at start_time, in this boot) still running (not a
    zombie)? A start of 0 or None is not known: any live `pid` is taken for it."""
    return process_start.runs(pid, start_time or None)


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to a process group; False when the group no longer exists."""
    if pgid <= 1:  # 0 would be the engine's own group, 1 init's
        return False
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
