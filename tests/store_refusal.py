"""The store refusing one kind of write, for tests of what the engine does when a write is
refused between two others (what a disk that fills at that moment does): a real SQLite trigger
on the engine's own database, dropped when the block ends.

    with store_refusing(home.db, "BEFORE INSERT ON events WHEN NEW.kind = 'cleanup'"):
        ...

The module sits beside conftest.py, so every test folder can import it."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

FULL_DISK = "database or disk is full"  # what SQLite says (diskspace.is_full reads it so)


@contextlib.contextmanager
def store_refusing(db: Path, when: str, message: str = FULL_DISK) -> Iterator[None]:
    """Writes matching `when` (a trigger's timing, event, table and condition) refused with
    `message` inside the block; the trigger is dropped after it, whatever happened."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(
            f"CREATE TRIGGER test_refusal {when} BEGIN SELECT RAISE(ABORT, '{message}'); END"
        )
        try:
            yield
        finally:
            conn.execute("DROP TRIGGER IF EXISTS test_refusal")
    finally:
        conn.close()
