"""The desk's exit code: a desk that crashes (here: its stylesheet is missing, as it was from the
wheel) exits non-zero, and one the user leaves with `q` exits 0. Run as the real `gpudesk desk`
command on a real pseudo-terminal, on a recorded replay (no engine needed), and as `gpudesk`
alone on a real engine (its first frame read while Textual loads: `open_feed`)."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import EngineHandle

from gpudesk.paths import Home

REPLAY = Path(__file__).resolve().parent / "data" / "station.json"

# The desk as `gpudesk desk --replay`; CSS_PATH is pointed elsewhere first when asked, as a wheel
# without desk.tcss leaves it.
SCRIPT = """
import sys
from gpudesk.screens.app import DeskApp
if sys.argv[1] == "missing":
    DeskApp.CSS_PATH = "no-such-stylesheet.tcss"
sys.argv = ["gpudesk", "desk", "--replay", sys.argv[2]]
from gpudesk.cli.entry import main
main()
"""


def run_on_pty(
    args: list[str], keys: bytes, timeout: float = 30.0, drawn: bytes = b"SIMULATED"
) -> tuple[int, str]:
    """Run `args` with a 100x30 pseudo-terminal as stdin/stdout/stderr; type `keys` once it
    has drawn `drawn`; return its exit code and everything it wrote."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    proc = subprocess.Popen(
        args, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True
    )
    os.close(follower)
    seen = b""
    typed = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk and proc.poll() is not None:
                    break
                seen += chunk
            if not typed and drawn in seen:
                time.sleep(0.5)
                os.write(leader, keys)
                typed = True
            if proc.poll() is not None and not ready:
                break
        else:
            proc.kill()
            pytest.fail(f"the desk did not exit in {timeout} s; it wrote: {seen[-2000:]!r}")
        return proc.wait(), seen.decode(errors="replace")
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()


def test_a_desk_that_crashes_exits_non_zero() -> None:
    code, out = run_on_pty([sys.executable, "-c", SCRIPT, "missing", str(REPLAY)], b"")
    assert code == 1, out[-2000:]
    assert "no-such-stylesheet.tcss" in out  # Textual's own message says what is missing
    assert "the desk stopped on an error" in out


def test_a_desk_left_with_q_exits_zero() -> None:
    code, out = run_on_pty([sys.executable, "-c", SCRIPT, "present", str(REPLAY)], b"q")
    assert code == 0, out[-2000:]


def test_gpudesk_alone_opens_the_desk_on_the_engine_and_q_leaves_it(
    engine: EngineHandle, home: Home
) -> None:
    engine.stop()
    engine.start(backend="sim:dgx-station-a100")
    (job,) = engine.submit({"name": "shown-on-the-desk", "command": ["sleep", "30"]})
    engine.wait_state(job, "running")
    entry = "from gpudesk.cli.entry import main; main()"
    # SIMULATED and the job's name come from the engine's first frame (status, then jobs)
    code, out = run_on_pty([sys.executable, "-c", entry], b"q", drawn=b"shown-on-the-desk")
    assert code == 0, out[-2000:]
    assert "SIMULATED" in out


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        ((), {"TERM": "dumb"}, "TERM=dumb"),
        (("desk",), {"TERM": "dumb"}, "TERM=dumb"),
        ((), {"TERM": "xterm-256color", "PYTHONIOENCODING": "latin-1"}, "(iso8859-1)"),
    ],
)
def test_a_dumb_terminal_is_refused_in_one_line_pointing_to_top(
    home: Home, args: tuple[str, ...], env: dict[str, str], said: str
) -> None:
    """TERM=dumb (Emacs' shell, a serial console): the desk would write the alternate screen,
    mouse tracking and 24-bit colour as noise; in a latin-1 locale its boxes and bars came out
    as literal `\u2502` text. One line, exit 2 as where there is no terminal, nothing drawn and
    no engine started; `gpudesk top` is made for such terminals."""
    leader, follower = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpudesk", *args],
            stdin=follower,
            stdout=follower,
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
            text=True,
            timeout=60,
            check=False,
        )
        os.close(follower)
        follower = -1
        drawn = b""
        while select.select([leader], [], [], 0)[0]:
            try:
                drawn += os.read(leader, 65536)
            except OSError:  # EIO: nothing more
                break
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert said in line and "`gpudesk top`" in line, line
    assert drawn == b""  # no escape sequence reached the terminal
    assert EngineHandle(home).pid is None


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("x" * 300, "cannot be used: File name too long"),  # was an OSError traceback
        ("missing.json", "is not a file"),
    ],
    ids=["name too long", "missing"],
)
def test_a_replay_file_that_cannot_be_is_one_usage_paragraph(
    home: Home, tmp_path: Path, name: str, said: str
) -> None:
    replay = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", "desk", "--replay", str(replay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"error: --replay: {replay} {said}\n" or (
        done.stderr.startswith(f"error: --replay: {replay} {said} (a path holds at most")
        and done.stderr.count("\n") == 1
    ), done.stderr
    assert not home.root.exists()  # refused before any engine was started


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("[" * 100_000 + "]" * 100_000, "is not a recording of the desk: it is nested too deeply"),
        ('{"frames": 5}', "is not a recording of the desk: 'int' object is not iterable"),
        ('{"frames": []}', "is not a recording of the desk: a replay needs at least one frame"),
    ],
    ids=["nested past the stack", "frames not a list", "no frame"],
)
def test_a_replay_that_is_no_recording_is_one_usage_paragraph(
    tmp_path: Path, content: str, said: str
) -> None:
    """On a terminal (the desk refuses a pipe first): each was a traceback."""
    replay = tmp_path / "replay.json"
    replay.write_text(content)
    code, out = run_on_pty([sys.executable, "-c", SCRIPT, "present", str(replay)], b"")
    assert code == 2, out[-2000:]
    assert "Traceback" not in out, out[-2000:]
    assert f"error: --replay: {replay} {said}" in out, out[-2000:]
