"""The user's hold, release, requeue, priority and cancel of a queued job as data: what the store
writes for each job of a request, all in one transaction (gpudesk.engine.store.job_changes), and the
record each leaves (`applied`), field for field what the store reads back after it, so the
engine's queue and events need no read of each job after the write; and what each job-control
action did to a job (`JobOutcome`), which gpudesk.policy.job_changes decides."""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from gpudesk.core.jobs import JobState
from gpudesk.core.records import EventRecord, JobRecord
from gpudesk.core.wire.jobs import JobView
from gpudesk.core.wire.requests import InParts
from gpudesk.text import safe_text


def hold_event(held: bool, in_parts: InParts | None = None) -> str:
    """The event of a job held (`held`) or released: by its user, or by the client that sent
    its submission in parts (`in_parts`: gpudesk.api.submit_parts), which holds each part's
    jobs so that none starts before all are queued."""
    if in_parts is None:
        return "held by user" if held else "released by user"
    whole = f"all {in_parts.jobs:,} jobs of its submission"
    if not held:
        return f"released: {whole} are queued"
    sent = f" (sent in {in_parts.parts:,} parts)" if in_parts.parts > 1 else ""
    return f"held until {whole} are queued{sent}"


# The short codes of a held job's wait (`JobView.wait_reason`, what `gpudesk queue` shows as
# squeue's NODELIST(REASON)): held by its user (Slurm's own word), or by the client sending its
# submission in parts until the last part is in (Slurm has none: JobHeldAdmin's form)
HELD_BY_USER = "JobHeldUser"
HELD_BY_CLIENT = "JobHeldClient"


def hold_code(job: JobRecord) -> str | None:
    """A queued job's hold as its wait code, None when it is not held."""
    if not job.held:
        return None
    return HELD_BY_CLIENT if job.held_in_parts else HELD_BY_USER


# hold_event's words for a part of a submission sent in parts: its jobs, and its parts if several
_HELD_IN_PARTS = re.compile(
    r"held until all ([\d,]+) jobs of its submission are queued(?: \(sent in ([\d,]+) parts\))?"
)


def held_text(job: JobRecord, events: Sequence[EventRecord]) -> str:
    """Why a held job waits (`gpudesk show`): its user's hold, or its client's while the job's
    submission arrives in parts (`held_in_parts`), which the client releases once the last part
    is in; the user's `gpudesk release` is for a client that stopped before that (its parts
    stay held), not to be done meanwhile. The submission's size is read from the latest hold
    event (`hold_event`'s words)."""
    if not job.held_in_parts:
        return f"held: it will not start until released (gpudesk release {job.id})"
    said = next((event.message for event in reversed(events) if event.kind == "hold"), "")
    found = _HELD_IN_PARTS.fullmatch(said)
    size = f" of {found[1]} jobs" if found else ""
    sent = f" in {found[2]} parts" if found and found[2] else ""
    return (
        f"held: part of a submission{size} still arriving{sent}; it starts once "
        "the last part is in (its client then releases them all). Only if the client stopped "
        f"before that do its parts stay held: then `gpudesk release {job.id}` and the rest of "
        "them"
    )


class JobOutcome(msgspec.Struct, frozen=True):
    """What a job-control action did to one job. `ok` is False only when the action was
    refused (holding a running job, say); a no-op such as holding a held job is ok."""

    message: str
    ok: bool = True


def state_phrase(job: JobRecord) -> str:
    """ "running" ("suspended"), or "already failed" for a finished job: the start of a
    refusal."""
    return f"already {job.state.value}" if job.state.terminal else job.shown_state.value


class UnsavedEnd(msgspec.Struct, frozen=True):
    """How an ended attempt moves its job on, worked out but not yet stored (its store could
    not be written: a full disk). What the views show until it is saved (the engine's
    `LiveAttempt.unsaved`); the engine saves it, once, when the store takes it again."""

    state: JobState
    exit_code: int | None
    message: str
    ended_at: float


def unsaved_view(reply: JobView, end: UnsavedEnd | None, why: str | None) -> JobView:
    """A job whose attempt ended while its store could not be written: the `end` the engine
    worked out (where it got that far: else still `running`), marked `unsaved` with `why`, not
    the `running` its store still says (the engine's listings)."""
    if end is None:
        return msgspec.structs.replace(reply, unsaved=why)
    return msgspec.structs.replace(
        reply,
        state=end.state.value,
        exit_code=end.exit_code,
        reason=end.message,
        ended_at=end.ended_at if end.state.terminal else None,
        unsaved=why,
        slot=None,
        gpus=[],
        mode=None,
        mig_slice=None,
        pgid=None,
        remaining=None,
    )


def ended_unsaved(end: UnsavedEnd | None, why: str) -> str:
    """The refusal of every action on a job whose attempt ended but whose end its store has not
    taken yet (`why`: "not yet saved: the disk … is full; …"). The store still says running;
    the job is over all the same, as Slurm's scancel finds a job completing: acting on it would
    record a cancel of a job that ended, or run it twice. `end`: as the engine worked it out
    (None: not that far); one with a retry to come reads as "ended"."""
    if end is None:
        return f"already ended; its end is {why}"
    ended = end.state.value if end.state.terminal else "ended"
    code = "unknown" if end.exit_code is None else end.exit_code
    return f"already {ended} (exit {code}); its end is {why}"


class CancelQueued(msgspec.Struct, frozen=True):
    """A queued job ended before it started (as `finish_queued` ends it)."""

    job: JobRecord
    reason: str

    def applied(self, now: float) -> JobRecord:
        reason, state = safe_text(self.reason), JobState.CANCELLED
        return msgspec.structs.replace(
            self.job, state=state, ended_at=now, reason=reason, held=False, held_in_parts=False
        )


class SetHeld(msgspec.Struct, frozen=True):
    """A queued job held (the placement policy skips it; it keeps its place) or released, by
    its user or by the client that sent its submission in parts (`in_parts`)."""

    job: JobRecord
    held: bool
    in_parts: InParts | None = None

    @property
    def event(self) -> str:
        return hold_event(self.held, self.in_parts)

    def applied(self, now: float) -> JobRecord:
        return msgspec.structs.replace(self.job, held=self.held, held_in_parts=False)


class Requeue(msgspec.Struct, frozen=True):
    """A finished job queued again as the same job, with a fresh attempt budget: its attempts
    stay in its history and the next one's number follows them."""

    job: JobRecord

    def applied(self, now: float) -> JobRecord:
        return msgspec.structs.replace(
            self.job,
            state=JobState.QUEUED,
            attempts_before_requeue=self.job.attempts,
            preemptions=0,
            held=False,
            held_in_parts=False,
            cancel_requested=False,
            kill_deadline=None,
            started_at=None,
            ended_at=None,
            exit_code=None,
            reason=None,
        )


class SetPriority(msgspec.Struct, frozen=True):
    """A job's priority changed, in any state: it orders the queue when the job is, or next goes
    back to, queued."""

    job: JobRecord
    priority: int

    def applied(self, now: float) -> JobRecord:
        spec = msgspec.structs.replace(self.job.spec, priority=self.priority)
        return msgspec.structs.replace(self.job, spec=spec)


JobChange = CancelQueued | SetHeld | Requeue | SetPriority
# a job's change for the store, its event's message, and the job's outcome once stored
Planned = tuple[JobChange, str, str]
