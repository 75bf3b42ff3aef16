"""One listing's pages, each its own request (`PageRun`): what `Client.job_listing` gathers and
`JobPages` hands over as they come. No threads here: `gpudesk queue` lists through it and
starts in as little as it can (gpudesk.api.job_pages reads ahead on a thread)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gpudesk.api.models import JobList

if TYPE_CHECKING:
    from gpudesk.api.client import Client


class PageRun:
    """One listing's pages, each its own request (`Client.jobs_page`, which `query` is given
    to), so other clients' requests go between them: oldest first, page after page (with
    `limit`, until that many are listed), or `newest_first` until `limit` are listed. Damaged
    rows count against `limit`: they were there. Iterate once; `more` says, after the last
    page, that it stopped at `limit` with more left. `Client.job_listing` gathers one into a
    single JobList; `JobPages` hands its pages over as they come."""

    def __init__(
        self, client: Client, *, limit: int | None, newest_first: bool = False, **query: Any
    ) -> None:
        self.client, self.limit, self.newest_first, self.query = client, limit, newest_first, query
        self.more = False

    def __iter__(self) -> Iterator[JobList]:
        # oldest first: after_id 0 (no job's id) keeps that order even with a limit, which
        # alone means newest first
        cursor: int | None = None if self.newest_first or self.limit is None else 0
        left = self.limit
        while True:  # a limit below 1 is the engine's to refuse (invalid_args)
            if self.newest_first:
                page = self.client.jobs_page(limit=left, before_id=cursor, **self.query)
            else:
                page = self.client.jobs_page(limit=left, after_id=cursor, **self.query)
            yield page
            if left is not None:
                left -= len(page.jobs) + len(page.damaged)
            cursor = page.before_id if self.newest_first else page.after_id
            if not page.more or cursor is None:
                return
            if left is not None and left <= 0:  # with oldest first: more finished since
                self.more = True
                return
