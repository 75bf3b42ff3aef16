"""An SQLite database a long-running process holds open, and the file its path names.

Such a process writes to the file it opened. Once that file is removed, or another is renamed
into its place (a backup put back), the path names another file or none, and every later write
goes where no later process reads. `PathWatch` says when that has happened (one stat(2) at most
every `every_s`); `write_copy` writes a consistent copy of the open database (SQLite's online
backup) whole or not at all (a temporary name, fsync, then a rename).

SQLite itself, closing a database whose file has moved, leaves its write-ahead log and shared
memory at their names (pager.c, `databaseIsUnmoved`: no checkpoint, so no removal). The next
process to open the path would replay that log into whatever file is there then: a backup put
back would take the moved file's last writes. `PathWatch.drop_side_files` removes them.

Damage shows where SQLite reads it: a damaged header is refused at open, a damaged later page
fails the first query that reads it. `is_damage` tells either from other errors (locked, full).

A leaf module: the standard library only.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Literal

Moved = Literal["removed", "replaced"]
SIDE_FILES = ("-wal", "-shm")  # SQLite's names for a WAL database's log and shared memory


def file_identity(path: str | Path) -> tuple[int, int] | None:
    """The file at `path` (device, inode), or None where there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


class PathWatch:
    """Whether `path` still names the file it named when the watch began (or last `renew`ed)."""

    def __init__(self, path: str | Path, every_s: float) -> None:
        self.path = path
        self.every_s = every_s
        self._looked = time.monotonic()
        self.renew()

    def renew(self) -> None:
        """Note the files there now: the database's, and its side files (SQLite makes those on
        a connection's first read)."""
        self._opened = file_identity(self.path)
        self._sides = {suffix: file_identity(f"{self.path}{suffix}") for suffix in SIDE_FILES}

    def drop_side_files(self) -> None:
        """Once no connection has the moved file open: remove its side files. Side files that are
        not the ones noted (a backup's, put back with it) stay."""
        for suffix, noted in self._sides.items():
            name = Path(f"{self.path}{suffix}")
            if noted is not None and file_identity(name) == noted:
                name.unlink(missing_ok=True)

    def rest(self, seconds: float) -> None:
        """Look again no sooner than `seconds` from now."""
        self._looked = time.monotonic() + seconds - self.every_s

    def moved(self) -> Moved | None:
        """None while the path names the same file (or there was none to watch, ":memory:")."""
        now = time.monotonic()
        if self._opened is None or now - self._looked < self.every_s:
            return None
        self._looked = now
        found = file_identity(self.path)
        if found == self._opened:
            return None
        return "removed" if found is None else "replaced"


# SQLite's primary result codes for damage (https://www.sqlite.org/rescode.html): SQLITE_CORRUPT
# "the database file has been corrupted", SQLITE_NOTADB "not a database file". An extended code
# (SQLITE_CORRUPT_INDEX, ...) carries its primary code in its low 8 bits (same page).
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
PRIMARY_CODE_MASK = 0xFF


def is_damage(exc: BaseException) -> bool:
    """Whether `exc` is SQLite saying the database file is damaged (not locked, not full)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & PRIMARY_CODE_MASK in (SQLITE_CORRUPT, SQLITE_NOTADB)


def write_copy(conn: sqlite3.Connection, dest: Path) -> None:
    """A consistent copy of `conn`'s main database at `dest`, whole or not at all."""
    partial = dest.with_name(dest.name + ".partial")
    partial.unlink(missing_ok=True)  # a link planted there goes, not what it names
    copy = sqlite3.connect(str(partial))
    try:
        conn.backup(copy)
    finally:
        copy.close()
    fd = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, dest)
