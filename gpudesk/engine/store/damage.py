"""Telling a damaged database from other SQLite errors, and what the engine says about it.

SQLite finds damage where it reads it: a database whose header is damaged is refused at open
(`StoreConnection.open`), but one whose damage lies in a later page opens fine and fails at the
first query that reads that page (a settings row at start, a job at `gpudesk show`). Wherever
it is found, the engine says the same paragraph: what is damaged and what to do.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

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


def damaged_text(db: Path, home_root: Path, detail: str) -> str:
    """The engine's paragraph for a damaged database `db` of the home at `home_root`; `detail`:
    what SQLite or the store said."""
    return (
        f"{detail}. The file is damaged or not a gpudesk database, so the engine does not "
        f"start. Keep it for now: restore {db.name} from a backup, or move the whole "
        f"home aside to start afresh (`mv {home_root} {home_root}.damaged`), which keeps "
        "its job logs."
    )


def request_text(detail: str) -> str:
    """What a request that met damage in the database is answered: one paragraph."""
    return (
        f"the gpudesk database is damaged ({detail}), so the engine cannot answer this "
        "request. Stop the engine (`gpudesk engine stop`), keep the file, and restore "
        "gpudesk.db from a backup, or move the whole home aside to start afresh (its job "
        "logs stay in it)."
    )
