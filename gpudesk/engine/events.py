"""Job events and telemetry frames for every subscriber of the control socket. Every member of a
station sees every job's events, as they see the queue (docs/shared-station.md, "What is private").

Events are best effort: a slow subscriber must never stall the engine, so one that falls behind
its bound is told `events_missed` and cut off (`control_socket.SUBSCRIBER_BACKLOG_BYTES`). Job
events are in the store too, so a subscriber that missed some can read them there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgspec

from gpudesk.core import protocol
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.events import JobEvent, TelemetryEvent
from gpudesk.core.wire.telemetry import Snapshot
from gpudesk.engine.control_socket import ControlSocket
from gpudesk.engine.store.database import Store

log = logging.getLogger("gpudesk.engine")


class EventPublisher:
    def __init__(self, socket: ControlSocket | None, store: Store) -> None:
        self.socket = socket
        self.store = store
        # Who else hears of every job change, in the engine (MLflow tracking): called with the
        # job as the store has it now.
        self.listeners: list[Callable[[JobRecord], None]] = []
        # Job events published so far: the metrics exporter counts the queue again when it moved
        # (every change of a job's state is published here).
        self.job_events = 0

    def job(self, job_id: int, message: str, job: JobRecord | None = None) -> None:
        """A job changed: its state as it is now in the store, and why."""
        self.job_events += 1
        record = job or self.store.job(job_id)
        event = JobEvent(
            v=protocol.PROTOCOL_VERSION,
            ts=time.time(),
            id=record.id,
            name=record.name,
            state=record.shown_state.value,
            group=record.spec.group,
            user=record.user,
            attempts=record.attempts,
            exit_code=record.exit_code,
            held=record.held,
            priority=record.spec.priority,
            message=message,
        )
        self._send("job", event)
        for listener in self.listeners:
            try:  # one's failure stops neither the next (the end hooks) nor what changed the job
                listener(record)
            except Exception:
                log.exception("a job-change listener failed on job %d", record.id)

    def telemetry(self, snapshot: Snapshot) -> None:
        if self.socket is not None:  # not made at all when no one could hear it
            fields = msgspec.structs.asdict(snapshot)
            self._send("telemetry", TelemetryEvent(v=protocol.PROTOCOL_VERSION, **fields))

    def _send(self, kind: str, event: msgspec.Struct) -> None:
        if self.socket is not None:
            self.socket.publish(kind, protocol.encode_event(kind, msgspec.to_builtins(event)))
