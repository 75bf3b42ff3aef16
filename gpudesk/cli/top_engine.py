"""What `gpudesk top` asks of the engine: its state (`EngineSummary`), its latest sample
(`engine_view`), and, while top samples the station itself, whether an engine answers again
(`EngineProbe`).

The engine is asked through `gpudesk.api.Client`, imported only when an engine runs: without
one, top loads no msgspec.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpudesk.api.connection import engine_pid
from gpudesk.api.errors import EngineError
from gpudesk.paths import Home, HomeError

if TYPE_CHECKING:
    from gpudesk.api.models import Snapshot

FIRST_SAMPLE_WAIT_S = 3.0  # an engine that just started has no sample yet
ASK_TIMEOUT_S = 2.0  # an engine that holds a request longer is not answering
RETRY_S = 2.0  # while top samples directly, how often it asks whether an engine answers


@dataclass(frozen=True)
class EngineSummary:
    """What top says of the engine, from its `status` (`engine` in `--json`); `error` when
    it holds its home's lock but does not answer."""

    pid: int
    error: str | None = None
    policy: str = ""
    backend: str = ""
    configured_backend: str = ""
    slots_busy: int = 0
    slots_total: int = 0
    gpus_busy: int = 0
    gpus_total: int = 0
    queued: int = 0
    running_jobs: int = 0
    drained: str | None = None  # `drained by ada since …` while the station is drained

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"running": True, "pid": self.pid, "error": self.error}
        return {
            "running": True,
            "pid": self.pid,
            "policy": self.policy,
            "backend": self.backend,
            "configured_backend": self.configured_backend,
            "slots_busy": self.slots_busy,
            "slots_total": self.slots_total,
            "gpus_busy": self.gpus_busy,
            "gpus_total": self.gpus_total,
            "queued": self.queued,
            "running_jobs": self.running_jobs,
            **({"drained": self.drained} if self.drained else {}),
        }

    def watches(self, requested: str | None) -> bool:
        """It answers, and samples the backend asked for (any, where none was named)."""
        return self.error is None and (
            requested is None or requested in (self.backend, self.configured_backend)
        )


def engine_status(home: Home) -> EngineSummary | None:
    """The engine's state; None when no engine holds the home's lock."""
    pid = engine_pid(home)
    if pid is None:
        return None
    from gpudesk.api.client import Client

    try:
        with Client.attach(home, timeout=ASK_TIMEOUT_S) as client:
            status = client.status()
    except EngineError as exc:
        return EngineSummary(pid, error=str(exc))
    station = status.station
    return EngineSummary(
        status.pid,
        policy=station.policy,
        backend=station.effective_backend,
        configured_backend=station.backend,
        slots_busy=status.slots.busy,
        slots_total=status.slots.total,
        gpus_busy=status.gpus.busy,
        gpus_total=status.gpus.total,
        queued=status.counts.get("queued", 0),
        running_jobs=status.counts.get("running", 0),
        drained=status.drain.line() if status.drain else None,
    )


def engine_view(home: Home, wait: bool) -> tuple[Snapshot | None, EngineSummary | None]:
    """The engine's latest sample as the wire carries it (the type the direct sampler gives
    too), waiting up to FIRST_SAMPLE_WAIT_S for an engine that has none yet where `wait`, and
    its state then; (None, state) when it has no sample, (None, None) when it is gone."""
    from gpudesk.api.client import Client

    deadline = time.monotonic() + (FIRST_SAMPLE_WAIT_S if wait else 0.0)
    try:
        with Client.attach(home, timeout=ASK_TIMEOUT_S) as client:
            while True:
                snapshot = client.telemetry().snapshot
                if snapshot is not None or time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
    except EngineError as exc:
        # not asked again: an engine that holds requests would hold top another 2 s
        pid = _pid_or_none(home)
        return None, None if pid is None else EngineSummary(pid, error=str(exc))
    if snapshot is None:
        return None, _status_or_none(home)
    return snapshot, _status_or_none(home)


def _pid_or_none(home: Home) -> int | None:
    try:
        return engine_pid(home)
    except (EngineError, HomeError, OSError):
        return None


def _status_or_none(home: Home) -> EngineSummary | None:
    try:
        return engine_status(home)
    except (EngineError, HomeError, OSError):
        return None


class EngineProbe:
    """Asks `home`'s engine for its state on a thread of its own, at most every RETRY_S: an
    engine that is stopped (SIGSTOP) but alive accepts a connection and then holds the request
    for ASK_TIMEOUT_S, and top's frames and keys must not wait that long each time."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._lock = threading.Lock()
        self._asking = False
        self._answer: tuple[EngineSummary | None] | None = None  # a finished probe's, unread
        self._next_at = 0.0  # monotonic: when the next probe may start

    def answer(self) -> tuple[EngineSummary | None] | None:
        """A probe's answer not read before (in a 1-tuple: its state, None when no engine
        runs), else None; starts the next probe where one is due."""
        with self._lock:
            answer, self._answer = self._answer, None
            due = not self._asking and time.monotonic() >= self._next_at
            if due:
                self._asking = True
        if due:
            threading.Thread(target=self._ask, name="top-engine-probe", daemon=True).start()
        return answer

    def _ask(self) -> None:
        state = _status_or_none(self.home)
        with self._lock:
            self._answer = (state,)
            self._asking = False
            self._next_at = time.monotonic() + RETRY_S
