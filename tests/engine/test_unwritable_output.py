"""Output that cannot be written, on the real daemon (gpudesk/cli/std_streams.py; beside
test_dependencies.py's reader that leaves `gpudesk logs J | head -1`).

A full disk (here /dev/full) is an error said in one line, exit 1, never a traceback, and a
command that acted says what it did all the same (submit queued the job, which a script that
retries must not take for nothing done). A reader that leaves the pipe is no error: a listing
exits 0, and a command whose exit status is a job's (`run`, `wait`, `logs -f`) goes on and
exits with it (it exited 0, and `gpudesk run F | true` submitted nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle

GPUDESK = [sys.executable, "-m", "gpudesk"]
FULL = "error: cannot write the output: No space left on device\n"

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")

# Python's own stdout buffers what goes to a file, or (PYTHONUNBUFFERED, python -u) not: the
# write fails at the print, or at the exit's flush
BUFFERINGS = [pytest.param(True, id="buffered"), pytest.param(False, id="unbuffered")]


def _env(buffered: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return env if buffered else {**env, "PYTHONUNBUFFERED": "1"}


def into_full_disk(*args: str, buffered: bool = True) -> subprocess.CompletedProcess[str]:
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [*GPUDESK, *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=_env(buffered),
        )


def gpudesk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60)


def submitted(*command: str) -> int:
    result = gpudesk("submit", "--", *command)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[2])  # "submitted job 3 (name)"


@pytest.mark.parametrize("buffered", BUFFERINGS)
def test_a_read_into_a_full_disk_is_one_line_and_exit_1(
    engine: EngineHandle, buffered: bool
) -> None:
    job = submitted("seq", "3")
    assert gpudesk("wait", "-q", str(job)).returncode == 0
    for read in (
        ["queue"],
        ["queue", "--all", "--long"],  # the full CLI, not the fast path
        ["show", str(job), "--json"],
        ["logs", str(job)],
        ["history"],
        ["wait", str(job)],
        ["engine", "status"],
        ["top", "--once"],
        ["--version"],
    ):
        said = into_full_disk(*read, buffered=buffered)
        assert (said.returncode, said.stderr) == (1, FULL), read


@pytest.mark.parametrize("buffered", BUFFERINGS)
def test_a_submit_into_a_full_disk_says_its_job_was_queued(
    engine: EngineHandle, buffered: bool
) -> None:
    for form in ([], ["--parsable"], ["--json"]):
        said = into_full_disk("submit", *form, "--hold", "--", "true", buffered=buffered)
        queued = engine.api.jobs()[-1]
        assert (said.returncode, said.stderr) == (
            1,
            f"error: cannot write the output (No space left on device); job {queued.id} was "
            "queued all the same: gpudesk queue lists it\n",
        ), form
        assert queued.state == "queued"


def test_a_cancel_into_a_full_disk_says_what_it_did(engine: EngineHandle) -> None:
    job = int(gpudesk("submit", "--hold", "--", "true").stdout.split()[2])
    said = into_full_disk("cancel", str(job))
    assert said.returncode == 1
    assert said.stderr.startswith(
        "error: cannot write the output (No space left on device); the engine did this all "
        f"the same (job {job}: "
    ), said.stderr
    assert engine.job(job).state == "cancelled"


def test_a_run_into_a_full_disk_says_its_jobs_were_submitted(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """--json: the progress on stderr, the report on stdout once the run has ended."""
    profile = tmp_path / "one.toml"
    profile.write_text('[[jobs]]\nname = "one"\ncommand = ["true"]\n')
    said = into_full_disk("run", str(profile), "--json")
    (job,) = engine.api.jobs()
    assert said.returncode == 1
    assert said.stderr.endswith(
        f"error: cannot write the output (No space left on device); 1 job(s) of the run "
        f"{job.group} were submitted all the same: gpudesk wait --group {job.group} follows "
        "them to their end\n"
    ), said.stderr
    assert "Traceback" not in said.stderr


def test_a_stderr_that_cannot_be_written_keeps_the_exit_status(engine: EngineHandle) -> None:
    """`gpudesk wait` without a job is a usage error (2); its line cannot be said."""
    with open("/dev/full", "w") as full:
        result = subprocess.run([*GPUDESK, "wait"], stderr=full, timeout=60)
    assert result.returncode == 2


def _left_at_once(*args: str) -> tuple[int, bytes]:
    """`gpudesk ARGS | true`: the reader gone before the first write. (exit status, stderr)"""
    reader = subprocess.Popen([*GPUDESK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()
    errors = reader.stderr.read()
    return reader.wait(120), errors


def test_a_run_whose_reader_leaves_submits_follows_and_exits_with_its_status(
    engine: EngineHandle, tmp_path: Path
) -> None:
    profile = tmp_path / "bad.toml"
    profile.write_text('[[jobs]]\nname = "bad"\ncommand = ["sh", "-c", "exit 7"]\n')
    code, errors = _left_at_once("run", str(profile))
    assert (code, b"Traceback" in errors) == (1, False), errors  # a job failed: exit 1
    (job,) = engine.api.jobs()
    assert (job.name, job.state, job.exit_status) == ("bad", "failed", 7)


def test_wait_and_logs_f_whose_reader_leaves_exit_with_the_job_s_status(
    engine: EngineHandle,
) -> None:
    job = submitted("sh", "-c", "seq 100000; exit 7")  # more than a pipe holds
    assert _left_at_once("wait", str(job))[0] == 7
    assert _left_at_once("logs", "-f", str(job))[0] == 7
    # a listing still stops at once, quietly: exit 0
    assert _left_at_once("logs", str(job)) == (0, b"")


def test_station_commands_into_a_full_disk_say_what_they_did(engine: EngineHandle) -> None:
    """drain, undrain and engine stop acted before their line could not be written."""
    drained = into_full_disk("drain", "--reason", "disks")
    assert (drained.returncode, drained.stderr) == (
        1,
        "error: cannot write the output (No space left on device); the station was drained "
        "all the same: gpudesk engine status says so\n",
    )
    assert engine.api.status().drain is not None
    undrained = into_full_disk("undrain")
    assert undrained.stderr.endswith(
        "the station was undrained all the same: gpudesk engine status says so\n"
    ), undrained.stderr
    stopped = into_full_disk("engine", "stop")
    assert (stopped.returncode, stopped.stderr) == (
        1,
        "error: cannot write the output (No space left on device); the engine was stopped all "
        "the same\n",
    )
    assert engine.pid is None
