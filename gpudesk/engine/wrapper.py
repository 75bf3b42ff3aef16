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

Whatever happens to its records, it exits with the command's own exit code (128 + the signal
that killed it), never with a traceback: the engine, its parent, learns the outcome from that
status when the record could not be written.

Files in the attempt folder:
    launch.lock         held (flock) by the wrapper for its whole life; "-" or "+" (started)
    wrapper.json        {"pid", "child_pid", "started_at", "containment"}; best effort, written
                        atomically (temporary file + rename) before and after the command starts
    exit.json           {"exit_code", "signal", "ended_at", "error"} when the command has ended
    output.log          the job's stdout and stderr
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
    return f"cgroup {containment}"


def _say(text: str) -> None:
    """A line for the job's log; a full disk must not stop the wrapper."""
    try:  # noqa: SIM105
        print(f"gpudesk: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _start(command: list[str], workdir: str) -> tuple[int, str | None, int]:
    """Start the command; returns (pid, None, 0), or (0, what went wrong, exit code)."""
    try:
        os.chdir(workdir)
    except OSError as exc:
        return (
            0,
            f"cannot enter the working directory {workdir}: {exc.strerror or exc}",
            EXIT_NOT_EXECUTABLE,
        )
    try:
        # Python ignores SIGPIPE and SIGXFSZ; give the command the defaults, as subprocess does.
        pid = os.posix_spawnp(
            command[0], command, os.environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
        )
    except FileNotFoundError:
        return 0, f"command not found: {command[0]}", EXIT_NOT_FOUND
    except PermissionError:
        return 0, f"permission denied: {command[0]}", EXIT_NOT_EXECUTABLE
    except OSError as exc:
        return 0, f"cannot start {command[0]}: {exc.strerror or exc}", EXIT_NOT_EXECUTABLE
    return pid, None, 0


def _ignore(_signum: int, _frame: object) -> None:
    pass


def main(argv: list[str]) -> int:
    if len(argv) < 7 or argv[5] != "--":
        _say("usage: wrapper.py ATTEMPT_DIR WORKDIR SHELL(0|1) LOCK_FD CONTAINMENT -- COMMAND...")
        return EXIT_USAGE
    attempt_dir, workdir, shell, lock_fd = argv[0], argv[1], argv[2] == "1", argv[3]
    command = ["/bin/sh", "-c", argv[6]] if shell else argv[6:]
    wrapper_file = os.path.join(attempt_dir, "wrapper.json")
    exit_file = os.path.join(attempt_dir, "exit.json")

    # Cancel sends SIGTERM to the whole process group: the command handles it; the wrapper only
    # needs to outlive it to record the exit. Handlers (unlike SIG_IGN) are reset in the child.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
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

    if lock >= 0:
        # From here on the command may run: a restarted engine that finds this wrapper dead
        # must not start it again. In place, into the byte the engine wrote: no block needed.
        try:  # noqa: SIM105
            os.pwrite(lock, LOCK_STARTED, 0)
        except OSError:
            pass
    child, error, code = _start(command, workdir)
    if error is not None:
        _say(error)
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
