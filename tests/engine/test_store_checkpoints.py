"""The engine's store checkpoints its write-ahead log on a thread of its own, never in a commit of
the loop's connection (engine/store/checkpoints.py): a commit that took the WAL past 1,000 pages
ran SQLite's checkpoint on the loop (87 ms measured once), every client waiting. Real SQLite; the
WAL's size on disk tells whether it was checkpointed: SQLite starts it again from the beginning
at the first commit after a checkpoint copied all of it, and never otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for

from gpudesk.engine.startup import open_store
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home

PAGE_TEXT = "x" * 3500  # an event about one page long


def write_pages(store: Store, pages: int) -> None:
    """About `pages` pages of events, in commits of about 100."""
    for _ in range(pages // 100):
        with store.transaction() as conn:
            for _ in range(100):
                store._add_event(conn, "engine", PAGE_TEXT)


def wal_pages(store: Store) -> float:
    """The WAL file's size, in pages (its frames: a page each, and a header)."""
    page = store._conn.execute("PRAGMA page_size").fetchone()[0]
    wal = Path(f"{store.path}-wal")
    return wal.stat().st_size / (page + 24) if wal.exists() else 0.0


def wal_copied(store: Store) -> bool:
    """Whether a checkpoint has copied all of the WAL, as its index says (sqlite.org/
    walformat.html: the header's mxFrame at byte 16, the checkpoint's nBackfill at 96, native
    byte order)."""
    header = Path(f"{store.path}-shm").read_bytes()[:100]
    frames = int.from_bytes(header[16:20], sys.byteorder)
    copied = int.from_bytes(header[96:100], sys.byteorder)
    return 0 < frames == copied


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store.open(tmp_path / "db")
    yield store
    store.close()


def test_the_engines_store_runs_no_checkpoint_in_a_commit(home: Home) -> None:
    home.ensure()
    store = open_store(home)  # as the engine opens it
    try:
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        assert store._conn.execute("PRAGMA journal_size_limit").fetchone()[0] == 0
        assert store._checkpoints is not None
    finally:
        store.close()


def test_commits_past_1000_pages_run_no_checkpoint_on_the_loops_connection(store: Store) -> None:
    store.checkpoint_elsewhere(every_s=3600.0)  # once after the first commit, then not for an hour
    store.add_event("engine", "first")
    checkpoints = store._checkpoints
    assert checkpoints is not None
    wait_for(lambda: checkpoints.done == 1, what="the first checkpoint")
    write_pages(store, 2500)
    # with SQLite's default, a commit past 1,000 pages checkpointed and the WAL began again
    assert wal_pages(store) > 2400


def test_the_wal_begins_again_even_under_writes_that_never_pause_for_a_checkpoint(
    store: Store,
) -> None:
    """Commits nearly back to back, as a busy loop's turns write them (a millisecond's poll
    between two): a PASSIVE checkpoint always overlaps one, so none lets the WAL begin again
    (it grew to all 20,000 pages written: measured); past RESTART_FRAMES the thread makes it.
    Once it begins again, the loop's commit truncates it."""
    store.checkpoint_elsewhere(every_s=0.01)
    checkpoints = store._checkpoints
    assert checkpoints is not None
    largest = 0.0
    for _ in range(200):
        write_pages(store, 100)
        largest = max(largest, wal_pages(store))
        time.sleep(0.001)  # the loop's poll between two turns, not a wait for anything
    # It began again before the burst's end: without RESTART it holds every page written.
    # When is the thread's: 4,800-6,800 pages idle, 13,814 in a whole run beside a CPU hog
    assert largest < 200 * 100, largest
    store.add_event("engine", "the last write of the burst")
    wait_for(lambda: wal_copied(store), what="a checkpoint of all of it")
    store.add_event("engine", "after a pause")  # begins the WAL again: truncated to this
    assert wal_pages(store) < 10
