"""What the engine believes of a tracking worker's replies, and how it says what it does not.

A worker runs as its jobs' owner (`sidecar`): she may attach to it, replace it, or write to its
pipe herself, so its replies are hers to forge. The engine believes a reply only for a run its
worker was handed: a run of the worker's own uid (`TrackedRun.uid`, the job's owner, from the
kernel at submit), named by a key the engine made. A reply naming any other run (another user's
job, a key the engine never made) is dropped; a store's health only for a store her runs use.
Nothing a flood of replies says grows the log or the store without bound: each complaint is
logged at most once per `COMPLAINT_EVERY_S` per worker, with a count of those left unsaid, and
the events a reply adds are limited per run and per store (`EventBudget`).
"""

from __future__ import annotations

import logging
import time

import msgspec

log = logging.getLogger("gpudesk.engine")

COMPLAINT_EVERY_S = 60.0
# Events a worker's replies may add: a burst, then one per refill period. A store that fails
# and recovers now and then, or a run MLflow refuses a few updates of, stays well inside it.
EVENT_BURST = 10
EVENT_REFILL_S = 60.0


class Complaints(msgspec.Struct):
    """Replies of one worker that were not believed: logged at most once per
    COMPLAINT_EVERY_S, with how many were dropped meanwhile."""

    uid: int
    last: float | None = None
    unsaid: int = 0

    def dropped(self, why: str) -> None:
        now = time.monotonic()
        self.unsaid += 1
        if self.last is not None and now - self.last < COMPLAINT_EVERY_S:
            return
        log.warning(
            "the tracking worker of uid %d: %d repl%s dropped since the last such line (the "
            "latest: %s); a worker's replies count only for its own user's runs",
            self.uid,
            self.unsaid,
            "y" if self.unsaid == 1 else "ies",
            why,
        )
        self.last, self.unsaid = now, 0


class EventBudget(msgspec.Struct):
    """How many more events replies may add for one run or store: EVENT_BURST, refilled by one
    every EVENT_REFILL_S."""

    tokens: float = EVENT_BURST
    at: float | None = None

    def take(self) -> bool:
        now = time.monotonic()
        if self.at is not None:
            self.tokens = min(EVENT_BURST, self.tokens + (now - self.at) / EVENT_REFILL_S)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
