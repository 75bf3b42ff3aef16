"""`gpudesk queue --name GLOB` asks the engine for the matching jobs alone (`jobs`' `name`), where
it read every job of the listing and matched the names itself: on a store of 100,000 jobs that
was every page of them to find ten (bench/queue_name.py). The matches spread over many of the
engine's pages are all found, --limit and its line count only them, with --state and --me; a
row of another name is never read, so a damaged one is not reported; a pattern that could
never match a name is a usage error, as it is to cancel, hold and release. Real engine, real
CLI (in process)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing

import pytest
from conftest import EngineHandle, Run
from store_fill import corrupt_spec, fill_jobs

from gpudesk.core import protocol
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home

# more jobs than a few of the engine's pages hold, one in 25 matching
JOBS = protocol.JOBS_PAGE_CAP * 5


@pytest.fixture
def filled(home: Home) -> Iterator[tuple[EngineHandle, list[int]]]:
    """An engine over JOBS finished jobs and 50 held ones (never started), every 25th named
    `needle-ID` (two held ones among them); the needles' ids. `home`'s teardown stops the
    engine."""
    home.ensure()
    Store.open(home.db).close()
    ids = fill_jobs(home.db, finished=JOBS) + fill_jobs(home.db, queued=50, held=True)
    needles = ids[::25]
    with closing(sqlite3.connect(str(home.db), isolation_level=None)) as conn:
        conn.executemany(
            "UPDATE jobs SET name = ?, spec = json_set(spec, '$.name', ?) WHERE id = ?",
            [(f"needle-{i}", f"needle-{i}", i) for i in needles],
        )
    handle = EngineHandle(home)
    handle.start()
    yield handle, needles
    handle.client.close()


def ids_listed(out: str) -> list[int]:
    return [int(line.split()[0]) for line in out.splitlines()[1:] if line.split()[0].isdigit()]


def test_queue_name_lists_every_match_over_the_pages_and_counts_only_them(
    filled: tuple[EngineHandle, list[int]], gpudesk: Run
) -> None:
    _, needles = filled
    code, out, err = gpudesk("queue", "--all", "--name", "needle-*")
    assert code == 0, err
    assert ids_listed(out) == needles and "…" not in out, out
    code, out, err = gpudesk("queue", "--all", "--name", "needle-*", "--limit", "4")
    assert code == 0, err
    assert ids_listed(out) == needles[-4:]
    left = len(needles) - 4
    assert out.rstrip().endswith(
        f"… and {left} older matching jobs not shown; --limit N shows more"
    )
    code, out, _ = gpudesk("queue", "--all", "--name", "needle-*", "--limit", str(len(needles) - 1))
    assert out.rstrip().endswith("… and 1 older matching job not shown; --limit N shows more")
    # with --state and --me: the engine's filters and the name together
    code, out, _ = gpudesk("queue", "--state", "held", "--name", "needle-*", "--me")
    assert ids_listed(out) == [i for i in needles if i > JOBS], out
    code, out, _ = gpudesk("queue", "--state", "failed", "--name", "needle-[0-9]*", "--limit", "2")
    failed = [i for i in needles if i <= JOBS and (i - 1) % 3 == 1]  # store_fill's cycle
    assert ids_listed(out) == failed[-2:], out
    assert f"… and {len(failed) - 2} older matching jobs not shown" in out
    code, out, _ = gpudesk("queue", "--name", "needle-*", "--limit", "1")  # the waiting ones
    assert ids_listed(out) == [i for i in needles if i > JOBS][:1]
    assert out.rstrip().endswith("… and 1 more matching waiting (of 2); --limit 2 shows them all")
    code, out, _ = gpudesk("queue", "--all", "--name", "Needle-*")  # case-sensitive
    assert out.strip() == "no jobs match", out


def test_queue_name_reads_no_row_of_another_name(
    filled: tuple[EngineHandle, list[int]], gpudesk: Run
) -> None:
    """A damaged row is reported by the listings that read it; one whose name does not match
    is no longer read at all (it was, and said, when the CLI matched the names)."""
    _, needles = filled
    corrupt_spec(filled[0].home.db, needles[3] + 1)
    code, out, err = gpudesk("queue", "--all", "--name", "needle-*")
    assert code == 0 and ids_listed(out) == needles, out
    assert "cannot be read" not in err, err
    code, out, err = gpudesk("queue", "--all")
    assert f"job {needles[3] + 1}:" in err and "cannot be read" in err, err


def test_a_name_pattern_that_could_never_match_is_a_usage_error(
    engine: EngineHandle, gpudesk: Run
) -> None:
    for argv in (
        ("queue", "--all", "--name", "sweep-\x1b[2J*"),
        ("cancel", "--name", "sweep-\x1b[2J*"),
        ("release", "--me", "--name", "sweep-\x1b[2J*"),
    ):
        code, out, err = gpudesk(*argv)
        assert code == 2 and out == "", (argv, out, err)
        assert "--name: a name pattern cannot contain control characters" in err, err
        assert "(found \\x1b)" in err and "\x1b" not in err and "Traceback" not in err
    code, _, err = gpudesk("queue", "--name", "")
    assert code == 2 and "--name: a name pattern cannot be empty" in err, err
