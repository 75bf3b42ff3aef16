"""Keeping running jobs' logs under `[station] log_max_mb`, and the engine's own log under
ENGINE_LOG_MAX_MIB.

Every CHECK_EVERY_S the engine looks at the size of each running attempt's output.log and
rotates the ones over the cap (gpudesk.joblog.rotate: cut in place, a hole punched, or
copy-truncate, as the file system allows). Every attempt that settled since the last look gets
one last check, so its final log is capped too, including one that started and ended between
two looks (`settled_logs`). A log grows by what its job writes
between two looks beyond the cap (the slack), so disk use per attempt stays under about
cap × (log_keep + 1) + what the job writes in CHECK_EVERY_S. A log whose lock someone holds
is rotated despite it once LOCK_OVERRIDE_S have passed; until then it grows by what its job
writes in that time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from gpudesk import joblog
from gpudesk.core.station import StationConfig
from gpudesk.units import BYTES_PER_MIB

log = logging.getLogger("gpudesk.engine")

CHECK_EVERY_S = 0.5
# A reader holds the log's shared lock for one bounded read (at most a MiB: milliseconds), so
# a log still locked after this long is held by its job or its owner, not read, and is rotated
# despite the lock: else a job that flocks its own output.log lifts the cap for good (issue
# 36). Assumption: 5 s (ten looks) is far beyond any reader's read, and a reader caught by the
# rotation reads at worst one piece from the wrong place, its owner's own log.
LOCK_OVERRIDE_S = 5.0
# The engine's own engine.log (a personal engine's stdout and stderr; a system engine under
# systemd writes to the journal, which rotates itself) is rotated past this, keeping
# ENGINE_LOG_KEEP earlier parts (engine.log.1, .2), looked at once a minute: it grew for good
# before. Assumption: 16 MiB is weeks of a busy engine's lines (a placement and its reasons
# are a few hundred bytes) and the same cap as a tracking worker's own log.
ENGINE_LOG_MAX_MIB = 16
ENGINE_LOG_KEEP = 2
ENGINE_LOG_CHECK_S = 60.0


class LogCap:
    def __init__(
        self,
        config: Callable[[], StationConfig],
        running_logs: Callable[[], Iterable[str]],
        settled_logs: Callable[[], Iterable[str]],
        engine_log: str | None = None,
    ) -> None:
        self._config = config
        self.engine_log = engine_log  # the engine's own, written by its stdout
        self._engine_log_at = 0.0
        self._running_logs = running_logs
        self._settled_logs = settled_logs  # attempts settled since the last look (taken)
        self._watched: set[str] = set()
        self._checked_at = 0.0
        self._failing: set[str] = set()  # logs whose last rotation failed (warned once)
        self._linked: set[str] = set()  # logs rotated despite names their owners gave them
        self._locked_since: dict[str, float] = {}  # logs over the cap a lock kept unrotated

    def poll_timeout(self, timeout: float) -> float:
        """`timeout` shortened so that running attempts' logs are looked at in time."""
        if (self._watched or self._locked_since) and self._config().log_max_mb > 0:
            due_in = self._checked_at + CHECK_EVERY_S - time.monotonic()
            return min(timeout, max(0.0, due_in))
        return timeout

    def check(self) -> None:
        now = time.monotonic()
        if self.engine_log is not None and now - self._engine_log_at >= ENGINE_LOG_CHECK_S:
            self._engine_log_at = now
            self._rotate_engine_log()
        if now - self._checked_at < CHECK_EVERY_S:
            return
        self._checked_at = now
        config = self._config()
        running = set(self._running_logs())
        ended = (self._watched - running) | set(self._settled_logs())
        self._watched = running
        if config.log_max_mb <= 0:
            return
        cap = max(1, int(config.log_max_mb * BYTES_PER_MIB))
        # a log a lock kept from rotating is looked at again, its attempt ended or not
        for path in running | ended | set(self._locked_since):
            locked_since = self._locked_since.get(path)
            despite_lock = locked_since is not None and now - locked_since >= LOCK_OVERRIDE_S
            try:
                rotated = joblog.rotate(path, cap, config.log_keep, despite_lock)
                self._failing.discard(path)
                if rotated and path not in self._linked and (count := joblog.names(path)) > 1:
                    self._linked.add(path)  # said once: a cap its owner's hard link cannot lift
                    log.warning(
                        "%s has %d names (its owner linked it): capped in place", path, count
                    )
                if not rotated and joblog.over_cap(path, cap):  # a lock kept it from rotating
                    self._locked_since.setdefault(path, now)
                else:
                    self._locked_since.pop(path, None)
            except OSError as exc:
                self._locked_since.pop(path, None)
                if path not in self._failing:  # a full disk: say so once, try again next time
                    log.warning("could not rotate %s: %s", path, exc)
                    self._failing.add(path)
        self._failing &= running
        self._linked &= running

    def _rotate_engine_log(self) -> None:
        assert self.engine_log is not None
        try:
            joblog.rotate(self.engine_log, ENGINE_LOG_MAX_MIB * BYTES_PER_MIB, ENGINE_LOG_KEEP)
        except OSError as exc:  # a full disk: the next look tries again
            log.warning("could not rotate %s: %s", self.engine_log, exc)
