"""A job, an attempt, an event and an attempt's use of the station, as records: what the
store keeps, the scheduler decides on and the simulator replays (the store reads them from its
rows: gpudesk.engine.store.records); and a job's telemetry series as `show` sends them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.wire.jobs import AttemptView, EventView, JobSeriesView, PlacementView


class UsageSpan(msgspec.Struct, frozen=True):
    """One attempt's use of the station, as fair share weighs it (placement.fairshare)."""

    uid: int  # its job's owner
    started_at: float
    ended_at: float | None  # None: still running
    gpus: int  # GPUs it held (whole, shared or a MIG slice: each counts as one)
    cpu_s: float  # CPU seconds its processes used (as last stored)
    attempt_id: int = 0  # 0: not an attempt of the store (a span made up, as in a simulation)


class JobRecord(msgspec.Struct, frozen=True):
    id: int
    spec: JobSpec
    state: JobState
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    attempts: int
    exit_code: int | None
    reason: str | None
    cancel_requested: bool
    kill_deadline: float | None = None  # wall clock: when a cancel escalates to SIGKILL
    demand: dict[str, Any] | None = None  # raised after an out-of-memory death
    held: bool = False  # a queued job the placement policy must not start until released
    # held by the client sending its submission in parts, not by its user: the client
    # releases it once the last part is in (gpudesk.api.submit_parts)
    held_in_parts: bool = False
    attempts_before_requeue: int = 0  # attempts made before the user last requeued it
    owner: Identity = msgspec.field(default_factory=Identity.of_process)  # whom it runs as
    # attempts since the last requeue that ended preempted (docs/preemption.md): not counted
    # against max_attempts
    preemptions: int = 0
    # when its running attempt was suspended (`gpudesk suspend`; wall clock), None while not
    suspended_at: float | None = None

    @property
    def shown_state(self) -> JobState:
        """Its state as replies and events show it: `suspended` for a running job whose
        processes are stopped (the store keeps it `running`)."""
        if self.state is JobState.RUNNING and self.suspended_at is not None:
            return JobState.SUSPENDED
        return self.state

    @classmethod
    def queued(
        cls, job_id: int, spec: JobSpec, submitted_at: float, owner: Identity | None = None
    ) -> JobRecord:
        """A job just submitted: queued, never run."""
        return cls(
            job_id,
            spec,
            JobState.QUEUED,
            submitted_at,
            None,
            None,
            0,
            None,
            None,
            False,
            owner=owner or Identity.of_process(),
        )

    @property
    def user(self) -> str:
        """The owner's user name (the uid as text when the system has none for it)."""
        return self.owner.name

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def attempts_since_requeue(self) -> int:
        """The attempts that count against `max_attempts` (all of them if never requeued),
        preempted ones left out."""
        return self.attempts - self.attempts_before_requeue - self.preemptions


class AttemptRecord(msgspec.Struct, frozen=True):
    id: int
    job_id: int
    number: int
    state: str
    placement: dict[str, Any]
    dir: str
    pid: int | None
    pid_started: float | None
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    reason: str | None
    # its start on CLOCK_BOOTTIME and that boot's id (hw/boottime.py); None before schema 10
    started_boottime: float | None = None
    boot_id: str | None = None
    preempted_for: int | None = None  # it gave way to that job (docs/preemption.md)
    # suspension (`gpudesk suspend`): seconds it spent suspended before its current
    # suspension, and when that began on CLOCK_BOOTTIME (None: not suspended now); its time
    # limit does not count them
    suspended_s: float = 0.0
    suspended_boottime: float | None = None

    @property
    def log_path(self) -> str:
        return str(Path(self.dir) / "output.log")

    def view(self, containment: str | None = None) -> AttemptView:
        """The attempt on the wire; its placement is the store's JSON, checked into its type."""
        return AttemptView(
            number=self.number,
            # the store keeps a preempted attempt's state as it ended (schema 14)
            state="preempted" if self.preempted_for is not None else self.state,
            placement=msgspec.convert(self.placement, PlacementView),
            pid=self.pid,
            started_at=self.started_at,
            ended_at=self.ended_at,
            exit_code=self.exit_code,
            signal=self.signal,
            reason=self.reason,
            log=self.log_path,
            containment=containment,
            suspended_s=self.suspended_s,
        )


class EventRecord(msgspec.Struct, frozen=True):
    id: int
    ts: float
    job_id: int | None
    attempt: int | None
    kind: str
    state: str | None
    message: str

    def view(self) -> EventView:
        return EventView(
            id=self.id,
            ts=self.ts,
            job_id=self.job_id,
            attempt=self.attempt,
            kind=self.kind,
            state=self.state,
            message=self.message,
        )


class JobSeries(msgspec.Struct, frozen=True):
    """A job's telemetry over its life (`show` with `series`): per metric, (time, value) oldest
    first; each stored point the mean of the window of `window_s` that ended at its time. A
    job's latest window, not stored yet, is its last point, stamped with the time it was read."""

    window_s: float
    simulated: bool  # the job's GPUs were simulated
    points: dict[str, list[tuple[float, float]]]

    def view(self) -> JobSeriesView:
        return JobSeriesView(
            window_s=self.window_s,
            simulated=self.simulated,
            **{
                metric: [(round(t, 3), round(v, 3)) for t, v in points]
                for metric, points in self.points.items()
            },
        )
