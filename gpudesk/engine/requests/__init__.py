"""The engine's requests, one module per group of ops: `dispatch` (the op table, the door, the
mapping of errors to protocol codes), `submission`, `listing` (jobs, show, log),
`job_actions` (cancel, hold, release, priority, requeue), `station` (ping, status, configure,
datasets, shutdown), `telemetry`, `mig`, `model`, `editing`; `common` holds what they share.
"""

from gpudesk.engine.requests.common import EngineParts
from gpudesk.engine.requests.dispatch import RequestHandlers

__all__ = ["EngineParts", "RequestHandlers"]
