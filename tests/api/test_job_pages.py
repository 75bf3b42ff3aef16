"""`Client.job_pages` on the real daemon: a listing's pages one at a time, oldest first when the
limit keeps every job that matches, newest first (each page oldest first) when it keeps fewer;
each page asked for while the caller uses the one before, on a thread that hands over what the
engine said, an error included, and stops when the caller does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from conftest import EngineHandle
from store_fill import fill_jobs

from gpudesk.api.errors import EngineError
from gpudesk.api.job_pages import _read_ahead
from gpudesk.api.models import JobList


def test_pages_come_oldest_first_where_the_limit_keeps_them_all(engine: EngineHandle) -> None:
    ids = fill_jobs(engine.home.db, finished=250, name="done")
    fill_jobs(engine.home.db, queued=5, name="waiting")
    finished = ["succeeded", "failed", "cancelled"]

    pages = engine.api.job_pages(states=finished, limit=250)
    assert not pages.newest_first
    listed = [[job.id for job in page.jobs] for page in pages]
    assert [len(page) for page in listed] == [100, 100, 50]
    assert [i for page in listed for i in page] == ids and not pages.more

    pages = engine.api.job_pages(states=finished, limit=120)
    assert pages.newest_first
    listed = [[job.id for job in page.jobs] for page in pages]
    assert listed == [ids[-100:], ids[-120:-100]] and pages.more


def test_an_error_reading_a_page_reaches_the_caller_after_the_pages_before_it() -> None:
    def pages() -> Iterator[JobList]:
        yield JobList(jobs=[])
        yield JobList(jobs=[], more=True)
        raise EngineError("the engine stopped", "internal")

    read = _read_ahead(pages())
    assert next(read).more is False and next(read).more is True
    with pytest.raises(EngineError, match="the engine stopped"):
        next(read)


def test_a_caller_that_stops_early_stops_the_reader() -> None:
    def pages() -> Iterator[JobList]:
        while True:  # a listing longer than the caller wants
            yield JobList(jobs=[])

    read = _read_ahead(pages())
    next(read)
    read.close()  # the caller is done (a closed pipe, Ctrl-C)
    time.sleep(0.3)
    assert not [t for t in threading.enumerate() if t.name == "gpudesk-job-pages"]
