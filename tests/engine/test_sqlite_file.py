"""gpudesk.sqlite_file on real files: a watch that says when the path under an open database
names another file or none, a copy written whole or not at all, and the side files SQLite leaves
behind a moved database removed only where they are the moved file's own."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from gpudesk.sqlite_file import PathWatch, write_copy


def wal_database(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    return conn


def test_the_watch_says_removed_then_replaced_and_looks_at_most_once_a_period(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    path.write_bytes(b"")
    held = path.open("rb")  # as a connection holds it: its inode is not handed out again
    watch = PathWatch(path, every_s=0.0)
    assert watch.moved() is None
    path.unlink()
    assert watch.moved() == "removed"
    path.write_bytes(b"")  # another file at the path
    assert watch.moved() == "replaced"
    watch.renew()
    assert watch.moved() is None
    held.close()

    slow = PathWatch(path, every_s=3600.0)
    path.unlink()
    assert slow.moved() is None  # not looked yet: the period has not passed
    slow.rest(-7200.0)
    assert slow.moved() == "removed"


def test_nothing_to_watch_is_never_moved(tmp_path: Path) -> None:
    assert PathWatch(":memory:", every_s=0.0).moved() is None


def test_a_copy_holds_the_open_database_and_leaves_no_partial_file(tmp_path: Path) -> None:
    with contextlib.closing(wal_database(tmp_path / "a.db")) as conn:
        (tmp_path / "copy.db.partial").symlink_to(tmp_path / "elsewhere")  # planted, replaced
        write_copy(conn, tmp_path / "copy.db")
    with contextlib.closing(sqlite3.connect(tmp_path / "copy.db")) as copy:
        assert copy.execute("SELECT x FROM t").fetchall() == [(1,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "copy.db"]


def test_side_files_go_only_where_they_are_the_moved_files_own(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    conn = wal_database(path)
    watch = PathWatch(path, every_s=0.0)
    os.replace(tmp_path / "a.db", tmp_path / "moved.db")
    conn.close()  # SQLite leaves the side files of a moved database
    assert (tmp_path / "a.db-wal").exists()
    watch.drop_side_files()
    assert not (tmp_path / "a.db-wal").exists() and not (tmp_path / "a.db-shm").exists()

    # a backup put back with its own WAL: that WAL is not the moved file's, and stays
    conn = wal_database(path)
    watch.renew()
    (tmp_path / "backup.db-wal").write_bytes(b"a backup's log")
    os.replace(tmp_path / "moved.db", path)
    os.replace(tmp_path / "backup.db-wal", tmp_path / "a.db-wal")
    conn.close()
    watch.drop_side_files()
    assert (tmp_path / "a.db-wal").read_bytes() == b"a backup's log"
    assert not (tmp_path / "a.db-shm").exists()  # the shared memory was the moved file's
