"""Listings of the whole store on a real engine (issue 36, findings 4 and 11): the `jobs` op
answers a page at a time and says when it cut; the client follows the pages; a request naming
too many ids is refused clearly; a job row the store cannot read is skipped and reported by
`jobs`, `gpudesk queue` and the desk; `gpudesk queue` keeps every running job and says what it
cut; the desk reads only its live window; finished jobs are archived out of the live listings
after `[station] keep_finished_days` while history still sees them."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, wait_for
from store_fill import corrupt_spec, fill_jobs

from gpudesk.api.client import Client
from gpudesk.api.errors import EngineError
from gpudesk.core import protocol
from gpudesk.core.jobs import JobSpec
from gpudesk.engine.store.database import Store
from gpudesk.paths import Home

DAY_S = 86_400.0
# the engine's (read so that this module loads on code from before they were, to fail there)
JOBS_PAGE_CAP = getattr(protocol, "JOBS_PAGE_CAP", 100)
MAX_LISTING_IDS = getattr(protocol, "MAX_LISTING_IDS", 10_000)


@pytest.fixture
def handle(home: Home) -> Iterator[EngineHandle]:
    """`home`'s engine, not started yet: the test puts rows in the store first, then starts it
    (it reads the queue from the store as it starts). `home`'s teardown stops it."""
    handle = EngineHandle(home)
    yield handle
    handle.client.close()


def _store_made(home: Home) -> None:
    """The home's database at the current schema, for rows to be put in before the engine
    starts (it reads the queue from the store as it starts)."""
    home.ensure()
    Store.open(home.db).close()


def test_a_listing_over_the_cap_is_cut_and_says_so_and_jobs_follows_the_pages(
    home: Home, handle: EngineHandle
) -> None:
    _store_made(home)
    ids = fill_jobs(home.db, finished=JOBS_PAGE_CAP * 2 + 50)
    handle.start()

    page = handle.client.request("jobs")
    assert len(page["jobs"]) == JOBS_PAGE_CAP, "a reply carries at most the cap"
    assert page["more"] is True and page["after_id"] == ids[JOBS_PAGE_CAP - 1]
    newest = handle.client.request("jobs", limit=10**6, count=True)
    assert [j["id"] for j in newest["jobs"]] == ids[-JOBS_PAGE_CAP:]
    assert newest["more"] is True and newest["before_id"] == ids[-JOBS_PAGE_CAP]
    assert newest["total"] == len(ids)

    with Client.attach(home) as client:
        assert [j.id for j in client.jobs()] == ids, "jobs() follows every page"
        assert [j.id for j in client.jobs(limit=JOBS_PAGE_CAP + 7)] == ids[-JOBS_PAGE_CAP - 7 :]
        listing = client.job_listing(limit=JOBS_PAGE_CAP + 7)
        assert listing.more, "a limit that cut says so"


def test_a_jobs_request_naming_too_many_ids_is_invalid_args_not_internal(
    home: Home, engine: EngineHandle
) -> None:
    [job] = engine.submit({"name": "one", "command": ["true"]})
    # more than a listing names, within what a request may hold: the engine names the limit
    try:
        engine.client.request("jobs", ids=list(range(1, 20_002)))
    except EngineError as exc:
        assert exc.code == "invalid_args", exc
        assert f"at most {MAX_LISTING_IDS} job ids" in str(exc)
    else:
        raise AssertionError("20,001 ids were answered")
    # the finding's 250,001 ids: more values than one request may hold (protocol.py), refused
    # before they are sent, saying so; never the engine's "too many SQL variables"
    try:
        engine.client.request("jobs", ids=list(range(1, 250_002)))
    except EngineError as exc:
        assert exc.code == "too_large", exc
        assert "JSON values" in str(exc)
    else:
        raise AssertionError("250,001 ids were answered")
    with Client.attach(home) as client:  # the client asks in several requests
        assert [j.id for j in client.jobs(ids=list(range(1, 25_001)))] == [job]


def test_a_damaged_job_row_is_skipped_and_reported_by_jobs_queue_and_the_desk(
    home: Home, handle: EngineHandle, gpudesk: Run
) -> None:
    _store_made(home)
    ids = fill_jobs(home.db, finished=5, name="fine")
    corrupt_spec(home.db, ids[2])
    handle.start()

    reply = handle.client.request("jobs")
    assert [j["id"] for j in reply["jobs"]] == ids[:2] + ids[3:]
    [damaged] = reply["damaged"]
    assert damaged["id"] == ids[2] and "JSONDecodeError" in damaged["reason"]

    code, out, err = gpudesk("queue", "--all")
    assert code == 0, err
    assert "fine" in out and f"job {ids[2]}:" in err and "cannot be read" in err
    assert "Traceback" not in out + err

    from gpudesk.screens.feed import EngineFeed

    feed = EngineFeed(home, interval=0.05)
    try:
        frame = feed.next_frame(0.0)
        assert frame is not None
        assert [d.id for d in getattr(frame, "damaged", [])] == [ids[2]]
        assert sorted(j.id for j in frame.jobs) == ids[:2] + ids[3:]
    finally:
        feed.close()


def test_a_name_stored_before_it_was_refused_is_spelled_out_by_queue_show_and_cancel(
    home: Home, handle: EngineHandle, gpudesk: Run
) -> None:
    """A name with a C1 control (U+009B, CSI to a terminal) or a bidi override, kept from
    before the checks refused them, is listed and shown spelled out, never obeyed."""
    _store_made(home)
    [job] = fill_jobs(home.db, queued=1, held=True, name="a\x9bb\u202ec")
    handle.start()

    for args in (("queue", "--all"), ("show", str(job)), ("cancel", str(job))):
        code, out, err = gpudesk(*args)
        assert code == 0, err
        assert "a\\x9bb\\u202ec" in out, args
        assert "\x9b" not in out + err and "\u202e" not in out + err, args


def test_queue_with_600_waiting_shows_the_running_job_and_says_what_it_cut(
    handle: EngineHandle, gpudesk: Run
) -> None:
    handle.start(slots=1)
    [running] = handle.submit({"name": "holds-the-slot", "command": ["sleep", "120"]})
    handle.wait_state(running, "running")
    waiting = handle.submit(*({"name": f"w{n}", "command": ["true"]} for n in range(600)))
    try:
        code, out, err = gpudesk("queue")
        assert code == 0, err
        rows = [line.split() for line in out.splitlines()]
        listed = [int(row[0]) for row in rows if row and row[0].isdigit()]
        assert running in listed, "the running job is shown"
        assert listed[1:] == waiting[:500], "then the first 500 waiting, in queue order"
        assert "… and 100 more waiting" in out
    finally:
        handle.client.request("cancel", jobs=[running, *waiting])


def test_the_desk_reads_only_its_live_window(home: Home, handle: EngineHandle) -> None:
    from gpudesk.screens import feed as desk_feed

    shown = getattr(desk_feed, "FINISHED_SHOWN", 100)
    _store_made(home)
    finished = fill_jobs(home.db, finished=20_000)
    # more waiting than a page (held: they stay queued): the desk reads the queue's head on
    queued = fill_jobs(home.db, queued=JOBS_PAGE_CAP * 2 + 50, held=True)
    handle.start()

    feed = desk_feed.EngineFeed(home, interval=0.05)
    try:
        started = time.monotonic()
        frame = feed.next_frame(0.0)
        first_paint_s = time.monotonic() - started
        assert frame is not None
        ids = sorted(j.id for j in frame.jobs)
        assert ids == finished[-shown:] + queued, "the newest finished and the live jobs only"
        assert frame.left_out and "older finished" in frame.left_out
        print(f"first frame over 20,000 finished jobs: {first_paint_s * 1000:.0f} ms")

        assert feed.older_finished() == shown, "older ones a page at a time, when asked"
        frame = wait_for(lambda: feed.next_frame(0.2), 10.0, what="the next frame")
        assert sorted(j.id for j in frame.jobs) == finished[-2 * shown :] + queued
    finally:
        feed.close()


def test_finished_jobs_are_archived_out_of_the_live_listings_but_history_sees_them(
    home: Home, handle: EngineHandle, gpudesk: Run
) -> None:
    _store_made(home)
    old = fill_jobs(home.db, finished=1_200, ended_at=time.time() - 40 * DAY_S, name="old")
    recent = fill_jobs(home.db, finished=3, name="recent")
    handle.start(keep_finished_days=30)

    with Client.attach(home) as client:
        wait_for(
            lambda: [j.id for j in client.jobs()] == recent,
            20.0,
            what="the 1,200 old jobs to be archived, 500 a tick",
        )
        everything = client.jobs(archived=True)
        assert [j.id for j in everything] == old + recent, "archived, not deleted"
        assert [j.id for j in client.jobs(ids=[old[0]])] == [old[0]], "named by id: found"
        assert client.show(old[0]).job.id == old[0]

    code, out, err = gpudesk("history", "--limit", "5000", "--format", "csv")
    assert code == 0, err
    assert len(out.splitlines()) == 1 + len(old) + len(recent), "history sees archived jobs"
    code, out, err = gpudesk("queue", "--all", "--json")
    assert code == 0, err
    assert '"recent"' in out and '"old"' not in out


def test_history_says_what_its_limit_left_out(
    home: Home, handle: EngineHandle, gpudesk: Run
) -> None:
    """A sysadmin summing a week's GPU-hours from `history --since 7d --format csv` got the
    newest 1,000 jobs (the default --limit) and no word that more had ended: history now says
    what its limit cut, as queue does (on stderr beside CSV and JSON)."""
    _store_made(home)
    old = fill_jobs(home.db, finished=60, ended_at=time.time() - 2 * DAY_S, name="old")
    recent = fill_jobs(home.db, finished=990, name="recent")
    handle.start()

    code, out, err = gpudesk("history")
    assert code == 0, err
    assert out.splitlines()[-1] == "… and 50 older jobs not shown; --limit N shows more"
    code, out, err = gpudesk("history", "--since", "1h", "--format", "csv", "--limit", "500")
    assert code == 0, err
    assert len(out.splitlines()) == 1 + 500
    assert "… and 550 older jobs not looked at (some may have ended since)" in err
    # the listing reached back past --since (it dropped the old jobs): nothing to say
    code, out, err = gpudesk("history", "--since", "1d", "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)["jobs"]) == len(recent) and err == ""
    code, out, err = gpudesk("history", "--limit", "2000", "--format", "csv")
    assert code == 0, err
    assert len(out.splitlines()) == 1 + len(old) + len(recent) and err == ""


def test_wait_on_many_ids_reads_them_in_one_listing_not_a_show_each(
    home: Home, handle: EngineHandle, gpudesk: Run
) -> None:
    """`gpudesk wait` on 3,000 queued jobs asked the engine for each one's whole detail (a
    `show`, why it waits included) before it began to wait: 10 s. Ids are checked in one
    listing; a name, and an id no job has, are still asked one by one and said as before."""
    _store_made(home)
    ids = fill_jobs(home.db, finished=300, name="done")
    handle.start()
    requests = handle.api.status().loop
    assert requests is not None

    code, out, err = gpudesk("wait", *map(str, ids), str(ids[0]), "done")
    assert code == 1, err  # the first that did not succeed: ids[1], failed with exit code 1
    assert len(out.splitlines()) == len(ids), "each job once, an id named twice too"
    after = handle.api.status().loop
    assert after is not None
    # the listing of 300 ids (3 pages), a show for the name, the statuses: not 300 shows
    assert after.requests - requests.requests < 20

    code, out, err = gpudesk("wait", str(ids[0]), "999999", str(ids[1]))
    assert code != 0 and "999999" in err and out == "", "an unknown id: none is waited for"


def test_show_spells_out_a_commands_workdirs_and_environments_escape_sequences(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    """A job's command, working directory and environment are the user's text: `show` prints
    their control characters spelled out (as `logs` does), so an ESC[2J in an argument does not
    clear the terminal of whoever looks at it."""
    folder = tmp_path / "a\x01b"
    folder.mkdir()
    (job,) = engine.submit(
        {
            "name": "esc",
            "command": ["echo", "a\x1b[2Jb\x07"],
            "workdir": str(folder),
            "env": {"TITLE": "\x1b]0;pwned\x07"},
        }
    )
    code, out, err = gpudesk("show", "--env", str(job))
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\x01" not in out
    assert "a\\x1b[2Jb\\x07" in out and "a\\x01b" in out and "TITLE=\\x1b]0;pwned\\x07" in out


def test_show_lists_a_jobs_latest_events_and_counts_those_before(
    home: Home, engine: EngineHandle, gpudesk: Run
) -> None:
    """A job requeued or preempted for weeks has thousands of events: `show` lists its latest
    (its hold and its end are there, and the desk's last dozen are the newest), and says how
    many came before them."""
    shown = getattr(protocol, "SHOWN_EVENTS", 1000)
    spec = JobSpec(name="old-hand", command=("true",), workdir=str(home.root))
    (job,) = engine.api.submit_jobs([spec], dict(os.environ), hold=True).ids
    with closing(sqlite3.connect(str(home.db), isolation_level=None, timeout=30.0)) as writer:
        writer.executemany(
            "INSERT INTO events (ts, job_id, kind, message) VALUES (?, ?, 'edit', ?)",
            [(time.time(), job, f"filler {n}") for n in range(shown + 200)],
        )
    engine.client.request("release", jobs=[job])
    engine.wait_state(job, "succeeded")
    with closing(sqlite3.connect(str(home.db))) as reader:
        (total,) = reader.execute("SELECT COUNT(*) FROM events WHERE job_id = ?", (job,)).fetchone()
    detail = engine.show(job)
    assert len(detail.events) == shown
    assert detail.events[-1].state == "succeeded", detail.events[-3:]
    assert any(e.kind == "release" for e in detail.events)
    assert getattr(detail, "earlier_events", 0) == total - shown > 200
    code, out, err = gpudesk("show", str(job))
    assert code == 0, err
    assert f"events (the latest {shown:,}; {total - shown:,} earlier):" in out
    assert "filler 0\n" not in out and f"filler {shown + 199}" in out
