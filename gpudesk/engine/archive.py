"""Archiving finished jobs: each one older than `[station] keep_finished_days` leaves the live
listings (the queue, the desk, a plain `jobs` request), a batch at a time between requests, so
the live listings stay the size of the live work however long the station runs. History and
accounting still read archived jobs (`jobs` with `archived`); nothing is deleted."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpudesk.engine.station import StationConfig
from gpudesk.engine.store.database import Store

log = logging.getLogger("gpudesk.engine")

# Rows archived per engine tick: an assumption sized by measurement (docs/benchmarks.md,
# "Archiving finished jobs"): a batch of 500 takes a few ms on a store of 100,000 jobs, so a
# tick that archives holds the loop far below its 50 ms budget. A full batch is followed by
# the next at the next tick; the station's backlog drains at thousands of rows a second.
ARCHIVE_BATCH = 500
# How often the engine looks for jobs newly due when the last look found none (a day's
# setting needs no finer grain).
ARCHIVE_EVERY_S = 60.0
DAY_S = 86_400.0


class Archiver:
    """Archives finished jobs past the station's `keep_finished_days`, ARCHIVE_BATCH a tick."""

    def __init__(self, store: Store, config: Callable[[], StationConfig]) -> None:
        self._store = store
        self._config = config
        self._next_at = 0.0  # monotonic; 0: look at the first tick
        self.archived = 0  # since the engine started

    def poll_timeout(self, timeout: float) -> float:
        """`timeout` shortened to when the next batch is due."""
        return min(timeout, max(0.0, self._next_at - time.monotonic()))

    def step(self, now: float | None = None) -> int:
        """Archive one batch if one is due; how many jobs were."""
        if time.monotonic() < self._next_at:
            return 0
        days = self._config().keep_finished_days
        if not days:
            self._next_at = time.monotonic() + ARCHIVE_EVERY_S
            return 0
        cutoff = (now or time.time()) - days * DAY_S
        done = self._store.archive_finished(cutoff, ARCHIVE_BATCH)
        self.archived += done
        # a full batch: more may be due, at the next tick; else look again in a while
        self._next_at = time.monotonic() + (0.0 if done == ARCHIVE_BATCH else ARCHIVE_EVERY_S)
        if done:
            log.debug("archived %d finished jobs that ended over %g days ago", done, days)
        return done
