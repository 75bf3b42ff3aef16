"""`gpudesk logs --raw` (and `gpudesk logs` into a pipe or a file) writes a job's output byte
for byte, as `cat`: bytes that are not UTF-8 too, whether the log is read from its file or
through the engine's `log` request, dumped or followed. On a terminal, without --raw, those
bytes are spelled out (`\\xff`) beside the escape sequences, never obeyed nor hidden."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from conftest import EngineHandle
from terminal import on_a_terminal

from gpudesk.cli import logs
from gpudesk.cli.logs import LogFollower

GPUDESK = [sys.executable, "-m", "gpudesk"]
BYTES = b"\xff\xfe abc \x1b[2J"  # not UTF-8, then an escape sequence that clears the screen
PRINTER = {"name": "bytes", "command": ["printf", r"\377\376 abc \033[2J"]}


def test_raw_and_a_pipe_get_the_jobs_bytes_byte_for_byte(engine: EngineHandle) -> None:
    [job_id] = engine.submit(PRINTER)
    engine.wait_state(job_id, "succeeded")
    for argv in (
        ["logs", "--raw", str(job_id)],
        ["logs", str(job_id)],  # into a pipe
        ["logs", "--raw", "--follow", str(job_id)],
        ["logs", "--raw", "-n", "1", str(job_id)],
    ):
        done = subprocess.run([*GPUDESK, *argv], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout == BYTES, (argv, done.stdout)


def test_a_terminal_gets_them_spelled_out(engine: EngineHandle) -> None:
    [job_id] = engine.submit(PRINTER)
    engine.wait_state(job_id, "succeeded")
    shown = on_a_terminal([*GPUDESK, "logs", str(job_id)], as_written=True)
    assert shown == rb"\xff\xfe abc \x1b[2J", shown
    assert on_a_terminal([*GPUDESK, "logs", "--raw", str(job_id)], as_written=True) == BYTES


class Stdout(io.TextIOWrapper):
    """A text stdout over a byte buffer, as sys.stdout is."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", write_through=True)

    def written(self) -> bytes:
        assert isinstance(self.buffer, io.BytesIO)
        return self.buffer.getvalue()


@pytest.mark.parametrize("follow", [False, True])
def test_read_through_the_engine_they_arrive_as_they_are(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch, follow: bool
) -> None:
    """Where the file refuses this process (a system engine's job), the bytes come through
    the engine's `log` request (base64 on the wire) and reach stdout's buffer unchanged."""
    [job_id] = engine.submit(PRINTER)
    engine.wait_state(job_id, "succeeded")
    monkeypatch.setattr(logs, "refused", lambda path: True)
    out = Stdout()
    follower = LogFollower(engine.api, job_id, out, raw_out=out.buffer)
    assert isinstance(follower.reader(engine.show(job_id).attempts[-1]), logs.EngineLogStream)
    if follow:
        follower.follow()
    else:
        follower.dump(engine.show(job_id).attempts[-1])
    assert out.written() == BYTES


def test_a_log_removed_by_hand_is_said_not_printed_as_nothing(engine: EngineHandle) -> None:
    """`rm jobs/3/1/output.log` (room freed by hand): `logs` printed nothing, exit 0, and
    `--json` an empty output, as if the job had printed nothing."""
    [job_id] = engine.submit(PRINTER)
    engine.wait_state(job_id, "succeeded")
    log = engine.home.attempt_dir(job_id, 1) / "output.log"
    log.unlink()
    for argv in (["logs", str(job_id)], ["logs", "--json", str(job_id)]):
        done = subprocess.run([*GPUDESK, *argv], capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout) == (1, ""), (argv, done)
        assert done.stderr == (
            f"error: job {job_id}'s attempt 1 log {log} no longer exists: it was removed since "
            "the attempt wrote it, and its output with it\n"
        ), done.stderr
