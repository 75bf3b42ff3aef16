"""The store's listing queries walk an index in id order (EXPLAIN QUERY PLAN says so, never
"SCAN jobs" over the table nor a temporary B-tree sorting every matching row), and finished jobs
are archived in bounded batches, over a real SQLite store of 30,000 jobs."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from store_fill import fill_jobs
from test_job_control_store import requeue  # same folder: on sys.path under pytest

from gpudesk.core.jobs import JobState
from gpudesk.core.station import StationConfig
from gpudesk.engine.archive import ARCHIVE_BATCH, ARCHIVE_MIN_BATCH, Archiver
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.listing import _DUE_FOR_ARCHIVE, _page_query

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_store_listing")

FINISHED = [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]
LIVE = [JobState.QUEUED, JobState.RUNNING]
DAY_S = 86_400.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    path: Path = tmp_path_factory.mktemp("listing") / "gpudesk.db"
    Store.open(path).close()
    fill_jobs(path, finished=30_000, ended_at=time.time() - 40 * DAY_S)
    fill_jobs(path, queued=50)
    return Store.open(path)


def query_plan(store: Store, sql: str, params: Sequence[Any]) -> list[str]:
    """EXPLAIN QUERY PLAN of `sql` on the store: each step's words."""
    rows = store._conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)
    return [str(row["detail"]) for row in rows]


def page_plan(store: Store, **filters: Any) -> list[str]:
    """The plan of the page query `jobs_page` runs with these filters."""
    query = _page_query(**{"limit": 100, **filters})
    assert query is not None
    return query_plan(store, query.page_sql, query.page_params)


def archived_count(store: Store) -> int:
    return int(store._conn.execute("SELECT COUNT(*) FROM jobs WHERE archived = 1").fetchone()[0])


def _walks_an_index(plan: list[str], index: str) -> bool:
    text = " | ".join(plan)
    return f"USING INDEX {index}" in text and "TEMP B-TREE" not in text


@pytest.mark.parametrize(
    ("filters", "index"),
    [
        # gpudesk history: the newest finished jobs, archived ones included
        (dict(states=FINISHED, newest=True, archived=True), "jobs_finished"),
        (dict(states=FINISHED, before_id=20_000, archived=True), "jobs_finished"),
        # the desk's newest finished, and its live window
        (dict(states=FINISHED, newest=True), "jobs_finished"),
        (dict(states=LIVE, after_id=10), "jobs_live"),
        # gpudesk queue: one state at a time
        (dict(states=[JobState.QUEUED]), "jobs_by_state_archived"),
        # a plain listing, either way
        (dict(), "jobs_unarchived"),
        (dict(newest=True), "jobs_unarchived"),
        # a run's jobs
        (dict(group="sweep-1"), "jobs_by_group"),
        # one user's history, and all of one user's jobs
        (dict(states=FINISHED, newest=True, archived=True, owner_uid=5001), "jobs_by_owner_id"),
        (dict(owner_uid=5001), "jobs_by_owner_id"),
        # a name pattern narrows the walk, never turns it into a sort (queue --all --name)
        (dict(newest=True, name="sweep-*"), "jobs_unarchived"),
        (dict(states=FINISHED, newest=True, name="lr-[0-9]*"), "jobs_finished"),
        (dict(states=LIVE, after_id=10, name="lr-?"), "jobs_live"),
    ],
)
def test_every_listing_query_walks_an_index(store: Store, filters: dict, index: str) -> None:
    plan = page_plan(store, **filters)
    assert _walks_an_index(plan, index), plan


def matches_names_in_the_index(store: Store, sql: str, params: Sequence[Any]) -> bool:
    """Whether `sql`'s program (EXPLAIN) tests the name (GLOB) on an index's entry before it
    reads any column of the jobs table: a row whose name does not match is never read."""
    root = store._conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'jobs'")
    table_page = root.fetchone()[0]
    program = list(store._conn.execute(f"EXPLAIN {sql}", params))
    table = {op["p1"] for op in program if op["opcode"] == "OpenRead" and op["p2"] == table_page}
    for op in program:
        if op["opcode"] == "Column" and op["p1"] in table:
            return False
        if op["opcode"] == "Function" and str(op["p4"]).startswith("glob"):
            return True
    return False


@pytest.mark.parametrize("name", ["sweep-*", "*[!-]", "lr-[0-9]?"])
def test_a_named_page_and_count_match_names_in_the_listing_index(store: Store, name: str) -> None:
    # queue --all --name: one slice of ids (store/listing.py SLICE_IDS), its page and its count
    query = _page_query(limit=100, newest=True, name=name, id_range=(20_000, 30_000))
    assert query is not None
    for sql, params in (query.page_sql, query.page_params), (query.count_sql, query.count_params):
        plan = query_plan(store, sql, params)
        assert plan == ["SEARCH jobs USING INDEX jobs_unarchived (id>? AND id<?)"], plan
        assert matches_names_in_the_index(store, sql, params), sql


def test_choosing_what_to_archive_walks_its_index_in_end_order(store: Store) -> None:
    plan = query_plan(store, _DUE_FOR_ARCHIVE, (0.0, 1))  # the next batch
    assert _walks_an_index(plan, "jobs_to_archive"), plan


def test_a_page_from_the_newest_is_oldest_first_and_says_where_to_go_on(store: Store) -> None:
    page = store.jobs_page(limit=100, states=FINISHED, newest=True, archived=True, count=True)
    ids = [job.id for job in page.jobs]
    assert ids == list(range(29_901, 30_001))
    assert page.more and page.cursor == 29_901 and page.total == 30_000
    older = store.jobs_page(limit=100, states=FINISHED, before_id=page.cursor, archived=True)
    assert [job.id for job in older.jobs] == list(range(29_801, 29_901))


def test_archiving_goes_in_bounded_batches_and_leaves_the_live_listing(tmp_path: Path) -> None:
    path = tmp_path / "gpudesk.db"
    Store.open(path).close()
    old = fill_jobs(path, finished=1_200, ended_at=time.time() - 40 * DAY_S)
    recent = fill_jobs(path, finished=5)
    store = Store.open(path)
    cutoff = time.time() - 30 * DAY_S
    assert [store.archive_finished(cutoff, 500) for _ in range(4)] == [500, 500, 200, 0]
    live = store.jobs_page(limit=100)
    assert [job.id for job in live.jobs] == recent and not live.more
    history = store.jobs_page(limit=2000, states=FINISHED, archived=True)
    assert [job.id for job in history.jobs] == old + recent
    assert archived_count(store) == len(old)
    requeue(store, old[0])  # a job put back in the queue is live again
    assert old[0] in [job.id for job in store.jobs_page(limit=100, states=LIVE).jobs]


def test_the_archiver_sizes_each_batch_to_its_time_budget_and_drains_the_backlog(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gpudesk.db"
    Store.open(path).close()
    old = fill_jobs(path, finished=2_000, ended_at=time.time() - 40 * DAY_S)
    store = Store.open(path)
    archiver = Archiver(store, lambda: StationConfig(keep_finished_days=30))
    sizes: list[int] = []
    for _ in range(len(old)):  # at most one row a tick: it must be done well before
        batch = archiver.batch
        assert ARCHIVE_MIN_BATCH <= batch <= ARCHIVE_BATCH
        done = archiver.step()
        if done == 0:
            break
        sizes.append(done)
        assert done <= batch
    assert sum(sizes) == len(old) == archived_count(store)
    # what the next batch may be follows from the last one's time per row and the budget
    assert archiver.batch in range(ARCHIVE_MIN_BATCH, ARCHIVE_BATCH + 1)
    assert archiver.step() == 0  # nothing is due now: the next look is a while off
