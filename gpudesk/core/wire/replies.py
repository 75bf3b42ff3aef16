"""Each request's reply type, by op: the one table of the protocol's replies
(docs/protocol.md).
"""

from __future__ import annotations

from gpudesk.core.wire.base import WireModel
from gpudesk.core.wire.jobs import (
    ActionResult,
    EditResult,
    JobDetail,
    JobList,
    LogChunk,
    SubmitResult,
)
from gpudesk.core.wire.mig import MigApplyResult, MigPlanResult
from gpudesk.core.wire.model import ModelObserveResult, ModelResetResult, ModelShowResult
from gpudesk.core.wire.station import (
    ConfigureResult,
    DatasetsResult,
    PingResult,
    ShutdownResult,
    StationStatus,
)
from gpudesk.core.wire.telemetry import TelemetryResult

# Each request's reply model, by op: the one table of the protocol's replies (docs/protocol.md).
# `Client`'s methods decode with these; the contract test checks the engine knows exactly these
# ops and answers each in its model.
REPLY_MODELS: dict[str, type[WireModel]] = {
    "ping": PingResult,
    "status": StationStatus,
    "shutdown": ShutdownResult,
    "configure": ConfigureResult,
    "check_configure": ConfigureResult,
    "datasets": DatasetsResult,
    "submit": SubmitResult,
    "check_submit": SubmitResult,
    "jobs": JobList,
    "show": JobDetail,
    "log": LogChunk,
    "cancel": ActionResult,
    "hold": ActionResult,
    "release": ActionResult,
    "priority": ActionResult,
    "requeue": ActionResult,
    "telemetry": TelemetryResult,
    "mig_plan": MigPlanResult,
    "mig_apply": MigApplyResult,
    "model_show": ModelShowResult,
    "model_observe": ModelObserveResult,
    "model_reset": ModelResetResult,
    "edit": EditResult,
}
