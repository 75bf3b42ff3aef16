"""The small process that runs one job attempt and records how it ended.

The engine starts it as the leader of a new process session (setsid), with the job's environment
and log file as stdout/stderr; it enters the job's working directory itself. It starts the job's
command as its child, in the same process group, waits for it and writes `exit.json` into the
attempt's folder, so the outcome
is known even when the engine was down while the job ended.

It is run by path with `python -I -S` and sits on the path from submit to job start, so it imports
only what it must: `json` and `subprocess` alone would double its start-up time; the records are
written by hand and the command is started with posix_spawn.

Files in the attempt folder (written atomically: temporary file + rename):
    wrapper.json  {"pid", "child_pid", "started_at"}: pid at once, child_pid once the command runs
    exit.json     {"exit_code", "signal", "ended_at", "error"} when the command has ended
"""

from __future__ import annotations

import os
import signal
import sys
import time

EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


def _json_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    import json  # only for error texts: rare, and json is slow to import

    return json.dumps(value)


def write_record(path: str, **fields: object) -> None:
    text = "{" + ", ".join(f'"{k}": {_json_value(v)}' for k, v in fields.items()) + "}"
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


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
    if len(argv) < 5 or argv[3] != "--":
        print("usage: wrapper.py ATTEMPT_DIR WORKDIR SHELL(0|1) -- COMMAND...", file=sys.stderr)
        return 2
    attempt_dir, workdir, shell = argv[0], argv[1], argv[2] == "1"
    command = ["/bin/sh", "-c", argv[4]] if shell else argv[4:]
    wrapper_file = os.path.join(attempt_dir, "wrapper.json")
    exit_file = os.path.join(attempt_dir, "exit.json")

    # Cancel sends SIGTERM to the whole process group: the command handles it; the wrapper only
    # needs to outlive it to record the exit. Handlers (unlike SIG_IGN) are reset in the child.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)

    # Written before the command starts, so a restarted engine can find this process even if it
    # died before recording the pid itself.
    write_record(wrapper_file, pid=os.getpid(), child_pid=None, started_at=time.time())

    child, error, code = _start(command, workdir)
    if error is not None:
        print(f"gpudesk: {error}", file=sys.stderr, flush=True)
        write_record(exit_file, exit_code=code, signal=None, ended_at=time.time(), error=error)
        return code

    write_record(wrapper_file, pid=os.getpid(), child_pid=child, started_at=time.time())
    _, status = os.waitpid(child, 0)  # retried by Python on EINTR (PEP 475)
    ended_at = time.time()
    killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    exit_code = 128 + killed_by if killed_by else os.waitstatus_to_exitcode(status)
    write_record(exit_file, exit_code=exit_code, signal=killed_by, ended_at=ended_at, error=None)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
