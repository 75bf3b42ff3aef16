"""The store's rows read as records (gpudesk.core.records): a job, an attempt, an event."""

from __future__ import annotations

import json
import sqlite3

from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import AttemptRecord, EventRecord, JobRecord

HELD_IN_PARTS = 2  # jobs.held: 1 held by its user, 2 by the client sending its submission in parts


def read_job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        id=row["id"],
        spec=JobSpec.from_stored(json.loads(row["spec"])),
        state=JobState(row["state"]),
        submitted_at=row["submitted_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        attempts=row["attempts"],
        exit_code=row["exit_code"],
        reason=row["reason"],
        cancel_requested=bool(row["cancel_requested"]),
        kill_deadline=row["kill_deadline"],
        demand=json.loads(row["demand"]) if row["demand"] else None,
        held=bool(row["held"]),
        held_in_parts=row["held"] == HELD_IN_PARTS,
        attempts_before_requeue=row["attempts_before_requeue"],
        owner=_owner(row),
        preemptions=row["preemptions"],
        suspended_at=row["suspended_at"],
    )


def _owner(row: sqlite3.Row) -> Identity:
    """A job's owner; a job stored before owners were (schema 7) was the engine's user's."""
    if row["owner_uid"] is None:
        return Identity.of_process()
    groups = json.loads(row["owner_groups"]) if row["owner_groups"] else []
    return Identity.of(row["owner_uid"], row["owner_gid"], groups, row["owner_login"])


def read_attempt(row: sqlite3.Row) -> AttemptRecord:
    return AttemptRecord(
        id=row["id"],
        job_id=row["job_id"],
        number=row["number"],
        state=row["state"],
        placement=json.loads(row["placement"]),
        dir=row["dir"],
        pid=row["pid"],
        pid_started=row["pid_started"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        exit_code=row["exit_code"],
        signal=row["signal"],
        reason=row["reason"],
        started_boottime=row["started_boottime"],
        boot_id=row["boot_id"],
        preempted_for=row["preempted_for"],
        suspended_s=row["suspended_s"],
        suspended_boottime=row["suspended_boottime"],
    )


def read_event(row: sqlite3.Row) -> EventRecord:
    return EventRecord(
        id=row["id"],
        ts=row["ts"],
        job_id=row["job_id"],
        attempt=row["attempt"],
        kind=row["kind"],
        state=row["state"],
        message=row["message"],
    )
