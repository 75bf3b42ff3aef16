"""Where the desk's data comes from: one `Feed` read by one worker thread.

`EngineFeed` follows the engine through `gpudesk.api.Client`: it listens on the engine's event
socket (job changes and every telemetry sample) and asks for the job table and the station
status when something changed, at most once per refresh interval. `ReplayFeed` plays frames
recorded from a real engine back (tests/desk/record_replay.py), for stable snapshots and demos.
Screens never read a feed: the app's worker turns each frame into a `DeskState` and posts it to
them as a message. Actions and detail reads go through the feed's typed methods.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gpudesk.api import (
    ActionOutcome,
    Client,
    DamagedJob,
    EngineError,
    EventStream,
    HistoryPoint,
    JobDetail,
    JobList,
    JobStateName,
    JobView,
    MigApplyResult,
    MigPlanResult,
    Snapshot,
    StationStatus,
    TelemetryEvent,
    TelemetryResult,
    WireModel,
)
from gpudesk.api.client import JobRef, decode, one_view_per_job
from gpudesk.api.errors import EVENTS_MISSED
from gpudesk.api.models import DrainResult
from gpudesk.paths import Home
from gpudesk.render import file_end
from gpudesk.text import printable

LOG_TAIL_BYTES = 4096
PROGRESS = re.compile(r"\bepoch[ =]?(\d+)\s*/\s*(\d+)", re.IGNORECASE)
TELEMETRY_HISTORY_POINTS = 120
JOBS_REFRESH_INTERVALS = 5  # the job table is re-read on a job event, else this often
# The desk's live window (docs/reliability.md, "Listings of the whole store"): every running
# job, the first waiting ones, and the newest finished ones, each read at every refresh;
# older finished jobs a page at a time when the user asks (`older_finished`). Assumptions,
# each a screenful or a few: a station with more waiting jobs than this shows the queue's
# head and says how many more wait.
WAITING_SHOWN = 500
FINISHED_SHOWN = 100  # one page of the engine's (JOBS_PAGE_CAP)
FINISHED: tuple[JobStateName, ...] = ("succeeded", "failed", "cancelled")

Progress = dict[int, tuple[int, int]]  # job id -> (epoch, of), from the job's log
Result = TypeVar("Result")


@dataclass(frozen=True)
class Frame:
    """One view of the engine: its status, the job table and the latest telemetry sample."""

    status: StationStatus
    jobs: list[JobView]
    telemetry: Snapshot | None  # None before the engine's first sample
    energy_today_j: dict[int, float] = field(default_factory=dict)  # GPU index -> joules
    history: list[HistoryPoint] = field(default_factory=list)  # earlier samples, oldest first
    progress: Progress = field(default_factory=dict)
    taken_at: float = 0.0
    # Job rows the engine could not read (left out of `jobs`), and what the live window left
    # out ("1,200 more waiting", "older finished jobs: press m"), for the desk to say.
    damaged: list[DamagedJob] = field(default_factory=list)
    left_out: str | None = None


class Feed(Protocol):
    """What the desk reads from and acts through. Every method but `next_frame` may be called
    from any thread; each raises `EngineError` when the engine refuses or cannot answer."""

    readonly_reason: str | None  # why actions are impossible, else None

    def next_frame(self, timeout: float) -> Frame | None:
        """The next frame once something changed (None when nothing did within `timeout`)."""

    def show(self, job_id: int) -> JobDetail: ...

    def older_finished(self) -> int:
        """Add the next page of older finished jobs to the frames to come; how many."""

    def log_tail(self, job_id: int, path: str | None, lines: int) -> list[str]: ...

    def cancel(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]: ...

    def hold(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]: ...

    def release(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]: ...

    def requeue(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]: ...

    def suspend(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]: ...

    def resume(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]: ...

    def drain(self, reason: str | None) -> DrainResult: ...

    def undrain(self) -> DrainResult: ...

    def move_priority(self, job_ids: Sequence[JobRef], delta: int) -> list[ActionOutcome]:
        """Raise (+1) or lower (-1) the jobs' priority."""

    def edit(self, job_id: int, fields: Mapping[str, Any]) -> list[ActionOutcome]:
        """Edit a job that has not started (`gpudesk edit`): its one outcome, what changed."""

    def mig_plan(self) -> MigPlanResult:
        """The MIG layout the queue would want, on every MIG-capable GPU."""

    def job_counts(self, *, busy_s: float, answer_s: float) -> dict[str, int]:
        """How many jobs are in each state now (the desk's closing line), asked at once: an
        EngineError where another request holds the connection for more than `busy_s`, or
        the engine does not answer within `answer_s`."""

    def mig_apply(self, gpu: int, profiles: Sequence[str]) -> MigApplyResult:
        """Repartition `gpu` (the desk asked the user first)."""

    def connect(self) -> Client:
        """A client of its own for a worker thread (the submit workflow waits on pre-passes
        there); raises EngineError where there is no engine to submit to."""

    def close(self) -> None: ...


def read_progress(log: str | None) -> tuple[int, int] | None:
    """The last `epoch E/N` a job printed, from the end of its log (the convention the built-in
    workloads follow; other jobs simply show no progress)."""
    found = PROGRESS.findall(file_end(log, LOG_TAIL_BYTES))
    if not found:
        return None
    epoch, total = found[-1]
    return int(epoch), int(total)


LOG_PANE_BYTES = 64 * 1024


def read_log_tail(path: str | None, lines: int = 200) -> list[str]:
    """The last `lines` lines of a job's log, its control characters spelled out (a job's
    escape sequences never reach the desk's terminal: gpudesk.text.printable)."""
    return [printable(line) for line in file_end(path, LOG_PANE_BYTES).splitlines()[-lines:]]


def _readable(path: str | None) -> bool:
    """Can this process read the log itself? Not another user's on a system engine (an admin's
    desk): the engine serves that one."""
    return path is None or os.access(path, os.R_OK) or not os.path.exists(path)


class EngineFeed:
    """Follows a running engine (started by the caller when needed)."""

    readonly_reason: str | None = None

    def __init__(self, home: Home, interval: float = 1.0) -> None:
        self.home = home
        self.interval = interval
        self.client = Client.attach(home, timeout=10.0)
        # Actions and detail reads come from other threads than `next_frame`'s: a client of
        # their own (a connection carries one request at a time), one request at a time.
        self.actions = Client.attach(home, timeout=10.0)
        self._actions_lock = threading.Lock()
        self._events: EventStream | None = None
        self._events_cm: AbstractContextManager[EventStream] | None = None
        self._telemetry: Snapshot | None = None
        self._history: list[HistoryPoint] = []
        self._first = True
        self._jobs_stale = True
        self._jobs: list[JobView] = []
        self._damaged: list[DamagedJob] = []
        self._left_out: str | None = None
        # older finished jobs the user asked for (their figures are final: read once), and
        # whether there are more before them
        self._older: list[JobView] = []
        self._finished_more = False
        self._finished_cursor: int | None = None  # where the next older page starts
        self._older_lock = threading.Lock()
        self._energy_today: dict[int, float] = {}
        self._jobs_at = 0.0
        self._last_frame_at = 0.0
        self._ahead: threading.Thread | None = None  # reading the first frame (read_ahead)
        self._ahead_result: Frame | Exception | None = None

    def read_ahead(self) -> None:
        """Start reading the first frame now, on a thread of its own, so that the engine's
        answers arrive while the desk is still loading Textual; the first `next_frame` takes
        it. (A daemon thread: a desk closed meanwhile does not wait for it.)"""
        if self._first and self._ahead is None:
            self._ahead = threading.Thread(
                target=self._read_ahead, name="gpudesk-desk-first-frame", daemon=True
            )
            self._ahead.start()

    def _read_ahead(self) -> None:
        try:
            self._ahead_result = self._first_frame()
        except Exception as exc:  # handed to next_frame's caller, as if read there
            self._ahead_result = exc

    def _subscribe(self) -> EventStream:
        if self._events is None:
            self._events_cm = self.client.events()
            self._events = self._events_cm.__enter__()
        return self._events

    def _first_frame(self) -> Frame:
        self._subscribe()
        reply = self.client.telemetry(history=TELEMETRY_HISTORY_POINTS)
        self._telemetry, self._history = reply.snapshot, reply.history
        self._energy_today = reply.energy_today_j
        frame = self._frame(with_history=True, energy_read=True)
        self._first = False
        return frame

    def next_frame(self, timeout: float) -> Frame | None:
        if self._ahead is not None:
            self._ahead.join()
            ahead, self._ahead, self._ahead_result = self._ahead_result, None, None
            if isinstance(ahead, Exception):
                raise ahead
            if ahead is not None:
                return ahead
        if self._first:
            return self._first_frame()
        events = self._subscribe()
        deadline = time.monotonic() + timeout
        changed = False
        try:
            while True:
                wait = deadline - time.monotonic()
                if wait <= 0 or not events.wait(wait):
                    break
                for event in events.drain():
                    if isinstance(event, TelemetryEvent):
                        self._telemetry = event
                    else:
                        self._jobs_stale = True
                    changed = True
                # Gather what else arrives in this refresh interval into one frame.
                if time.monotonic() - self._last_frame_at >= self.interval:
                    break
        except EngineError as exc:
            if exc.code != EVENTS_MISSED:
                # The engine stopped: its stream is over. Once it answers again (restarted),
                # the desk follows it anew and reads its state, not the dead stream for ever.
                self._unsubscribe()
                self._jobs_stale = True
                raise
            # The desk fell behind (a suspended terminal): follow anew and read the state.
            self.close()
            self._subscribe()
            self._jobs_stale = changed = True
        if not changed and time.monotonic() - self._last_frame_at < 5 * self.interval:
            return None
        return self._frame()

    def _frame(self, with_history: bool = False, energy_read: bool = False) -> Frame:
        status = self.client.status()
        now = time.monotonic()
        if self._jobs_stale or now - self._jobs_at >= JOBS_REFRESH_INTERVALS * self.interval:
            # usage and energy move while jobs run even when no job changes state
            self._read_live_window()
            if not energy_read:
                self._energy_today = self.client.telemetry().energy_today_j
            self._jobs_stale, self._jobs_at = False, now
        progress = {}
        for job in self._jobs:
            if job.state == "running" and (found := read_progress(job.log)):
                progress[job.id] = found
        self._last_frame_at = time.monotonic()
        return Frame(
            status=status,
            jobs=self._jobs,
            telemetry=self._telemetry,
            energy_today_j=self._energy_today,
            history=self._history if with_history else [],
            progress=progress,
            taken_at=time.time(),
            damaged=self._damaged,
            left_out=self._left_out,
        )

    def _read_live_window(self) -> None:
        """Every running job, the first WAITING_SHOWN waiting ones and the newest
        FINISHED_SHOWN finished ones (with the older ones the user asked for): a handful of
        page requests, whatever the store holds, never the whole store. The states are read
        in the order jobs pass through them, so a job that moves on between two requests is
        never missed, and it is shown once, as the later request saw it."""
        client = self.client
        waiting: list[JobView] = []
        damaged: list[DamagedJob] = []
        after = 0  # oldest first: the queue's head (a `limit` alone would be the newest)
        more_waiting, total_waiting = False, 0
        while len(waiting) < WAITING_SHOWN:
            page = client.jobs_page(
                states=["queued"],
                after_id=after,
                limit=WAITING_SHOWN - len(waiting),
                usage=True,
                count=after == 0,
            )
            waiting += page.jobs
            damaged += page.damaged
            if page.total is not None:
                total_waiting = page.total
            more_waiting = page.more
            if not page.more or page.after_id is None:
                break
            after = page.after_id
        running = client.job_listing(states=["running"], usage=True)
        damaged += running.damaged
        finished = client.jobs_page(states=list(FINISHED), limit=FINISHED_SHOWN, usage=True)
        damaged += finished.damaged
        with self._older_lock:
            older = [j for j in self._older if not finished.jobs or j.id < finished.jobs[0].id]
            if not self._older:
                self._finished_more = finished.more
            self._finished_cursor = (
                older[0].id if older else finished.before_id if finished.more else None
            )
        notes = []
        if more_waiting:
            notes.append(f"{total_waiting - len(waiting):,} more waiting jobs not shown")
        if self._finished_more:
            notes.append("older finished jobs: press b to load more")
        self._jobs = one_view_per_job(older, waiting, running.jobs, finished.jobs)
        self._damaged, self._left_out = damaged, "; ".join(notes) or None

    def older_finished(self) -> int:
        """The next page of older finished jobs, kept for the frames to come; how many."""
        with self._older_lock:
            cursor = self._finished_cursor
        if cursor is None:
            return 0
        page = self._act(
            lambda client: client.jobs_page(
                states=list(FINISHED), before_id=cursor, limit=FINISHED_SHOWN, usage=True
            )
        )
        with self._older_lock:
            self._older = sorted([*page.jobs, *self._older], key=lambda j: j.id)
            self._finished_more = page.more
            self._finished_cursor = page.before_id if page.more else None
        self._jobs_stale = True
        return len(page.jobs)

    def _act(self, request: Callable[[Client], Result]) -> Result:
        with self._actions_lock:
            return request(self.actions)

    def _act_now(
        self, request: Callable[[Client], Result], busy_s: float, answer_s: float
    ) -> Result:
        """`_act` for a request that must not wait: not behind another one (a MIG
        repartition, a page of older jobs) for more than `busy_s`, nor on the answer for more
        than `answer_s` (a request that times out closes its connection; the next reopens it)."""
        if not self._actions_lock.acquire(timeout=busy_s):
            raise EngineError("the connection to the engine is busy with another request")
        timeout = self.actions.timeout
        try:
            self.actions.timeout = answer_s
            return request(self.actions)
        finally:
            self.actions.timeout = timeout
            self._actions_lock.release()

    def show(self, job_id: int) -> JobDetail:
        return self._act(lambda client: client.show(job_id))

    def log_tail(self, job_id: int, path: str | None, lines: int) -> list[str]:
        """The end of a job's log: read here when this user may, else through the engine."""
        if _readable(path):
            return read_log_tail(path, lines)

        def through_engine(client: Client) -> bytes:
            end = client.log(job_id, max_bytes=0).end
            return client.log(job_id, offset=max(0, end - LOG_PANE_BYTES)).data

        try:
            data = self._act(through_engine)
        except EngineError:
            return []
        text = data.decode("utf-8", "backslashreplace")  # \xff, as `gpudesk logs` spells it
        return [printable(line) for line in text.splitlines()[-lines:]]

    def cancel(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act(lambda client: client.cancel(job_ids))

    def hold(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act(lambda client: client.hold(job_ids))

    def release(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act(lambda client: client.release(job_ids))

    def requeue(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act(lambda client: client.requeue(job_ids))

    def suspend(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act(lambda client: client.suspend(job_ids))

    def resume(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        return self._act(lambda client: client.resume(job_ids))

    def drain(self, reason: str | None) -> DrainResult:
        return self._act(lambda client: client.drain(reason))

    def undrain(self) -> DrainResult:
        return self._act(lambda client: client.undrain())

    def move_priority(self, job_ids: Sequence[JobRef], delta: int) -> list[ActionOutcome]:
        return self._act(lambda client: client.set_priority(job_ids, delta=delta))

    def edit(self, job_id: int, fields: Mapping[str, Any]) -> list[ActionOutcome]:
        edited = self._act(lambda client: client.edit_job(job_id, fields))
        said = "edited: " + "; ".join(edited.changes) if edited.changes else "nothing to change"
        return [ActionOutcome(id=edited.id, name=edited.name, outcome=said, ok=True)]

    def mig_plan(self) -> MigPlanResult:
        return self._act(lambda client: client.mig_plan())

    def job_counts(self, *, busy_s: float, answer_s: float) -> dict[str, int]:
        return dict(self._act_now(lambda client: client.status(), busy_s, answer_s).counts)

    def mig_apply(self, gpu: int, profiles: Sequence[str]) -> MigApplyResult:
        return self._act(lambda client: client.mig_apply(gpu, profiles, confirm=True))

    def connect(self) -> Client:
        return Client.attach(self.home, timeout=10.0)

    def _unsubscribe(self) -> None:
        if self._events_cm is not None:
            self._events_cm.__exit__(None, None, None)
            self._events_cm = self._events = None

    def close(self) -> None:
        self._unsubscribe()
        self.client.close()
        self.actions.close()


Model = TypeVar("Model", bound=WireModel)


def _decoded(model: type[Model], data: Any, what: str) -> Model:
    """Recorded JSON decoded as strictly as the engine's replies are (`gpudesk.api.client`)."""
    return decode(model, json.dumps(data).encode(), what)


class BadRecording(ValueError):
    """A replay file that cannot be read or is no recording: one sentence naming it."""


def load_recording(path: Path) -> tuple[list[Frame], dict[int, JobDetail], MigPlanResult | None]:
    """The frames, job details and MIG plan of a recording (tests/desk/record_replay.py writes
    them; its docstring describes the file). A frame that leaves out the status or the jobs
    reuses the previous frame's, as `EngineFeed` does between reads."""
    data = json.loads(path.read_text())
    frames: list[Frame] = []
    status: StationStatus | None = None
    jobs: list[JobView] | None = None
    telemetry: Snapshot | None = None
    energy_today: dict[int, float] = {}
    progress: Progress = {}
    for number, raw in enumerate(data["frames"]):
        where = f"{path.name} frame {number}"
        history: list[HistoryPoint] = []
        if "status" in raw:
            status = _decoded(StationStatus, raw["status"], f"{where} status")
        if "jobs" in raw:
            jobs = _decoded(JobList, raw["jobs"], f"{where} jobs").jobs
            progress = {int(k): (int(v[0]), int(v[1])) for k, v in raw["progress"].items()}
        if "telemetry" in raw:
            reply = _decoded(TelemetryResult, raw["telemetry"], f"{where} telemetry")
            telemetry, history, energy_today = reply.snapshot, reply.history, reply.energy_today_j
        if "event" in raw:
            telemetry = _decoded(TelemetryEvent, raw["event"], f"{where} telemetry event")
        if status is None or jobs is None:
            raise ValueError(f"{where}: the first frame needs the status and the jobs")
        frames.append(
            Frame(status, jobs, telemetry, energy_today, history, progress, float(raw["taken_at"]))
        )
    details = data.get("details") or {}
    shows = {
        int(key.removeprefix("show:")): _decoded(JobDetail, value, f"{path.name} {key}")
        for key, value in details.items()
        if key.startswith("show:")
    }
    plan = details.get("mig_plan")
    return frames, shows, None if plan is None else _decoded(MigPlanResult, plan, "mig_plan")


class ReplayFeed:
    """Plays back recorded frames, one per call, then keeps the last; the recorded `show` and
    `mig_plan` replies answer those reads; actions are refused. Used for snapshot tests and
    offline demos."""

    def __init__(
        self,
        frames: Sequence[Frame],
        shows: Mapping[int, JobDetail] | None = None,
        plan: MigPlanResult | None = None,
        readonly_reason: str | None = "a recorded replay",
    ) -> None:
        if not frames:
            raise ValueError("a replay needs at least one frame")
        self.frames = list(frames)
        self.shows = dict(shows or {})
        self.plan = plan
        self.readonly_reason = readonly_reason
        self.position = 0

    @classmethod
    def load(cls, path: Path, readonly_reason: str | None = "a recorded replay") -> ReplayFeed:
        """Raises BadRecording, one sentence, for a file that cannot be read or is no
        recording (`desk --replay` of any JSON, or of `[[[[…` nested past the stack, raised a
        traceback)."""
        try:
            frames, shows, plan = load_recording(path)
            return cls(frames, shows, plan, readonly_reason)
        except OSError as exc:
            raise BadRecording(f"cannot read {path}: {exc.strerror or exc}") from None
        except (
            ValueError,
            RecursionError,
            KeyError,
            TypeError,
            AttributeError,
            EngineError,
        ) as exc:
            why = "it is nested too deeply to read" if isinstance(exc, RecursionError) else exc
            raise BadRecording(f"{path} is not a recording of the desk: {why}") from None

    def next_frame(self, timeout: float) -> Frame | None:
        if self.position >= len(self.frames):
            time.sleep(min(timeout, 0.05))
            return None
        frame = self.frames[self.position]
        self.position += 1
        return frame

    def _not_recorded(self, what: str) -> EngineError:
        return EngineError(f"{what} is not available in a recorded replay")

    def log_tail(self, job_id: int, path: str | None, lines: int) -> list[str]:
        return read_log_tail(path, lines)

    def older_finished(self) -> int:
        raise self._not_recorded("older finished jobs")

    def show(self, job_id: int) -> JobDetail:
        if job_id in self.shows:
            return self.shows[job_id]
        raise self._not_recorded(f"show {job_id}")

    def mig_plan(self) -> MigPlanResult:
        if self.plan is None:
            raise self._not_recorded("mig_plan")
        return self.plan

    def job_counts(self, *, busy_s: float, answer_s: float) -> dict[str, int]:
        raise self._not_recorded("the engine's job counts now")

    def cancel(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        raise self._not_recorded("cancel")

    def hold(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        raise self._not_recorded("hold")

    def release(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        raise self._not_recorded("release")

    def requeue(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        raise self._not_recorded("requeue")

    def suspend(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        raise self._not_recorded("suspend")

    def resume(self, job_ids: Sequence[JobRef]) -> list[ActionOutcome]:
        raise self._not_recorded("resume")

    def drain(self, reason: str | None) -> DrainResult:
        raise self._not_recorded("drain")

    def undrain(self) -> DrainResult:
        raise self._not_recorded("undrain")

    def move_priority(self, job_ids: Sequence[JobRef], delta: int) -> list[ActionOutcome]:
        raise self._not_recorded("priority")

    def edit(self, job_id: int, fields: Mapping[str, Any]) -> list[ActionOutcome]:
        raise self._not_recorded("edit")

    def mig_apply(self, gpu: int, profiles: Sequence[str]) -> MigApplyResult:
        raise self._not_recorded("mig_apply")

    def connect(self) -> Client:
        raise self._not_recorded("submitting")

    def close(self) -> None:
        pass
