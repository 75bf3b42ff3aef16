"""The engine's sampling thread: reads the station at a fixed interval and hands each raw sample
to the engine's loop, which owns everything else (the store, the sockets, the usage ledger).

Reading the hardware happens here so that a slow or hung NVML call delays a sample, never a
reply to a client or a job starting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from gpudesk.hw.telemetry.monitor import Monitor, RawSample, TrackedAttempt

log = logging.getLogger("gpudesk.telemetry")


class SamplerThread(threading.Thread):
    def __init__(
        self,
        monitor: Monitor,
        interval: float,
        attempts: Callable[[], Sequence[TrackedAttempt]],
        deliver: Callable[[RawSample], None],
    ) -> None:
        super().__init__(name="gpudesk-sampler", daemon=True)
        self.monitor = monitor
        self.interval = interval
        self.attempts = attempts
        self.deliver = deliver
        self._stop_event = threading.Event()

    def run(self) -> None:
        next_at = time.monotonic()
        while not self._stop_event.is_set():
            try:
                self.deliver(self.monitor.collect(self.attempts()))
            except Exception:  # the sampler never dies; the next interval tries again
                log.exception("sampling the station failed")
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:  # fell behind (a slow read): skip, don't burst
                next_at = now + self.interval
            self._stop_event.wait(next_at - now)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)
