"""`gpudesk logs --raw` (and `gpudesk logs` into a pipe or a file) writes a job's output byte
for byte, as `cat`: bytes that are not UTF-8 too, whether the log is read from its file or
through the engine's `log` request, dumped or followed. On a terminal, without --raw, those
bytes are spelled out (`\\xff`) beside the escape sequences, never obeyed nor hidden."""

from __future__ import annotations

import contextlib
import io
import os
import pty
import subprocess
import sys
import termios

import pytest
from conftest import EngineHandle

from gpudesk.cli import logs
from gpudesk.cli.logs import LogFollower

GPUDESK = [sys.executable, "-m", "gpudesk"]
BYTES = b"\xff\xfe abc \x1b[2J"  # not UTF-8, then an escape sequence that clears the screen
PRINTER = {"name": "bytes", "command": ["printf", r"\377\376 abc \033[2J"]}


def on_a_terminal(argv: list[str]) -> bytes:
    """What `argv` writes to its stdout when that is a terminal (a pty), its newlines as the
    job wrote them (the terminal's own \\n -> \\r\\n turned off)."""
    controller, terminal = pty.openpty()
    attrs = termios.tcgetattr(terminal)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(terminal, termios.TCSANOW, attrs)
    try:
        done = subprocess.run(argv, stdout=terminal, stderr=subprocess.PIPE, timeout=60)
        assert done.returncode == 0, done.stderr
        os.close(terminal)
        terminal = -1
        out = b""
        with contextlib.suppress(OSError):  # EIO once the terminal side is closed and drained
            while chunk := os.read(controller, 65536):
                out += chunk
        return out
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)


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
    shown = on_a_terminal([*GPUDESK, "logs", str(job_id)])
    assert shown == rb"\xff\xfe abc \x1b[2J", shown
    assert on_a_terminal([*GPUDESK, "logs", "--raw", str(job_id)]) == BYTES


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
