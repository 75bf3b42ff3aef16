"""The engine's PUB socket: job events and telemetry frames for every subscriber.

Events are best effort (NOBLOCK): a slow subscriber must never stall the engine. Job events are in
the store too, so a subscriber that missed one can read it there.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import zmq

from gpudesk.engine import protocol
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.records import JobRecord


class EventPublisher:
    def __init__(self, socket: zmq.Socket[bytes], store: Store) -> None:
        self.socket = socket
        self.store = store

    def job(self, job_id: int, message: str, job: JobRecord | None = None) -> None:
        """A job changed: its state as it is now in the store, and why."""
        job = job or self.store.job(job_id)
        payload = {
            "ts": time.time(),
            "id": job.id,
            "name": job.name,
            "state": job.state.value,
            "group": job.spec.group,
            "user": job.user,
            "attempts": job.attempts,
            "exit_code": job.exit_code,
            "held": job.held,
            "priority": job.spec.priority,
            "message": message,
        }
        self._send("job", payload)

    def telemetry(self, view: dict[str, Any]) -> None:
        self._send("telemetry", view)

    def _send(self, kind: str, payload: dict[str, Any]) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self.socket.send_multipart(protocol.encode_event(kind, payload), zmq.NOBLOCK)
