"""The events a subscriber receives: a job changed (topic "job"), a sample (topic
"telemetry").
"""

from __future__ import annotations

from gpudesk.core.wire.base import JobStateName, WireModel
from gpudesk.core.wire.telemetry import Snapshot


class JobEvent(WireModel, frozen=True):
    """Published on topic "job" whenever a job changes."""

    v: int
    ts: float
    id: int
    name: str
    state: JobStateName
    group: str | None
    user: str
    attempts: int
    exit_code: int | None
    held: bool
    priority: int
    message: str


class TelemetryEvent(Snapshot, frozen=True):
    """Published on topic "telemetry" at every sample: the snapshot, with the protocol
    version every event carries."""

    v: int
