"""A long listing's pages one at a time (`Client.job_pages`), for a caller that uses each as it
arrives and keeps none of the replies: `gpudesk history --limit 100000` held every job's whole
reply (0.4-0.9 GiB) before it printed its first row.

The pages come oldest first where they can: when `limit` keeps every job that matches (a count
asked first says so), each page can be used at once, in order. Where `limit` keeps fewer (the
newest `limit` of more), they come newest first, each still oldest first within
(`newest_first`): a caller that lists oldest first keeps what it made of each page (its rows as
text) and puts them in order at the end.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from gpudesk.api.models import DamagedJob, JobList, JobStateName
from gpudesk.api.page_run import PageRun

if TYPE_CHECKING:
    from gpudesk.api.client import Client


class JobPages:
    """The pages of the jobs that match (with `limit`, the newest `limit`), each its own
    request, so other clients' requests go between them. Iterate once. Known before the
    first page: `newest_first`, `simulated` (the station's backend where its GPUs are
    simulated, as the count said it); after the last: `more` (with `limit`: more matched
    than were listed), `damaged` (every page's rows the engine could not read; they count
    against `limit`, as in `Client.job_listing`)."""

    def __init__(
        self,
        client: Client,
        *,
        states: Sequence[JobStateName] | None = None,
        group: str | None = None,
        limit: int | None = None,
        usage: bool = False,
        user: str | int | None = None,
        archived: bool = False,
        name: str | None = None,
    ) -> None:
        self.client = client
        self.filters: dict[str, Any] = dict(
            states=states, group=group, user=user, archived=archived, name=name
        )
        self.usage = usage
        self.limit = limit
        self.more = False
        self.damaged: list[DamagedJob] = []
        self.simulated: str | None = None
        self.newest_first = False
        if limit is not None:  # how many match: are they all kept?
            counted = client.jobs_page(limit=1, count=True, **self.filters)
            self.simulated = counted.simulated
            self.newest_first = counted.total is None or counted.total > limit

    def __iter__(self) -> Iterator[JobList]:
        run = PageRun(
            self.client,
            limit=self.limit,
            newest_first=self.newest_first,
            usage=self.usage,
            **self.filters,
        )
        for page in _read_ahead(iter(run)):
            self.damaged += page.damaged
            self.simulated = page.simulated
            yield page
        self.more = run.more


_END = object()
_POLL_S = 0.1  # how often a reader waiting to hand over a page looks whether to give up


def _read_ahead(pages: Iterator[JobList]) -> Iterator[JobList]:
    """`pages`, each asked for while the caller uses the one before, on a thread of its own:
    the engine builds the next page while this process writes the last, where their times
    added up (about 5 ms each a page of 100 jobs with their usage, on the 2-core VM). At
    most two pages wait. The connection is the thread's alone until the last page is
    handed over (or the caller stops early: the thread then stops at its next page)."""
    handoff: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand_over(item: tuple[object, BaseException | None]) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for page in pages:
                if not hand_over((page, None)):
                    return
        except BaseException as exc:  # the caller's to raise
            hand_over((None, exc))
        else:
            hand_over((_END, None))

    reader = threading.Thread(target=read, name="gpudesk-job-pages", daemon=True)
    reader.start()
    try:
        while True:
            page, error = handoff.get()
            if error is not None:
                raise error
            if page is _END:
                return
            yield cast(JobList, page)
    finally:
        stop.set()
        reader.join(timeout=_POLL_S * 2)  # a request in flight ends with its connection
