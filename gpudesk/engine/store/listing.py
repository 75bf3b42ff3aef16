"""Listing jobs a page at a time, and archiving the finished ones: what keeps a listing on a
store of 100,000 jobs as quick as on a new one (docs/reliability.md, "Listings of the whole
store").

A page is at most `limit` rows in id order from a cursor: ascending after `after_id`, or the
newest before `before_id` (handed back oldest first). Each query states the listing migration's
partial index terms word for word, so SQLite walks an index in id order and stops at the page's end
instead of reading and sorting every matching row. A row `read_job` cannot read (a spec that is
not JSON, a state or owner it does not know) is skipped and reported, never failing the page.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Collection, Generator, Iterable
from typing import Any, cast

import msgspec

from gpudesk.core.jobs import JobState
from gpudesk.core.name_pattern import sqlite_glob
from gpudesk.core.records import JobRecord
from gpudesk.engine.store.connection import StoreConnection
from gpudesk.engine.store.records import read_job
from gpudesk.engine.store.schema import FINISHED_JOBS_TERM, LIVE_JOBS_TERM, UNARCHIVED_TERM
from gpudesk.text import safe_text

log = logging.getLogger("gpudesk.engine")
SLICE_IDS = 10_000  # a named listing's ids a turn: <= 20 ms here (benchmarks.md, "Session 54")

LIVE_STATES = frozenset({JobState.QUEUED, JobState.RUNNING})
FINISHED_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class DamagedRow(msgspec.Struct, frozen=True):
    """A job row the store cannot read, and why (the exception's words)."""

    id: int
    reason: str


class JobPage(msgspec.Struct, frozen=True):
    """One page of a listing: its jobs oldest first, the rows skipped as damaged, whether more
    rows match beyond it (`cursor` is then the id to go on from, in the page's direction), and
    how many rows match in all (when counted)."""

    jobs: list[JobRecord]
    more: bool
    cursor: int | None
    total: int | None
    damaged: list[DamagedRow] = msgspec.field(default_factory=list)


def read_rows(rows: Iterable[sqlite3.Row]) -> tuple[list[JobRecord], list[DamagedRow]]:
    """The rows as records, and the ones that cannot be read as damaged (logged: the store
    holds something this gpudesk did not write, or a disk flipped bits)."""
    jobs: list[JobRecord] = []
    damaged: list[DamagedRow] = []
    for row in rows:
        try:
            jobs.append(read_job(row))
        except Exception as exc:  # any row read_job cannot read: its words, not a traceback
            reason = safe_text(f"{type(exc).__name__}: {exc}")[:200]
            damaged.append(DamagedRow(int(row["id"]), reason))
            log.warning("job %s's row cannot be read, skipped: %s", row["id"], reason)
    return jobs, damaged


def _state_term(states: Collection[JobState]) -> tuple[str, str | None]:
    """The states as a WHERE term, and the partial index that walks them in id order: the
    index's own words where they are its set (the values are JobState's own, never the
    caller's text)."""
    wanted = frozenset(states)
    if JobState.SUSPENDED in wanted:  # stored as running (schema 15): running covers it
        wanted = wanted - {JobState.SUSPENDED}
        if JobState.RUNNING not in wanted:
            suspended = "(state = 'running' AND suspended_at IS NOT NULL)"
            if not wanted:
                return suspended, None
            return f"({_state_term(wanted)[0]} OR {suspended})", None
    if wanted == LIVE_STATES:
        return LIVE_JOBS_TERM, "jobs_live"
    if wanted == FINISHED_STATES:
        return FINISHED_JOBS_TERM, "jobs_finished"
    if len(wanted) == 1:
        # with `archived = 0`, jobs_by_state_archived holds them in id order
        return f"state = '{next(iter(wanted)).value}'", "jobs_by_state_archived"
    return "state IN (" + ", ".join(f"'{s.value}'" for s in sorted(wanted)) + ")", None


class _PageQuery(msgspec.Struct, frozen=True):
    count_sql: str
    count_params: list[Any]
    page_sql: str
    page_params: list[Any]
    descending: bool


def _page_query(
    limit: int,
    states: Collection[JobState] | None = None,
    group: str | None = None,
    ids: Collection[int] | None = None,
    owner_uid: int | None = None,
    after_id: int | None = None,
    before_id: int | None = None,
    newest: bool = False,
    archived: bool = False,
    name: str | None = None,
    id_range: tuple[int, int] | None = None,
) -> _PageQuery | None:
    """The SQL of a page (None: nothing can match), of the ids in `id_range` [low, high) only."""
    clauses: list[str] = []
    params: list[Any] = []
    # The index a page walks in id order, named: SQLite's planner, left to itself, takes
    # jobs_by_state and sorts every matching row (600 ms for the newest 500 of 100,000
    # finished jobs, here). A group or ids filter has a better index of its own.
    index: str | None = None
    if not archived and ids is None:
        clauses.append(UNARCHIVED_TERM)
        index = "jobs_unarchived"
    if owner_uid is not None and owner_uid == os.getuid():
        # a job stored before owners were (schema 7) is the engine's user's
        clauses.append("(owner_uid = ? OR owner_uid IS NULL)")
        params.append(owner_uid)
    elif owner_uid is not None:
        clauses.append("owner_uid = ?")
        params.append(owner_uid)
    if states is not None:
        if not states:
            return None
        term, state_index = _state_term(states)
        clauses.append(term)
        index = state_index or index
    if owner_uid is not None and owner_uid != os.getuid():
        # One user's jobs (`history --me` on a station of many users): walk that user's own
        # jobs in id order, not every finished job's, unless it asks for live ones, a few
        # that jobs_by_owner (owner_uid, state) finds at once.
        live = states is not None and frozenset(states) <= LIVE_STATES
        index = None if live else "jobs_by_owner_id"
    if group is not None:
        clauses.append("grp = ?")
        params.append(group)
    if name is not None:  # GLOB in C; fnmatchcase (connection.py) only where it is not exact
        glob, exact = sqlite_glob(name)
        clauses.append("name GLOB ?" if exact else "name GLOB ? AND fnmatchcase(name, ?)")
        params += [glob] if exact else [glob, name]
    if ids is not None:
        wanted = sorted(set(ids))
        if not wanted:
            return None
        clauses.append(f"id IN ({','.join('?' * len(wanted))})")
        params.extend(wanted)
    if id_range is not None:
        clauses.append("id >= ? AND id < ?")
        params += id_range
    where = " AND ".join(clauses) or "1"
    if group is not None or ids is not None or (archived and index == "jobs_by_state_archived"):
        index = None
    hint = f" INDEXED BY {index}" if index else ""
    descending = newest or before_id is not None
    start = before_id if descending else after_id
    page_where, page_params = where, list(params)
    if start is not None:
        page_where += " AND id < ?" if descending else " AND id > ?"
        page_params.append(start)
    page_params.append(limit + 1)  # one more than the page: whether more rows match
    return _PageQuery(
        f"SELECT COUNT(*) FROM jobs{hint if name else ''} WHERE {where}",
        params,
        f"SELECT * FROM jobs{hint} WHERE {page_where} "
        f"ORDER BY id {'DESC' if descending else 'ASC'} LIMIT ?",
        page_params,
        descending,
    )


class JobListing(StoreConnection):
    """Pages of jobs, and archiving finished ones."""

    def jobs_page(self, **filters: Any) -> JobPage:
        """`jobs_page_in_slices`'s page, its slices read one after the other at once."""
        work = self.jobs_page_in_slices(**filters)
        while True:
            try:
                next(work)
            except StopIteration as end:
                return cast(JobPage, end.value)

    def jobs_page_in_slices(
        self,
        *,
        limit: int,
        states: Collection[JobState] | None = None,
        group: str | None = None,
        ids: Collection[int] | None = None,
        owner_uid: int | None = None,
        after_id: int | None = None,
        before_id: int | None = None,
        newest: bool = False,
        archived: bool = False,
        count: bool = False,
        name: str | None = None,
    ) -> Generator[None, None, JobPage]:
        """At most `limit` jobs matching the filters, in id order: the first after `after_id`
        (default: from the oldest), or with `before_id` or `newest` the newest before it
        (default: from the newest), handed back oldest first. Archived jobs only with
        `archived` (or when named by `ids`); `name`: those whose name matches it
        (core.name_pattern). With `count`, `total` counts every matching row: an index-only
        count, yet 10-20 ms over 100,000 rows here, so only when asked. It yields between
        slices (`offloop.in_turns`): with a `name`, each looks at SLICE_IDS ids only (a pattern
        costly to match, `*[!-]`, would else hold the loop 0.1-0.2 s over 100,000 jobs), and
        reads what changed between two as it finds it."""
        filters = (states, group, ids, owner_uid, after_id, before_id, newest, archived, name)
        if (query := _page_query(limit, *filters)) is None:
            return JobPage([], False, None, 0 if count else None)
        spans: list[tuple[int, int] | None] = [None]
        if name is not None:  # in the page's direction; for a page alone, past its cursor only
            top = int(self._conn.execute("SELECT MAX(id) FROM jobs").fetchone()[0] or 0) + 1
            low = after_id + 1 if after_id is not None and not count else 0
            top = min(top, before_id) if before_id is not None and not count else top
            spans = [(at, min(at + SLICE_IDS, top)) for at in range(low, top, SLICE_IDS)]
            spans = spans[::-1] if query.descending else spans
        total, rows, conn = (0 if count else None), list[sqlite3.Row](), self._conn
        for number, span in enumerate(spans):
            if total is None and len(rows) > limit:
                break  # the page is full, and nothing to count
            if number:
                yield
            sliced = cast(_PageQuery, _page_query(limit - len(rows), *filters, span))
            if total is not None:
                total += int(conn.execute(sliced.count_sql, sliced.count_params).fetchone()[0])
            if len(rows) <= limit:
                rows += conn.execute(sliced.page_sql, sliced.page_params).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        cursor = int(rows[-1]["id"]) if more and rows else None
        if query.descending:
            rows.reverse()
        jobs, damaged = read_rows(rows)
        return JobPage(jobs, more, cursor, total, damaged)

    def archive_finished(self, ended_before: float, batch: int) -> int:
        """Archive at most `batch` finished jobs that ended before `ended_before`, oldest end
        first; how many were. Bounded so one engine tick never holds the loop long."""
        with self.transaction() as conn:
            return conn.execute(
                f"UPDATE jobs SET archived = 1 WHERE id IN ({_DUE_FOR_ARCHIVE})",
                (ended_before, batch),
            ).rowcount


# The next finished jobs to archive, oldest end first. INDEXED BY: left to itself the planner
# took jobs_by_state_archived and sorted every finished job by its end, ~100 ms a batch of any
# size over 100,000 jobs; jobs_to_archive hands them over in end order (4-10 ms a batch).
_DUE_FOR_ARCHIVE = (
    f"SELECT id FROM jobs INDEXED BY jobs_to_archive "
    f"WHERE {UNARCHIVED_TERM} AND ended_at < ? AND {FINISHED_JOBS_TERM} "
    "ORDER BY ended_at LIMIT ?"
)
