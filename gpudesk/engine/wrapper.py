"""The small process that runs one job attempt and records how it ended.

The engine starts it as the leader of a new process session (setsid), with the job's environment,
working directory and log file as stdout/stderr. It starts the job's command as its child, in the
same process group, waits for it and writes `exit.json` into the attempt's folder, so the outcome
is known even when the engine was down while the job ended.

It is run by path with `python -I -S`, so it must import nothing but the standard library.

Files in the attempt folder (written atomically: temporary file + rename):
    wrapper.json  {"pid", "child_pid", "started_at"}: pid at once, child_pid once the command runs
    exit.json     {"exit_code", "signal", "ended_at", "error"} when the command has ended
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: wrapper.py ATTEMPT_DIR SHELL(0|1) -- COMMAND...", file=sys.stderr)
        return 2
    attempt_dir, shell = argv[0], argv[1] == "1"
    command = argv[3:]

    # Cancel sends SIGTERM to the whole process group: the command handles it; the wrapper only
    # needs to outlive it to record the exit. Handlers (unlike SIG_IGN) are reset for the child.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)

    # Written before the command starts, so a restarted engine can find this process even if it
    # died before recording the pid itself.
    wrapper_file = os.path.join(attempt_dir, "wrapper.json")
    write_json(wrapper_file, {"pid": os.getpid(), "child_pid": None, "started_at": time.time()})

    error = None
    try:
        child = subprocess.Popen(command[0] if shell else command, shell=shell)
    except FileNotFoundError:
        error, code = f"command not found: {command[0]}", EXIT_NOT_FOUND
    except PermissionError:
        error, code = f"permission denied: {command[0]}", EXIT_NOT_EXECUTABLE
    except OSError as exc:
        error, code = f"cannot start {command[0]}: {exc.strerror or exc}", EXIT_NOT_EXECUTABLE

    if error is not None:
        print(f"gpudesk: {error}", file=sys.stderr, flush=True)
        write_json(os.path.join(attempt_dir, "exit.json"),
                   {"exit_code": code, "signal": None, "ended_at": time.time(), "error": error})
        return code

    write_json(wrapper_file,
               {"pid": os.getpid(), "child_pid": child.pid, "started_at": time.time()})
    returncode = child.wait()
    ended_at = time.time()
    killed_by = -returncode if returncode < 0 else None
    exit_code = 128 + killed_by if killed_by else returncode
    write_json(os.path.join(attempt_dir, "exit.json"),
               {"exit_code": exit_code, "signal": killed_by, "ended_at": ended_at, "error": None})
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
