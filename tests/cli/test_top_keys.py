"""`q` leaves `gpudesk top` on a terminal, and the terminal is left as top found it: real
processes on a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from conftest import wait_for

from gpudesk.paths import Home

TOP = [sys.executable, "-m", "gpudesk", "top", "--interval", "0.2"]


@dataclass
class Terminal:
    master: int
    slave: int
    output: bytearray = field(default_factory=bytearray)

    def attrs(self) -> list:
        return termios.tcgetattr(self.slave)

    def drain(self) -> None:  # top must never block on a full terminal
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return
            if not data:
                return
            self.output += data


@pytest.fixture
def terminal(home: Home) -> Iterator[Terminal]:
    master, slave = os.openpty()
    term = Terminal(master, slave)
    threading.Thread(target=term.drain, daemon=True).start()
    yield term
    os.close(slave)
    os.close(master)


def start_top(term: Terminal) -> subprocess.Popen[bytes]:
    def controlling_terminal() -> None:  # as a shell gives it: Ctrl-C there is SIGINT here
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = {**os.environ, "GPUDESK_BACKEND": "none", "TERM": "xterm"}
    return subprocess.Popen(
        TOP,
        stdin=term.slave,
        stdout=term.slave,
        stderr=term.slave,
        env=env,
        preexec_fn=controlling_terminal,
    )


def ended(process: subprocess.Popen[bytes], timeout: float = 5.0) -> int:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError("top did not end") from None


@pytest.mark.parametrize(("key", "codes"), [(b"q", {0}), (b"\x03", {0, 130})])
def test_q_or_ctrl_c_leaves_top_and_the_terminal_is_restored(
    terminal: Terminal, key: bytes, codes: set[int]
) -> None:
    before = terminal.attrs()
    assert before[3] & termios.ICANON and before[3] & termios.ECHO  # a line-mode terminal
    top = start_top(terminal)
    wait_for(lambda: b"engine not running" in terminal.output, 20.0, what="top's first frame")
    # keys one at a time and unechoed while top runs ...
    wait_for(lambda: not terminal.attrs()[3] & termios.ICANON, what="top to take the keys")
    assert not terminal.attrs()[3] & termios.ECHO
    time.sleep(0.5)  # ... and a few frames drawn
    os.write(terminal.master, key)
    assert ended(top) in codes
    assert terminal.attrs() == before  # the terminal as top found it
    assert b"Traceback" not in terminal.output


def test_other_keys_do_not_end_top(terminal: Terminal) -> None:
    top = start_top(terminal)
    wait_for(lambda: b"engine not running" in terminal.output, 20.0, what="top's first frame")
    os.write(terminal.master, b"x j\r")
    time.sleep(1.0)
    assert top.poll() is None
    frames = terminal.output.count(b"engine not running")
    time.sleep(0.8)
    assert terminal.output.count(b"engine not running") > frames  # still refreshing
    os.write(terminal.master, b"Q")
    assert ended(top) == 0


def test_without_a_terminal_stdin_is_not_read_nor_escapes_written(home: Home) -> None:
    env = {**os.environ, "GPUDESK_BACKEND": "none"}
    top = subprocess.Popen(
        TOP, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert top.stdin is not None and top.stdout is not None
    top.stdin.write(b"q\n")
    top.stdin.flush()
    wait_for(lambda: b"engine not running" in top.stdout.read1(65536), 20.0, what="a frame")
    time.sleep(1.0)
    assert top.poll() is None  # `q` on a pipe is no key: top runs on until interrupted
    top.send_signal(signal.SIGINT)
    assert ended(top) == 0
    assert b"\x1b" not in top.stdout.read()  # a pipe gets no screen's escape sequence


# F2 and Shift-F2 in xterm, F2 in the Linux console, an arrow, Alt-q, a lone Esc: the q and Q
# in them are no keys pressed
ESCAPE_SEQUENCES = [b"\x1bOQ", b"\x1b[1;2Q", b"\x1b[[B", b"\x1b[A", b"\x1bq", b"\x1b"]


def test_escape_sequences_holding_q_do_not_end_top(terminal: Terminal) -> None:
    top = start_top(terminal)
    wait_for(lambda: b"engine not running" in terminal.output, 20.0, what="top's first frame")
    for sequence in ESCAPE_SEQUENCES:
        os.write(terminal.master, sequence)
        time.sleep(0.2)  # each read on its own, as a person presses them
    # the same sequences in one read, and one cut in two (its end a moment later)
    os.write(terminal.master, b"".join(ESCAPE_SEQUENCES[:-1]) + b"\x1bO")
    time.sleep(0.01)
    os.write(terminal.master, b"Q")
    frames = terminal.output.count(b"engine not running")
    wait_for(
        lambda: terminal.output.count(b"engine not running") > frames + 2,
        10.0,
        what="top to go on drawing",
    )
    assert top.poll() is None, terminal.output.decode(errors="replace")
    os.write(terminal.master, b"q")
    assert ended(top) == 0


def test_keys_are_split_whole() -> None:
    from gpudesk.cli.top_keys import split_keys

    keys = ["\x1bOQ", "q", "\x1b[1;2Q", "Q", "x"]
    assert split_keys("\x1bOQq\x1b[1;2QQx\x1b[") == (keys, "\x1b[")


ENTER, LEAVE = b"\x1b[?1049h\x1b[?25l", b"\x1b[?25h\x1b[?1049l"


@pytest.mark.parametrize(
    ("how", "codes"),
    [(b"q", {0}), (b"\x03", {0, 130}), (signal.SIGTERM, {143}), (signal.SIGHUP, {129})],
)
def test_top_draws_on_the_alternate_screen_and_leaves_it_however_it_ends(
    terminal: Terminal, how: bytes | signal.Signals, codes: set[int]
) -> None:
    top = start_top(terminal)
    wait_for(lambda: b"engine not running" in terminal.output, 20.0, what="top's first frame")
    assert terminal.output.index(ENTER) < terminal.output.index(b"engine not running")
    if isinstance(how, bytes):
        os.write(terminal.master, how)
    else:
        top.send_signal(how)
    assert ended(top) in codes
    # the screen and the cursor given back, after the last frame
    wait_for(lambda: LEAVE in terminal.output, 20.0, what="top to leave the alternate screen")
    assert terminal.output.rindex(LEAVE) > terminal.output.rindex(b"engine not running")
    assert b"Traceback" not in terminal.output
