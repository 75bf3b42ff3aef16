"""The small process that runs one job attempt and records how it ended.

The engine starts it as the leader of a new process session (setsid), with the job's environment
and log file as stdout/stderr; it enters the job's working directory itself. It starts the job's
command as its child, in the same process group, waits for it and writes `exit.json` into the
attempt's folder, so the outcome is known even when the engine was down while the job ended.

It is run by path with `python -I -S` and sits on the path from submit to job start, so it imports
only what it must: `json` and `subprocess` alone would double its start-up time; the records are
written by hand and the command is started with posix_spawn.

What it is handed (`runner.launch`):
- fd 3, the attempt's `launch.lock`, on which the engine took flock(LOCK_EX) before spawning it.
  The lock lives on the open file description, so it stays held for as long as this process
  lives, engine or no engine: a restarted engine that finds it held knows the attempt runs and
  never starts it again. The command does not inherit it (close-on-exec): the lock means "a
  wrapper that will record the outcome lives"; what is left of a job after its wrapper died is
  the containment's to kill, and a job must not be able to keep its attempt open forever by
  handing the descriptor to a daemon.
  Its first byte, "-" as the engine wrote it, becomes "+" just before the command starts
  (in place: no new block needed), so a wrapper that died tells whether the command ever ran.
- the containment: the path of the attempt's cgroup (created by the engine, which also moves
  this process in from a thread while it starts), which it makes sure to be in before starting
  the command so that every descendant is born inside; or why there is none.
- `exit.json.reserved`, a file the engine filled (runner.EXIT_RESERVE_BYTES) before the start.
  The outcome is written into it in place (no new blocks needed) and renamed to `exit.json`, so
  the record survives a disk that filled up while the job ran.

A job run as its owner (an engine run by root, a job of another user; `runner.run_as`): the
wrapper gets `--as UID:GID:G1,G2` and stays root, so it can join the cgroup and write its records.
With `--check STATION_GID:LOGIN` it first asks the user database whether she is still the user
who submitted it, in the station's group (`owner_refused`: an answer that takes long holds this
job alone, never the engine), and keeps only the groups she still holds. Then it forks, and
the child takes the owner's supplementary groups, gid and uid, then enters the working directory
*as the owner* (a folder the owner may not enter fails the job with 126 and a line that says so,
never entered with root's rights) and execs the command (`_start_as`). A personal engine's jobs
keep posix_spawnp, the fast path. With `--umask OCTAL` (the submitter's, gpudesk.core.umask) the
command runs with that umask, else with the engine's.

Such a wrapper is root, so it never runs with the job's environment: the dynamic loader would
obey her `LD_PRELOAD`, `LD_AUDIT`, `GCONV_PATH` … in a root process before any code of ours
(docs/security.md). The engine starts it with an environment it built itself
(gpudesk.trust.engine_environment) and hands the job's own in `job.env` (ENV_FILE), a
file of root's (0600, in the attempt's folder, which is root's 0711: the owner can neither read
nor replace it): NUL-separated `NAME=VALUE` bytes, as /proc/PID/environ. The wrapper reads it
and removes it before anything else; only the child, after the switch to the owner, gets it
(execve), and the command is searched for on *its* PATH, as the owner.

Whatever happens to its records, it exits with the command's own exit code (128 + the signal
that killed it), never with a traceback: the engine, its parent, learns the outcome from that
status when the record could not be written.

Files in the attempt folder:
    launch.lock         held (flock) by the wrapper for its whole life; "-" or "+" (started)
    wrapper.json        {"pid", "child_pid", "started_at", "containment"}; best effort, written
                        atomically (temporary file + rename) before and after the command starts
    exit.json           {"exit_code", "signal", "ended_at", "error"} when the command has ended
    output.log          the job's stdout and stderr
    job.env             a job run as its owner: its environment, until the wrapper has read it

Who owns what, for a job run as its owner: the job's folder and the attempt's are the engine's
(root's, 0711: no one else lists them, and the owner cannot put a name in them), so no record
root writes here can be reached through a link or a second name the owner planted; the records
are 0600. Only output.log is the owner's (created by the engine, O_EXCL, 0600, before the job
starts), and the parts rotated out of it are made the same (gpudesk.joblog).
"""

from __future__ import annotations

import os
import signal
import sys
import time

EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
EXIT_USAGE = 2
LOCK_FD = 3  # where runner.launch puts the launch lock
LOCK_LAUNCHING = b"-"  # the lock file's first byte, as the engine writes it
LOCK_STARTED = b"+"  # ... as the wrapper overwrites it just before starting the command
RESERVE_SUFFIX = ".reserved"  # exit.json.reserved: the space the outcome is written into
LOG_FILE = "output.log"  # the job's stdout and stderr, made by the engine (runner.launch)
ENV_FILE = "job.env"  # a job run as its owner: its environment, for the child alone
ENV_MAX_BYTES = 16 << 20  # more than any environment execve takes (ARG_MAX is far less)


def _json_str(text: str) -> str:
    """`text` as a JSON string, ASCII only, as json.dumps writes it (json is slow to import).
    Lone surrogates (bytes of a non-UTF-8 name) come back as the same str from json.loads."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
    out.append('"')
    return "".join(out)


def _json_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    return _json_str(str(value))


def record_text(**fields: object) -> str:
    return "{" + ", ".join(f'"{k}": {_json_value(v)}' for k, v in fields.items()) + "}"


def write_record(path: str, **fields: object) -> bool:
    """Write a record atomically (temporary file + rename); False when it could not be written
    (a full disk), leaving no temporary file behind. Never raises."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as fh:
            fh.write(record_text(**fields))
        os.replace(tmp, path)
        return True
    except OSError:
        try:  # noqa: SIM105 - contextlib would be one more import on the start path
            os.unlink(tmp)
        except OSError:
            pass
        return False


def write_exit(path: str, **fields: object) -> bool:
    """Write the exit record into the space the engine reserved for it (`path` + RESERVE_SUFFIX):
    overwritten in place, cut to length and renamed, none of which needs a free block. Falls
    back to an ordinary write where there is no reserve or the record does not fit it. Never
    raises."""
    data = record_text(**fields).encode("ascii")
    reserve = path + RESERVE_SUFFIX
    try:
        fd = os.open(reserve, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return write_record(path, **fields)
    try:
        try:
            if len(data) > os.fstat(fd).st_size or os.pwrite(fd, data, 0) != len(data):
                raise OSError("short write")
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(reserve, path)
        return True
    except OSError:
        return write_record(path, **fields)


def limits_text(cgroup: str) -> str:
    """The limits in force in the attempt's cgroup, read back from it (hw/containment.py
    wrote them): "pids.max 4096, memory.max 21.6 GiB", or which is missing and why."""
    parts = []
    for name, controller in (("pids.max", "pids"), ("memory.max", "memory")):
        try:
            with open(os.path.join(cgroup, name)) as fh:
                value = fh.read().strip()
        except OSError:
            parts.append(f"no {name}: the {controller} controller is not enabled for it")
            continue
        if name == "memory.max" and value.isdigit():
            value = f"{int(value) / 2**30:.1f} GiB"
        parts.append(f"{name} {value}")
    return ", ".join(parts)


def _join_cgroup(containment: str) -> str:
    """Move this process into the attempt's cgroup (before the command starts, so every
    descendant is born inside); the containment as `gpudesk show` says it."""
    if not containment.startswith("/"):
        return f"process group only: {containment}"
    procs = os.path.join(containment, "cgroup.procs")
    pid = str(os.getpid())
    try:
        # The engine moves this process in from a thread while it starts (a move waits for the
        # kernel, ~5-20 ms); only if that has not happened yet does the wrapper wait for it.
        fd = os.open(procs, os.O_RDONLY | os.O_CLOEXEC)
        try:
            inside = pid in os.read(fd, 65536).decode().split()
        finally:
            os.close(fd)
        if not inside:
            fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, pid.encode())
            finally:
                os.close(fd)
    except OSError as exc:
        return f"process group only: could not join the cgroup {containment} ({exc.strerror})"
    return f"cgroup {containment} ({limits_text(containment)})"


def _say(text: str) -> None:
    """A line for the job's log; a full disk must not stop the wrapper. Its bytes as they came
    (a non-UTF-8 name's surrogates back to its bytes), which `gpudesk logs` spells as it spells
    the job's own output (`\\xff`); print() would write Python's `\\udcff` for them."""
    try:
        sys.stderr.buffer.write(f"gpudesk: {text}\n".encode("utf-8", "surrogateescape"))
        sys.stderr.buffer.flush()
    except (OSError, ValueError):
        pass


def _start(command: list[str], workdir: str, umask: int | None) -> tuple[int, str | None, int]:
    """Start the command, with `umask` where given (this process's records keep its own);
    returns (pid, None, 0), or (0, what went wrong, exit code)."""
    try:
        os.chdir(workdir)
    except OSError as exc:
        return (
            0,
            f"cannot enter the working directory {workdir}: {exc.strerror or exc}",
            EXIT_NOT_EXECUTABLE,
        )
    own = os.umask(umask) if umask is not None else None  # posix_spawn has no umask of its own
    try:
        # Python ignores SIGPIPE and SIGXFSZ; give the command the defaults, as subprocess does.
        pid = os.posix_spawnp(
            command[0], command, os.environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
        )
    except OSError as exc:
        return (0, *_exec_failure(command[0], exc))
    finally:
        if own is not None:
            os.umask(own)
    return pid, None, 0


def _env_path(env: dict[bytes, bytes]) -> str:
    """The PATH a command is looked up on in `env` (the system's default where it has none)."""
    return env.get(b"PATH", os.defpath.encode()).decode("utf-8", "surrogateescape")


def _say_start_failure(
    error: str, code: int, program: str, job_env: dict[bytes, bytes] | None
) -> None:
    """The job's log gets why its command did not start, and for a bare name not found the
    PATH it was looked up on (with none, the system's default one: os.defpath)."""
    _say(error)
    if code == EXIT_NOT_FOUND and "/" not in program:
        path = os.environ.get("PATH", os.defpath) if job_env is None else _env_path(job_env)
        _say(f"the job's PATH: {path}")


def _exec_failure(program: str, exc: OSError) -> tuple[str, int]:
    """What a command that could not be started is told, and its exit code (as a shell's)."""
    if isinstance(exc, FileNotFoundError):
        if "/" in program:
            return f"command not found: {program}", EXIT_NOT_FOUND
        # A bare name is looked up on the PATH the job was submitted with, as sbatch does: the
        # usual miss is `python` from a shell whose virtual environment was not active
        hint = "; was its virtual environment active?" if program.startswith("python") else ""
        return (
            f"command not found: {program} (not on the job's PATH, the submitting shell's{hint})",
            EXIT_NOT_FOUND,
        )
    if isinstance(exc, PermissionError):
        return f"permission denied: {program}", EXIT_NOT_EXECUTABLE
    return f"cannot start {program}: {exc.strerror or exc}", EXIT_NOT_EXECUTABLE


def parse_umask(text: str) -> int | None:
    """The `--umask` argument ("0027", octal) as a number, or None when it is not one."""
    if not text or len(text) > 4 or any(c not in "01234567" for c in text):
        return None
    mask = int(text, 8)
    return mask if mask <= 0o777 else None


def parse_owner(text: str) -> tuple[int, int, list[int]] | None:
    """ "UID:GID:G1,G2,..." (the `--as` argument) as numbers, or None when it is not that."""
    fields = text.split(":")
    if len(fields) != 3 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    groups = fields[2].split(",") if fields[2] else []
    if not all(g.isdigit() for g in groups):
        return None
    return int(fields[0]), int(fields[1]), [int(g) for g in groups]


def encode_env(env: dict[str, str]) -> bytes:
    """An environment as ENV_FILE holds it: `NAME=VALUE` NUL-terminated, each as the OS has
    it (os.fsencode). Raises ValueError for what no environment can hold, as execve would."""
    out = []
    for name, value in env.items():
        key, data = os.fsencode(name), os.fsencode(value)
        if not key or b"=" in key or b"\0" in key or b"\0" in data:
            raise ValueError(f"illegal environment variable: {name!r}")
        out.append(key + b"=" + data + b"\0")
    return b"".join(out)


def decode_env(data: bytes) -> dict[bytes, bytes]:
    """ENV_FILE's bytes as the mapping execve takes (a name without "=" is left out)."""
    env = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            env[name] = value
    return env


def take_env(attempt_dir: str) -> dict[bytes, bytes] | None:
    """The job's environment from ENV_FILE, which is then removed (it may hold secrets and is
    no longer needed: a restarted engine adopts the wrapper, never starts it again); None
    when it cannot be read. The folder is root's alone: the file is the engine's."""
    path = os.path.join(attempt_dir, ENV_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, ENV_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:  # noqa: SIM105
        os.unlink(path)
    except OSError:
        pass
    return decode_env(data)


def _execvpe(program: str, argv: list[str], env: dict[bytes, bytes]) -> None:
    """os.execvpe without its imports: run as the job's owner, the child may not read the
    interpreter's library (a virtual environment in root's home), so it imports nothing after
    the switch. The search is os.execvpe's (the first error other than "not there" wins) on
    the job's PATH (`env`'s, never the wrapper's own), but a folder on PATH the owner may not
    search counts as "not there", as a shell counts it."""
    if "/" in program:
        os.execve(program, argv, env)
    first: OSError | None = None
    last: OSError | None = None
    path = _env_path(env)
    for folder in path.split(os.pathsep):
        try:
            os.execve(os.path.join(folder or ".", program), argv, env)
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
        except PermissionError as exc:
            if os.access(folder or ".", os.X_OK):  # the file refuses, not its folder
                first = first or exc
            last = exc if first else FileNotFoundError(program)
        except OSError as exc:
            last = exc
            first = first or exc
    raise first or last or FileNotFoundError(program)


def _start_as(
    command: list[str],
    workdir: str,
    owner: tuple[int, int, list[int]],
    umask: int,
    env: dict[bytes, bytes],
) -> tuple[int, str | None, int]:
    """Start the command as its owner (a system engine's job): fork; the child takes the
    owner's groups, gid and uid, and only then enters the working directory, so a folder the
    owner may not enter fails the job instead of being entered with root's rights, and only
    then gets the job's environment `env` (execve), which this root process never had.
    posix_spawn cannot change the uid, hence fork. What went wrong in the child comes back
    through a close-on-exec pipe ("CODE MESSAGE"; nothing when the exec succeeded)."""
    uid, gid, groups = owner
    read_end, write_end = os.pipe()  # both close-on-exec (PEP 446)
    pid = os.fork()
    if pid == 0:  # the child: only os calls, and never back into the wrapper's code
        code, error = EXIT_NOT_EXECUTABLE, "cannot start the command"
        try:
            os.close(read_end)
            try:
                os.setgroups(groups)
                os.setgid(gid)
                os.setuid(uid)
            except OSError as exc:
                error = f"cannot take the identity of uid {uid}: {exc.strerror or exc}"
                raise
            try:
                os.chdir(workdir)
            except OSError as exc:
                error = f"cannot enter the working directory {workdir}: {exc.strerror or exc}"
                raise
            os.umask(umask)  # the wrapper's own records were private; the job gets its own
            for sig in _RESET_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            try:
                _execvpe(command[0], command, env)
            except OSError as exc:
                error, code = _exec_failure(command[0], exc)
                raise
        except BaseException:
            try:  # noqa: SIM105
                os.write(write_end, f"{code} {error}".encode("utf-8", "surrogateescape"))
            except BaseException:
                pass
            os._exit(code)
    os.close(write_end)
    report = b""
    try:
        while chunk := os.read(read_end, 4096):
            report += chunk
    except OSError:
        pass
    finally:
        os.close(read_end)
    if not report:
        return pid, None, 0
    os.waitpid(pid, 0)
    code_text, _, message = report.decode("utf-8", "surrogateescape").partition(" ")
    return 0, message, int(code_text) if code_text.isdigit() else EXIT_NOT_EXECUTABLE


# What the command gets back as the default: what Python ignores (SIGPIPE, SIGXFSZ; as
# subprocess does) and what the wrapper handles itself.
# The signals a cancel or a preemption sends the whole group (gpudesk.core.jobs.PREEMPT_SIGNALS):
# the command handles them; the wrapper only needs to outlive them to record the exit.
_OUTLIVED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, *_OUTLIVED)


def _ignore(_signum: int, _frame: object) -> None:
    pass


def owner_refused(owner: tuple[int, int, list[int]], check: str) -> tuple[list[int], str | None]:
    """Is `owner` still the user her job was submitted by, in the station's group (`--check
    STATION_GID:LOGIN`, a part empty where there is none)? (the groups she was submitted with
    that she still holds, None), or ([], why her job is not run). The user database is asked
    here, not by the engine: one that hangs (LDAP down) holds this job's start alone, never the
    engine's loop. The rule is core/known_owner.py's (as_known_now's too), loaded by its path,
    since this process has no gpudesk on its path: its folder goes after the standard
    library's, so no file there can stand in for a module of the standard library."""
    station, _, login = check.partition(":")
    core = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core")
    sys.path.append(core)
    try:
        known_owner = __import__("known_owner")
    finally:
        sys.path.remove(core)
    uid, gid, groups = owner
    gids = int(station) if station.isdigit() else None
    problem, holds = known_owner.owner_problem(uid, gid, login or None, gids)
    if problem is not None:
        return [], f"{problem}: it is not run"
    return [g for g in groups if g in holds], None


def _not_run(attempt_dir: str, refused: str) -> int:
    """The job's owner was refused (`owner_refused`): its command is not run, and never was, which
    the launch lock, left "-", tells the engine (runner.read_exit); and no log is left that is
    owned by whoever holds her uid now."""
    try:  # noqa: SIM105
        os.unlink(os.path.join(attempt_dir, LOG_FILE))
    except OSError:
        pass
    exit_file, ended = os.path.join(attempt_dir, "exit.json"), time.time()
    write_exit(exit_file, exit_code=EXIT_NOT_EXECUTABLE, signal=None, ended_at=ended, error=refused)
    return EXIT_NOT_EXECUTABLE


def _options(
    argv: list[str],
) -> tuple[list[str], int | None, tuple[int, int, list[int]] | None, str | None]:
    """`argv` without its options, and the `--umask`, `--as` and `--check` they give ([] where
    one is not well formed: the usage is said)."""
    umask, owner, check = None, None, None
    if len(argv) > 7 and argv[5] == "--umask":
        umask = parse_umask(argv[6])
        argv = argv[:5] + argv[7:] if umask is not None else []
    if len(argv) > 7 and argv[5] == "--as":
        owner = parse_owner(argv[6])
        argv = argv[:5] + argv[7:] if owner is not None else []
    if len(argv) > 7 and argv[5] == "--check" and owner is not None:
        check, argv = argv[6], argv[:5] + argv[7:]
    return argv, umask, owner, check


def main(argv: list[str]) -> int:
    argv, job_umask, owner, check = _options(argv)
    if len(argv) < 7 or argv[5] != "--":
        _say(
            "usage: wrapper.py ATTEMPT_DIR WORKDIR SHELL(0|1) LOCK_FD CONTAINMENT [--umask OCTAL] "
            "[--as UID:GID:G1,G2 [--check STATION_GID:LOGIN]] -- COMMAND..."
        )
        return EXIT_USAGE
    attempt_dir, workdir, shell, lock_fd = argv[0], argv[1], argv[2] == "1", argv[3]
    command = ["/bin/sh", "-c", argv[6]] if shell else argv[6:]
    wrapper_file = os.path.join(attempt_dir, "wrapper.json")
    exit_file = os.path.join(attempt_dir, "exit.json")
    # A job run as its owner: the records this root process writes in the attempt's folder are
    # for the engine alone (the owner reads only the log). Its command gets the submitter's
    # umask; a job from a client that sent none the engine's, as before (077 on a station).
    engine_umask = os.umask(0o077) if owner is not None else 0
    umask = job_umask if job_umask is not None else engine_umask
    # ... and its environment is the engine's: the job's own waits in job.env for the child
    job_env = take_env(attempt_dir) if owner is not None else None

    # Cancel sends SIGTERM to the whole process group, a preemption its signal (_OUTLIVED): the
    # command handles it; the wrapper only needs to outlive it to record the exit. Handlers
    # (unlike SIG_IGN) are reset in the child.
    for sig in _OUTLIVED:
        signal.signal(sig, _ignore)

    lock = int(lock_fd) if lock_fd.isdigit() else -1
    if lock >= 0:
        try:  # held by this process alone: the command must not inherit it
            os.set_inheritable(lock, False)
        except OSError:
            lock = -1
    containment = _join_cgroup(argv[4])

    # Written before the command starts, so a restarted engine can find this process even if it
    # died before recording the pid itself (the launch lock says that this process lives).
    started_at = time.time()

    def say_who(child_pid: int | None) -> None:
        write_record(
            wrapper_file,
            pid=os.getpid(),
            child_pid=child_pid,
            started_at=started_at,
            containment=containment,
        )

    say_who(None)
    if owner is not None and check is not None:
        kept, refused = owner_refused(owner, check)
        if refused is not None:
            return _not_run(attempt_dir, refused)
        owner = (owner[0], owner[1], kept)

    if lock >= 0:
        # From here on the command may run: a restarted engine that finds this wrapper dead
        # must not start it again. In place, into the byte the engine wrote: no block needed.
        try:  # noqa: SIM105
            os.pwrite(lock, LOCK_STARTED, 0)
        except OSError:
            pass
    if owner is None:
        child, error, code = _start(command, workdir, job_umask)
    elif job_env is None:
        child, error, code = 0, "cannot read the job's environment (job.env)", EXIT_NOT_EXECUTABLE
    else:
        child, error, code = _start_as(command, workdir, owner, umask, job_env)
    if error is not None:
        _say_start_failure(error, code, command[0], job_env)
        write_exit(exit_file, exit_code=code, signal=None, ended_at=time.time(), error=error)
        return code

    say_who(child)
    _, status = os.waitpid(child, 0)  # retried by Python on EINTR (PEP 475)
    ended_at = time.time()
    killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    exit_code = 128 + killed_by if killed_by else os.waitstatus_to_exitcode(status)
    write_exit(exit_file, exit_code=exit_code, signal=killed_by, ended_at=ended_at, error=None)
    return exit_code


if __name__ == "__main__":
    # os._exit, not sys.exit: flushing a stream on a full disk at interpreter exit would turn
    # the command's exit code into 120.
    try:
        status = main(sys.argv[1:])
    except BaseException:  # a bug of the wrapper's, not an outcome of the command: log it, exit 1
        try:
            import traceback

            traceback.print_exc()
        except BaseException:
            pass
        status = 1
    os._exit(status)
