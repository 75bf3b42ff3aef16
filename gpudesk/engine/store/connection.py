"""The store's connection: SQLite in WAL mode, one writer (the daemon), transactions, schema
migrations, and what every part of the store shares (events, settings).

Every change that must stay consistent (a job and its event, an attempt and its job's state) is
one transaction, so a crash leaves either all of it or none of it. The schema is versioned with
`PRAGMA user_version` and moved forward by the ordered migrations in `schema`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TypeVar

from gpudesk.core.jobs import JobState
from gpudesk.core.records import EventRecord
from gpudesk.engine.store.checkpoints import CHECKPOINT_EVERY_S, Checkpoints
from gpudesk.engine.store.family_backfill import (
    ALONE_RATES_OWNERS_VERSION,
    FAMILY_HISTORY_VERSION,
    OWNER_KEYS_VERSION,
    backfill_families,
    rekey_by_owner,
)
from gpudesk.engine.store.records import read_event
from gpudesk.engine.store.schema import MIGRATIONS, SCHEMA_VERSION, IncompatibleStore, StoreError
from gpudesk.sqlite_file import PathWatch, write_copy
from gpudesk.text import safe_text

_Store = TypeVar("_Store", bound="StoreConnection")
log = logging.getLogger("gpudesk.engine")
# How often the engine looks that its database file is still the one it opened (a stat(2)).
WHEREABOUTS_EVERY_S = 1.0


class StoreConnection:
    """The connection and what the job and sample tables share."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._env_ids: dict[str, int] = {}  # digest -> row id; rows are never deleted
        self._checkpoints: Checkpoints | None = None
        self._watch = PathWatch(path, WHEREABOUTS_EVERY_S)  # the file opened still there
        self._save_to: Path | None = None  # where the store's copy goes as it closes

    @classmethod
    def open(cls: type[_Store], path: str | Path) -> _Store:
        try:
            store = cls(_connect(path), Path(path))
            store._migrate()
            store._watch.renew()  # its side files made by now
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the gpudesk database {path}: {exc}") from exc
        return store

    def keep_in_place(self, folder_kept: Callable[[], bool]) -> bool:
        """Make sure the engine's writes reach the file a later engine reads (sqlite_file says
        how they could not). A database removed is written back from this open copy, used from
        then on. One replaced (a backup moved into its place) is left to the next engine: this
        copy is saved beside it as the store closes, and True says the engine must stop.
        `folder_kept`: whether the folder at the path is the engine's (home_keeper puts one back
        first; one made meanwhile in its place may be a member's, and gets nothing)."""
        moved = self._watch.moved()
        if moved is None or not folder_kept():
            return False
        said = f"the gpudesk database {self.path} was {moved} while the engine ran"
        if moved == "replaced":
            self._save_to = self.path.with_name(f"{self.path.name}.engine-{int(time.time())}")
            log.error(
                "%s; the engine stops, leaving it to the next; its copy: %s", said, self._save_to
            )
            return True
        try:
            self._write_back()
        except (OSError, sqlite3.Error) as exc:
            self._watch.rest(60.0)  # said once a minute, not once a second
            log.error("%s, and the engine's copy of it cannot be written: %s", said, exc)
            return False
        log.error("%s; it is written back from the engine's open copy: nothing is lost", said)
        return False

    @property
    def replaced(self) -> bool:
        return self._save_to is not None  # keep_in_place found another file at the path

    def _write_back(self) -> None:
        """The open database written back to its path, and both connections moved to it."""
        write_copy(self._conn, self.path)  # whole or not at all: should it fail, nothing changed
        self.close()  # before any connection opens the path: none meets the moved file's WAL
        self._watch.drop_side_files()  # the moved file's, which SQLite leaves at their names
        self._conn = _connect(self.path)
        self._watch.renew()
        if self._checkpoints is not None:
            self.checkpoint_elsewhere(self._checkpoints.every_s)

    def checkpoint_elsewhere(self, every_s: float = CHECKPOINT_EVERY_S) -> None:
        """The engine's store: SQLite's checkpoints on a thread of their own, at most one every
        `every_s`, none in this connection's commits (engine/store/checkpoints.py says why)."""
        self._checkpoints = Checkpoints(self.path, every_s)
        self._conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._conn.execute("PRAGMA journal_size_limit = 0")

    def close(self) -> None:
        if self._save_to is not None:  # the last of what the engine wrote, where it is read
            try:
                write_copy(self._conn, self._save_to)
            except (OSError, sqlite3.Error) as exc:
                log.error("the engine's copy of %s cannot be written: %s", self.path, exc)
        if self._checkpoints is not None:
            self._checkpoints.close()
        self._conn.close()
        if self._save_to is not None:
            self._watch.drop_side_files()

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self.schema_version
        if version > SCHEMA_VERSION:
            raise IncompatibleStore(
                f"the database has schema version {version}, newer than this gpudesk understands "
                f"({SCHEMA_VERSION}); upgrade gpudesk, or give it another state folder "
                "(GPUDESK_HOME; a system engine's --state-dir)"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.transaction() as conn:
                for statement in MIGRATIONS[target - 1].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                if target == FAMILY_HISTORY_VERSION:  # its rows from what the store holds
                    backfill_families(conn)
                if target == OWNER_KEYS_VERSION:  # its rows given to their owners
                    rekey_by_owner(conn)
                if target == ALONE_RATES_OWNERS_VERSION:
                    rekey_by_owner(conn, tables=("alone_rates",))
                conn.execute(f"PRAGMA user_version = {target}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All of the block's writes, or (it raises, or the commit is refused) none of them."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
            self._conn.execute("COMMIT")
            if self._checkpoints is not None:
                self._checkpoints.wrote()
        except BaseException:
            # SQLite ends some failed transactions itself (a full disk may); one a refused
            # COMMIT left open is ended here, or the next BEGIN would fail
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    # ----------------------------------------------------------------- events
    def _add_event(
        self,
        conn: sqlite3.Connection,
        kind: str,
        message: str,
        *,
        job_id: int | None = None,
        attempt: int | None = None,
        state: JobState | None = None,
        now: float | None = None,
    ) -> None:
        # A message may quote a job's program or folder, which can be bytes that are not UTF-8.
        message = safe_text(message)
        conn.execute(
            "INSERT INTO events (ts, job_id, attempt, kind, state, message) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (now or time.time(), job_id, attempt, kind, state.value if state else None, message),
        )

    def add_event(self, kind: str, message: str, *, job_id: int | None = None) -> None:
        with self.transaction() as conn:
            self._add_event(conn, kind, message, job_id=job_id)

    def events(self, job_id: int | None = None, limit: int = 1000) -> list[EventRecord]:
        """The latest `limit` events (of one job: `job_id`), oldest first."""
        where, params = ("", (limit,)) if job_id is None else ("WHERE job_id = ?", (job_id, limit))
        query = f"SELECT * FROM events {where} ORDER BY id DESC LIMIT ?"
        rows = self._conn.execute(f"SELECT * FROM ({query}) ORDER BY id", params)
        return [read_event(r) for r in rows]

    def event_count(self, job_id: int) -> int:
        query = "SELECT COUNT(*) FROM events WHERE job_id = ?"
        return int(self._conn.execute(query, (job_id,)).fetchone()[0])

    def events_of_kind(self, kind: str, limit: int) -> list[EventRecord]:
        """The latest `limit` events of one kind (the engine's own: station changes), oldest
        first."""
        rows = self._conn.execute(
            "SELECT * FROM (SELECT * FROM events WHERE kind = ? ORDER BY id DESC LIMIT ?) "
            "ORDER BY id",
            (kind, limit),
        )
        return [read_event(r) for r in rows]

    # --------------------------------------------------------------- settings
    def setting(self, key: str) -> Any:
        row = self._conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row["value"])

    def set_setting(self, key: str, value: Any) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )


def _connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=10.0)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode survives a process crash; only an OS crash can lose the last commit.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.create_function("fnmatchcase", 2, fnmatchcase, deterministic=True)  # listing.py's
    return conn
