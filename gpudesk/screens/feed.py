"""Where the desk's data comes from: one `Feed` read by one worker thread.

`EngineFeed` follows the engine: it listens on the engine's event socket (job changes and every
telemetry sample) and asks for the job table and the station status when something changed, at
most once per refresh interval. `ReplayFeed` plays recorded frames back, for stable snapshots and
demos. Screens never talk to a feed: the app's worker turns each frame into a `DeskState` and
posts it to them as a message.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpudesk.paths import Home
from gpudesk.render import file_end

LOG_TAIL_BYTES = 4096
PROGRESS = re.compile(r"\bepoch[ =]?(\d+)\s*/\s*(\d+)", re.IGNORECASE)
TELEMETRY_HISTORY_POINTS = 120
JOBS_REFRESH_INTERVALS = 5  # the job table is re-read on a job event, else this often


@dataclass(frozen=True)
class Frame:
    """One view of the engine: its status, the job table and the latest telemetry sample."""

    status: dict[str, Any]
    jobs: list[dict[str, Any]]
    telemetry: dict[str, Any] | None
    energy_today_j: dict[int, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  # earlier samples, oldest first
    progress: dict[int, tuple[int, int]] = field(default_factory=dict)  # job id -> (epoch, of)
    taken_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "jobs": self.jobs,
            "telemetry": self.telemetry,
            "energy_today_j": {str(k): v for k, v in self.energy_today_j.items()},
            "history": self.history,
            "progress": {str(k): list(v) for k, v in self.progress.items()},
            "taken_at": self.taken_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Frame:
        return cls(
            status=data["status"],
            jobs=data["jobs"],
            telemetry=data.get("telemetry"),
            energy_today_j={
                int(k): float(v) for k, v in (data.get("energy_today_j") or {}).items()
            },
            history=data.get("history") or [],
            progress={
                int(k): (int(v[0]), int(v[1])) for k, v in (data.get("progress") or {}).items()
            },
            taken_at=float(data.get("taken_at") or 0.0),
        )


class Feed(Protocol):
    """What the desk reads from and acts through."""

    readonly_reason: str | None  # why actions are impossible, else None

    def next_frame(self, timeout: float) -> Frame | None:
        """The next frame once something changed (None when nothing did within `timeout`)."""

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        """One engine request (an action, or a read such as `show`)."""

    def close(self) -> None: ...


def read_progress(log: str | None) -> tuple[int, int] | None:
    """The last `epoch E/N` a job printed, from the end of its log (the convention the built-in
    workloads follow; other jobs simply show no progress)."""
    found = PROGRESS.findall(file_end(log, LOG_TAIL_BYTES))
    if not found:
        return None
    epoch, total = found[-1]
    return int(epoch), int(total)


def read_log_tail(path: str | None, lines: int = 200) -> list[str]:
    return file_end(path, 64 * 1024).splitlines()[-lines:]


class EngineFeed:
    """Follows a running engine (started by the caller when needed)."""

    readonly_reason: str | None = None

    def __init__(self, home: Home, interval: float = 1.0) -> None:
        from gpudesk.engine.client import EngineClient

        self.home = home
        self.interval = interval
        self.client = EngineClient(home, timeout=10.0)
        self.actions = EngineClient(home, timeout=10.0)
        self._actions_lock = threading.Lock()
        self._events: Any = None
        self._events_cm: Any = None
        self._telemetry: dict[str, Any] | None = None
        self._history: list[dict[str, Any]] = []
        self._first = True
        self._jobs_stale = True
        self._jobs: list[dict[str, Any]] = []
        self._energy_today: dict[int, float] = {}
        self._jobs_at = 0.0
        self._last_frame_at = 0.0

    def _subscribe(self) -> Any:
        if self._events is None:
            self._events_cm = self.client.subscribe()
            self._events = self._events_cm.__enter__()
        return self._events

    def next_frame(self, timeout: float) -> Frame | None:
        import zmq

        from gpudesk.engine import protocol

        events = self._subscribe()
        if self._first:
            reply = self.client.request("telemetry", history=TELEMETRY_HISTORY_POINTS)
            self._telemetry = reply.get("snapshot")
            self._history = reply.get("history") or []
            self._first = False
            return self._frame(with_history=True)
        deadline = time.monotonic() + timeout
        changed = False
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                break
            if not events.poll(int(wait * 1000)):
                break
            while events.poll(0):
                topic, payload = protocol.decode_event(events.recv_multipart(zmq.NOBLOCK))
                if topic == "telemetry":
                    self._telemetry = payload
                else:
                    self._jobs_stale = True
                changed = True
            # Gather what else arrives in this refresh interval into one frame.
            if time.monotonic() - self._last_frame_at >= self.interval:
                break
        if not changed and time.monotonic() - self._last_frame_at < 5 * self.interval:
            return None
        return self._frame()

    def _frame(self, with_history: bool = False) -> Frame:
        status = self.client.request("status")
        now = time.monotonic()
        if self._jobs_stale or now - self._jobs_at >= JOBS_REFRESH_INTERVALS * self.interval:
            # usage and energy move while jobs run even when no job changes state
            self._jobs = self.client.request("jobs", usage=True)["jobs"]
            today = self.client.request("telemetry").get("energy_today_j") or {}
            self._energy_today = {int(k): float(v) for k, v in today.items() if v is not None}
            self._jobs_stale, self._jobs_at = False, now
        jobs = self._jobs
        energy_today = self._energy_today
        telemetry = self._telemetry
        progress = {}
        for job in jobs:
            if job["state"] == "running":
                found = read_progress(job.get("log"))
                if found:
                    progress[job["id"]] = found
        self._last_frame_at = time.monotonic()
        return Frame(
            status=status,
            jobs=jobs,
            telemetry=telemetry,
            energy_today_j=energy_today,
            history=self._history if with_history else [],
            progress=progress,
            taken_at=time.time(),
        )

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        # Actions and detail reads come from other threads than `next_frame`'s: a socket of
        # their own (zmq sockets are not thread-safe), one request at a time.
        with self._actions_lock:
            return self.actions.request(op, **args)

    def close(self) -> None:
        if self._events_cm is not None:
            self._events_cm.__exit__(None, None, None)
            self._events_cm = self._events = None
        self.client.close()
        self.actions.close()


class ReplayFeed:
    """Plays back recorded frames (a JSON list of `Frame.to_dict()`), one per call, then keeps
    the last; actions are refused. Used for snapshot tests and offline demos."""

    def __init__(
        self,
        frames: Sequence[Frame],
        details: dict[str, Any] | None = None,
        readonly_reason: str | None = "a recorded replay",
    ) -> None:
        if not frames:
            raise ValueError("a replay needs at least one frame")
        self.frames = list(frames)
        self.details = details or {}  # read replies by request key (see `request`)
        self.readonly_reason = readonly_reason
        self.position = 0

    @classmethod
    def load(cls, path: Path) -> ReplayFeed:
        data = json.loads(path.read_text())
        return cls([Frame.from_dict(f) for f in data["frames"]], data.get("details"))

    def next_frame(self, timeout: float) -> Frame | None:
        if self.position >= len(self.frames):
            time.sleep(min(timeout, 0.05))
            return None
        frame = self.frames[self.position]
        self.position += 1
        return frame

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        """A recorded reply: `show` by "show:JOB", anything else by its op name."""
        key = f"{op}:{args['job']}" if "job" in args else op
        if key in self.details:
            return self.details[key]
        from gpudesk.engine.protocol import EngineError

        raise EngineError(f"{op} is not available in a recorded replay")

    def close(self) -> None:
        pass
