"""Running a command with its stdout on a terminal (a pty), as a person at one would."""

from __future__ import annotations

import contextlib
import os
import pty
import subprocess
import termios


def on_a_terminal(argv: list[str], *, as_written: bool = False) -> bytes:
    """What `argv` writes to its stdout when that is a terminal (a pty). `as_written`: its
    newlines as the command wrote them (the terminal's own \\n -> \\r\\n turned off)."""
    controller, terminal = pty.openpty()
    if as_written:
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
