"""Archiving finished jobs: each one older than `[station] keep_finished_days` leaves the live
listings (the queue, the desk, a plain `jobs` request), a batch at a time between requests, so
the live listings stay the size of the live work however long the station runs. History and
accounting still read archived jobs (`jobs` with `archived`); nothing is deleted."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpudesk.core.station import StationConfig
from gpudesk.engine.store.database import Store

log = logging.getLogger("gpudesk.engine")

# Rows archived per engine tick, at most: an assumption sized by measurement (docs/benchmarks.md,
# "Archiving finished jobs"): a batch of 500 takes a few ms on a quiet store of 100,000 jobs.
# On a busy one (bench/store_scale.py, 2 listers and a desk at it) a batch of 500 held the
# loop 59 ms, over the 50 ms a request may wait, so each batch is also sized from the last
# one's time to take about ARCHIVE_BUDGET_S (a fifth of that budget: assumption), never fewer
# than ARCHIVE_MIN_BATCH rows. A full batch is followed by the next at the next tick.
ARCHIVE_BATCH = 500
ARCHIVE_MIN_BATCH = 20
ARCHIVE_BUDGET_S = 0.010
# How often the engine looks for jobs newly due when the last look found none (a day's
# setting needs no finer grain).
ARCHIVE_EVERY_S = 60.0
DAY_S = 86_400.0


class Archiver:
    """Archives finished jobs past the station's `keep_finished_days`, a batch a tick (at most
    ARCHIVE_BATCH, sized to take about ARCHIVE_BUDGET_S)."""

    def __init__(self, store: Store, config: Callable[[], StationConfig]) -> None:
        self._store = store
        self._config = config
        self._next_at = 0.0  # monotonic; 0: look at the first tick
        self.archived = 0  # since the engine started
        self.batch = ARCHIVE_BATCH  # the next batch's size, from the last one's time

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
        batch = self.batch
        started = time.perf_counter()
        done = self._store.archive_finished(cutoff, batch)
        took = time.perf_counter() - started
        self.archived += done
        if done:
            per_row = took / done
            fits = int(ARCHIVE_BUDGET_S / per_row) if per_row > 0 else ARCHIVE_BATCH
            self.batch = max(ARCHIVE_MIN_BATCH, min(ARCHIVE_BATCH, fits))
        # a full batch: more may be due, at the next tick; else look again in a while
        self._next_at = time.monotonic() + (0.0 if done == batch else ARCHIVE_EVERY_S)
        if done:
            log.debug("archived %d finished jobs that ended over %g days ago", done, days)
        return done
