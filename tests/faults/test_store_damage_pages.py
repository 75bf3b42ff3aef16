"""A database damaged past its header (issue 36, finding 11a).

A damaged header is refused when the database opens (tests/faults/test_store_damage.py). Damage
in a later page lets the database open and fails the first query that reads that page: the
engine's start read the station's settings there and died with a traceback, which `gpudesk
engine start`, `gpudesk queue` and the daemon itself showed. Now each says the damaged-database
paragraph and exits non-zero; a request that meets such a page gets one paragraph too.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle, refuses
from test_store_damage import cli, finished_job

from gpudesk.paths import Home

GARBAGE = bytes(range(256))


def damage_table(db: Path, table: str) -> None:
    """Overwrite the root page of `table` (never page 1, the header and schema) with garbage;
    the engine is stopped, so the file is all there is (no -wal)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)
        ).fetchone()
    conn.close()
    assert root > 1
    data = bytearray(db.read_bytes())
    start = (root - 1) * page_size
    data[start : start + page_size] = (GARBAGE * (page_size // len(GARBAGE) + 1))[:page_size]
    db.write_bytes(bytes(data))


def daemon(home: Home) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpudesk.engine.daemon", "--home", str(home.root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("table", ["settings", "sqlite_sequence"])
def test_a_page_read_at_start_is_one_paragraph_not_a_traceback(
    engine: EngineHandle, table: str
) -> None:
    """Before: `gpudesk engine start` and `gpudesk queue` showed the engine's traceback
    (sqlite3.DatabaseError from store.setting, or from reserve_job_ids), exit 1."""
    finished_job(engine, "kept")
    engine.stop()
    home = engine.home
    damage_table(home.db, table)
    for command in (("engine", "start"), ("submit", "--", "true")):
        refuses(
            cli(*command),
            f"cannot read the gpudesk database {home.db}: database disk image is malformed",
            "restore gpudesk.db from a backup",
            f"mv {home.root} {home.root}.damaged",
        )
    done = daemon(home)
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "restore gpudesk.db from a backup" in done.stderr, done.stderr


def test_a_damaged_page_a_request_reads_is_one_paragraph(engine: EngineHandle) -> None:
    """The jobs table damaged: the engine starts (it reads no job row to start), and `gpudesk
    show` of a job is answered with what is wrong and what to do, not SQLite's words alone."""
    job_id = finished_job(engine, "kept")
    engine.stop()
    damage_table(engine.home.db, "jobs")
    assert cli("engine", "start").returncode == 0
    refuses(
        cli("show", str(job_id)),
        "the gpudesk database is damaged (database disk image is malformed)",
        "gpudesk engine stop",
        "restore gpudesk.db from a backup",
    )
