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


class TerminalSession:
    """A command on a pseudo-terminal of `size` (columns, lines), driven as a person would:
    type keys, wait until it has written something, read how it exited. Everything it wrote is
    kept (`seen`), escape sequences and all."""

    def __init__(
        self, argv: list[str], env: dict[str, str], size: tuple[int, int] = (100, 30)
    ) -> None:
        import fcntl
        import struct

        self.leader, follower = os.openpty()
        columns, lines = size
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        # a session of its own, the terminal its controlling one: as a shell starts a command,
        # and what the terminal's Ctrl-C (or `kill -INT 0` in it) reaches is its group, not ours
        self.proc = subprocess.Popen(
            argv,
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
            close_fds=True,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(follower)
        self.seen = b""

    def _read(self, wait_s: float) -> bytes | None:
        """What it wrote within `wait_s` (b"": nothing yet), kept in `seen`; None once the
        terminal is closed (it exited, and nothing it started holds the terminal)."""
        import select

        ready, _, _ = select.select([self.leader], [], [], wait_s)
        if not ready:
            return b""
        try:
            chunk = os.read(self.leader, 65536)
        except OSError:  # EIO: the command closed the terminal
            return None
        self.seen += chunk
        return chunk or None

    def wait_for(self, text: bytes, timeout: float = 30.0, since: int = 0) -> int:
        """Wait until it has written `text` (after offset `since` of `seen`); where it ends."""
        import time

        deadline = time.monotonic() + timeout
        while (found := self.seen.find(text, since)) < 0:
            if time.monotonic() > deadline or self._read(0.2) is None:
                raise AssertionError(
                    f"{text!r} never came in {timeout} s; it wrote: {self.seen[-3000:]!r}"
                )
        return found + len(text)

    def type(self, keys: bytes) -> None:
        os.write(self.leader, keys)

    def exit_code(self, timeout: float = 30.0, keys: bytes = b"", every_s: float = 0.5) -> int:
        """Its exit code, typing `keys` again every `every_s` until it exits (a key a screen
        takes before the last one closes it); it fails the test after `timeout`."""
        import time

        deadline = time.monotonic() + timeout
        typed_at = 0.0
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"it did not exit in {timeout} s; it wrote: {self.seen[-3000:]!r}"
                )
            if keys and time.monotonic() - typed_at >= every_s:
                self.type(keys)
                typed_at = time.monotonic()
            self._read(0.1)
        while self._read(0.1):  # what it wrote last, as it closed
            pass
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.leader)
