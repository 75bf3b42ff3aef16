"""Keeping running jobs' logs under `[station] log_max_mb`.

Every CHECK_EVERY_S the engine looks at the size of each running attempt's output.log and
rotates the ones over the cap (gpudesk.joblog.rotate, copy-truncate). Every attempt that
settled since the last look gets one last check, so its final log is capped too, including one
that started and ended between two looks (`settled_logs`). A log grows by what its job writes
between two looks beyond the cap (the slack), so disk use per attempt stays under about
cap × (log_keep + 1) + what the job writes in CHECK_EVERY_S.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from gpudesk import joblog
from gpudesk.engine.station import StationConfig
from gpudesk.units import BYTES_PER_MIB

log = logging.getLogger("gpudesk.engine")

CHECK_EVERY_S = 0.5


class LogCap:
    def __init__(
        self,
        config: Callable[[], StationConfig],
        running_logs: Callable[[], Iterable[str]],
        settled_logs: Callable[[], Iterable[str]],
    ) -> None:
        self._config = config
        self._running_logs = running_logs
        self._settled_logs = settled_logs  # attempts settled since the last look (taken)
        self._watched: set[str] = set()
        self._checked_at = 0.0
        self._failing: set[str] = set()  # logs whose last rotation failed (warned once)

    def poll_timeout(self, timeout: float) -> float:
        """`timeout` shortened so that running attempts' logs are looked at in time."""
        if self._watched and self._config().log_max_mb > 0:
            due_in = self._checked_at + CHECK_EVERY_S - time.monotonic()
            return min(timeout, max(0.0, due_in))
        return timeout

    def check(self) -> None:
        now = time.monotonic()
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
        for path in running | ended:
            try:
                joblog.rotate(path, cap, config.log_keep)
                self._failing.discard(path)
            except OSError as exc:
                if path not in self._failing:  # a full disk: say so once, try again next time
                    log.warning("could not rotate %s: %s", path, exc)
                    self._failing.add(path)
        self._failing &= running
