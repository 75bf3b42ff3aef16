"""A home's single-instance lock: `engine.lock` in its state folder, held (flock, exclusive) for
the engine's life, with the holder's pid as its text. The engine takes it (`EngineLock.take`)
and looks now and then that its path still names the file it holds (a state folder removed or
moved under a running engine takes the lock's name with it: `keep` takes it again); a client asks
who holds it (`holder`), taking it for an instant at most. One home for the protocol both
sides read.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

from gpudesk.paths import Home, open_state_file
from gpudesk.sqlite_file import file_identity

TAKE_RETRY_S = 1.0  # a client probing whether an engine runs holds the lock for an instant
LOOK_EVERY_S = 1.0  # how often `keep` looks (a stat), as the database's own watch does
# After `keep` failed, how long it waits to try again (and the engine to say so again): a second
# at first (a new engine holding the lock for a moment), doubled at each failure up to a minute
# (a link planted in the folder's place stays until someone moves it).
KEEP_RETRY_S = (1.0, 60.0)
EXIT_ALREADY_RUNNING = 3  # the daemon's exit status when another engine runs its home
EXIT_BAD_HOME = 4  # the home's state cannot be used as it is: the log says why and what to do
# How long a client that started an engine waits, once that one said another runs the home, for
# the other to answer: one whose state folder went puts it back at its next look (once a
# second). Assumption: three seconds, for a loaded machine.
PUT_BACK_WAIT_S = 3.0


class AlreadyRunning(RuntimeError):
    pass


class EngineLock:
    """The lock a running engine holds, and where it holds it."""

    def __init__(self, path: Path, handle: IO[str]) -> None:
        self.path = path
        self._handle = handle
        self._next_look = 0.0  # when `keep` looks again (later after a failure)
        self._rest = KEEP_RETRY_S[0]

    @classmethod
    def take(cls, path: Path, wait_s: float = TAKE_RETRY_S) -> EngineLock:
        """Hold the lock at `path` for the life of the process, or AlreadyRunning. The file is
        opened never through a link and only when it is a plain file of this user
        (paths.open_private_file, close-on-exec), so the truncation below cannot reach another."""
        handle = os.fdopen(open_state_file(path, os.O_RDWR | os.O_CREAT), "r+")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    pid = _pid_text(handle) or "?"
                    handle.close()
                    raise AlreadyRunning(
                        f"an engine is already running for this home (pid {pid})"
                    ) from None
                time.sleep(0.02)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return cls(path, handle)

    def in_place(self) -> bool:
        """False once the lock's path names another file or none (an fstat(2) and a stat(2))."""
        held = os.fstat(self._handle.fileno())
        return file_identity(self.path) == (held.st_dev, held.st_ino)

    def keep(self, home: Home, group: int | None = None) -> bool:
        """Where the lock's path no longer names the file held (the state folder removed or
        moved under the engine): the home made again (`Home.ensure`, the socket folder with
        `group`) and the lock taken there, without waiting. Looks once a LOOK_EVERY_S (the
        engine asks at every turn of its loop). True when it did; AlreadyRunning or HomeError
        (UnsafePath) when it cannot (tried again KEEP_RETRY_S later)."""
        now = time.monotonic()
        if now < self._next_look:
            return False
        self._next_look = now + LOOK_EVERY_S
        if self.in_place():
            return False
        self._next_look = now + self._rest  # should what follows fail
        self._rest = min(2 * self._rest, KEEP_RETRY_S[1])
        home.ensure(group)
        taken = EngineLock.take(home.lock, wait_s=0.0)
        self._handle.close()
        self._handle, self._rest = taken._handle, KEEP_RETRY_S[0]
        return True

    def close(self) -> None:
        self._handle.close()


def holder(fd: int) -> int | None:
    """Who holds the lock opened as `fd` (taken over): its pid (-1 when its text is not one),
    or None when no one does."""
    with os.fdopen(fd) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = _pid_text(handle)
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def _pid_text(handle: IO[str]) -> str:
    handle.seek(0)
    return handle.read(64).strip()
