"""`jobs`' `name`: the engine lists only the jobs whose name matches a shell pattern, as
fnmatch.fnmatchcase reads it (gpudesk.core.name_pattern), so that `gpudesk queue --name` reads
the matches alone, not every job. Over a real SQLite store: the pages, their cursors and
`count` are of the matches only, with the other filters (states, owner, limit), and the
patterns where SQLite's GLOB reads a set otherwise than fnmatch match as fnmatch does. Over a
real engine: a bad pattern is one clear invalid_args message naming `name`."""

from __future__ import annotations

import fnmatch
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineHandle
from store_fill import fill_jobs

from gpudesk.api.errors import EngineError
from gpudesk.core.jobs import JobState
from gpudesk.core.name_pattern import MAX_NAME_PATTERN
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.listing import SLICE_IDS
from gpudesk.paths import Home

OTHER_UID = 54_321  # a second owner (no such user need exist: the store keeps uids)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 finished jobs then 60 queued, two owners; every 7th job is `sweep-ID` (spread over
    every page), a few have names whose sets SQLite's GLOB reads otherwise than fnmatch."""
    path: Path = tmp_path_factory.mktemp("names") / "gpudesk.db"
    Store.open(path).close()
    fill_jobs(path, finished=300)
    fill_jobs(path, finished=300, owner_uid=OTHER_UID)
    fill_jobs(path, queued=30)
    fill_jobs(path, queued=30, owner_uid=OTHER_UID)
    odd = ["a[b", "[x]", "^lead", "!bang", "a]b", "é-1", "Sweep-UP"]
    with closing(sqlite3.connect(str(path), isolation_level=None)) as conn:
        conn.execute(
            "UPDATE jobs SET name = 'sweep-' || id, spec = json_set(spec, '$.name', 'sweep-' || id)"
            " WHERE id % 7 = 0"
        )
        for job_id, name in zip((2, 13, 24, 37, 45, 59, 61), odd, strict=True):  # none a 7th
            conn.execute(
                "UPDATE jobs SET name = ?, spec = json_set(spec, '$.name', ?) WHERE id = ?",
                (name, name, job_id),
            )
    return path


@pytest.fixture
def store(store_path: Path) -> Iterator[Store]:
    store = Store.open(store_path)
    yield store
    store.close()


def expected(store: Store, pattern: str, where: str = "1") -> list[int]:
    """The ids fnmatchcase matches among the rows `where` picks (not archived), in id order."""
    rows = store._conn.execute(f"SELECT id, name FROM jobs WHERE archived = 0 AND {where}")
    return sorted(int(r["id"]) for r in rows if fnmatch.fnmatchcase(r["name"], pattern))


def walk(store: Store, limit: int, newest: bool = False, **filters: Any) -> list[int]:
    """Every page of a listing, `limit` rows each, following its cursor; the ids, in id order.
    Each page's `total` (counted) is the number of matches, and `more` says truly whether a
    next page holds any."""
    ids: list[int] = []
    cursor: int | None = None
    while True:
        direction = {"before_id": cursor} if newest else {"after_id": cursor}
        page = store.jobs_page(limit=limit, newest=newest, count=True, **direction, **filters)
        got = [job.id for job in page.jobs]
        assert len(got) <= limit and got == sorted(got)
        assert all(fnmatch.fnmatchcase(job.spec.name, filters["name"]) for job in page.jobs)
        ids = got + ids if newest else ids + got
        total = page.total
        if not page.more:
            assert page.cursor is None
            break
        assert got, "a page that says more holds rows"
        cursor = page.cursor
    assert total == len(ids), "count counts the matches, not the rows"
    return ids


@pytest.mark.parametrize("newest", [False, True])
def test_the_matches_spread_over_pages_come_page_by_page_and_are_counted(
    store: Store, newest: bool
) -> None:
    want = expected(store, "sweep-*")
    assert len(want) == 660 // 7 and want[0] < 100 and want[-1] > 600
    for limit in (1, 7, 10, 500):
        assert walk(store, limit, newest, name="sweep-*") == want


def test_a_limit_keeps_the_newest_matches_and_says_more(store: Store) -> None:
    page = store.jobs_page(limit=5, newest=True, count=True, name="sweep-*")
    assert [job.id for job in page.jobs] == expected(store, "sweep-*")[-5:]
    assert page.more and page.cursor == page.jobs[0].id and page.total == 660 // 7
    page = store.jobs_page(limit=500, newest=True, count=True, name="sweep-1?")
    assert [job.id for job in page.jobs] == [14] and not page.more and page.total == 1


def test_the_name_goes_with_the_states_and_the_owner(store: Store) -> None:
    queued = [JobState.QUEUED]
    want = expected(store, "sweep-*", "state = 'queued'")
    assert want and walk(store, 3, states=queued, name="sweep-*") == want
    finished = [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]
    want = expected(store, "sweep-*", f"owner_uid = {OTHER_UID} AND state != 'queued'")
    got = walk(store, 4, True, states=finished, owner_uid=OTHER_UID, name="sweep-*")
    assert want and got == want
    want = expected(store, "sweep-*", f"owner_uid = {os.getuid()}")
    assert want and walk(store, 9, owner_uid=os.getuid(), name="sweep-*") == want


@pytest.mark.parametrize(
    "pattern",
    [
        "sweep-6?",  # GLOB's own words: no set
        "sweep-[0-9]*[05]",  # sets: GLOB narrows, fnmatchcase decides
        "a[b",  # an unclosed `[` is itself to fnmatch; GLOB would match nothing
        "[[]x]",
        "[!s]*",  # fnmatch's negation; `[^...]` in GLOB
        "[^!]*",  # a set holding `^` and `!` to fnmatch; a negation in GLOB
        "a]b",
        "?-1",  # one character, é, not its two bytes
        "sweep-u*",  # case-sensitive, as fnmatchcase: not Sweep-UP
        "[z-a]*",  # a reversed range: fnmatch's matches nothing
        "*",
    ],
)
def test_a_pattern_matches_what_fnmatchcase_matches(store: Store, pattern: str) -> None:
    want = expected(store, pattern)
    assert walk(store, 50, name=pattern) == want
    if pattern not in ("[z-a]*", "sweep-u*"):
        assert want, "each pattern matches some job here"


def test_a_bad_name_pattern_is_invalid_args_naming_it(engine: EngineHandle) -> None:
    engine.submit({"name": "sweep-1", "command": ["true"]}, {"name": "x", "command": ["true"]})
    assert [j["name"] for j in engine.client.request("jobs", name="sweep-*")["jobs"]] == ["sweep-1"]
    for bad, words in [
        ("sweep-\x1b[2J*", "'name': a name pattern cannot contain control characters"),
        ("a\u202eb", "(found \\u202e)"),
        ("x" * (MAX_NAME_PATTERN + 1), f"'name' must be a name pattern of at most {1000}"),
        ("", "'name': a name pattern cannot be empty"),
        ("\udce9*", "'name': a name pattern must be text (UTF-8)"),
        (5, "'name'"),
    ]:
        with pytest.raises(EngineError) as raised:
            engine.client.request("jobs", name=bad)
        assert raised.value.code == "invalid_args", raised.value
        assert words in str(raised.value), str(raised.value)
        assert "\x1b" not in str(raised.value)


def test_an_absent_name_lists_every_job(home: Home, engine: EngineHandle) -> None:
    ids = engine.submit({"name": "a", "command": ["true"]}, {"name": "b", "command": ["true"]})
    assert [j["id"] for j in engine.client.request("jobs")["jobs"]] == ids
    assert engine.client.request("jobs", name=None, count=True)["total"] == 2


@pytest.fixture(scope="module")
def wide_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ids over three of a named listing's slices (SLICE_IDS): 25,000 jobs, every 997th
    `sweep-ID` (one `sweep-[ID]`, whose set fnmatchcase decides), a run of them archived."""
    path: Path = tmp_path_factory.mktemp("wide") / "gpudesk.db"
    Store.open(path).close()
    fill_jobs(path, finished=24_990)
    fill_jobs(path, queued=10)
    with closing(sqlite3.connect(str(path), isolation_level=None)) as conn:
        named = "UPDATE jobs SET name = {0}, spec = json_set(spec, '$.name', {0}) WHERE id"
        conn.execute(named.format("'sweep-' || id") + " % 997 = 0")
        conn.execute(named.format("'sweep-[2]'") + " = 12345")
        conn.execute("UPDATE jobs SET archived = 1 WHERE id BETWEEN 9000 AND 11000")
    return path


def steps(work: Iterator[None]) -> int:
    """How many times a generator yields (each a turn of the engine's loop) before it ends."""
    return sum(1 for _ in work)


@pytest.mark.parametrize("pattern", ["sweep-*", "*-[!a-]*"])
def test_a_named_listing_goes_a_slice_of_ids_a_turn_and_misses_nothing(
    wide_path: Path, pattern: str
) -> None:
    assert SLICE_IDS < 25_000 // 2, "the store spans three slices at least"
    with closing(Store.open(wide_path)) as store:
        want = expected(store, pattern)
        assert len(want) == 24 and 12_345 in want  # 25 sweeps, 2 of them archived, and [2]
        for newest in (False, True):
            for limit in (1, 4, 500):
                assert walk(store, limit, newest, name=pattern) == want
        # a page alone stops where it fills; a count reads every slice, one a turn
        assert steps(store.jobs_page_in_slices(limit=500, name=pattern, count=True)) == 2
        assert steps(store.jobs_page_in_slices(limit=1, name=pattern, newest=True)) == 0
        assert steps(store.jobs_page_in_slices(limit=500, count=True)) == 0  # no name: at once
        page = store.jobs_page(limit=5, name=pattern, before_id=want[-3], count=True)
        assert [j.id for j in page.jobs] == want[-8:-3] and page.total == 24
        assert page.more and page.cursor == want[-8]


def test_a_named_request_over_many_slices_is_answered_whole(
    home: Home, engine: EngineHandle
) -> None:
    fill_jobs(home.db, finished=21_000, name="old")
    ids = engine.submit({"name": "new-1", "command": ["true"]}, {"name": "x", "command": ["true"]})
    reply = engine.client.request("jobs", name="[no]*", count=True, limit=3)
    assert [j["id"] for j in reply["jobs"]] == [ids[0] - 2, ids[0] - 1, ids[0]]
    assert reply["total"] == 21_001 and reply["more"] and reply["before_id"] == ids[0] - 2
