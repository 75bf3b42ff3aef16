"""Typed models of everything the engine answers and publishes: the wire's types, which live in
`gpudesk.core.wire` (one set for the engine and the client) and are re-exported here, where user
scripts and front ends have always imported them.

One model per reply and event, decoded once, strictly, where a message arrives
(`gpudesk.api.client`): a field the model does not know, a field it needs that is missing, or a
value of the wrong type is a `DecodeError` naming the path — never a `KeyError` three views
later. `docs/protocol.md` documents each request and event; `tests/contract/test_contract.py`
decodes every one of them from a real engine.
"""

from __future__ import annotations

from gpudesk.core.wire.base import (
    JobStateName as JobStateName,
)
from gpudesk.core.wire.base import (
    PlacementMode as PlacementMode,
)
from gpudesk.core.wire.base import (
    WireModel as WireModel,
)
from gpudesk.core.wire.base import (
    to_builtins as to_builtins,
)
from gpudesk.core.wire.control import (
    DrainResult as DrainResult,
)
from gpudesk.core.wire.control import (
    DrainView as DrainView,
)
from gpudesk.core.wire.events import (
    JobEvent as JobEvent,
)
from gpudesk.core.wire.events import (
    TelemetryEvent as TelemetryEvent,
)
from gpudesk.core.wire.jobs import (
    ActionOutcome as ActionOutcome,
)
from gpudesk.core.wire.jobs import (
    ActionResult as ActionResult,
)
from gpudesk.core.wire.jobs import (
    AlternativeView as AlternativeView,
)
from gpudesk.core.wire.jobs import (
    ArrayTasksView as ArrayTasksView,
)
from gpudesk.core.wire.jobs import (
    AttemptUsageFigures as AttemptUsageFigures,
)
from gpudesk.core.wire.jobs import (
    AttemptUsageView as AttemptUsageView,
)
from gpudesk.core.wire.jobs import (
    AttemptView as AttemptView,
)
from gpudesk.core.wire.jobs import (
    ClusterView as ClusterView,
)
from gpudesk.core.wire.jobs import (
    DamagedJob as DamagedJob,
)
from gpudesk.core.wire.jobs import (
    DemandView as DemandView,
)
from gpudesk.core.wire.jobs import (
    EditResult as EditResult,
)
from gpudesk.core.wire.jobs import (
    EventView as EventView,
)
from gpudesk.core.wire.jobs import (
    JobDetail as JobDetail,
)
from gpudesk.core.wire.jobs import (
    JobList as JobList,
)
from gpudesk.core.wire.jobs import (
    JobRunView as JobRunView,
)
from gpudesk.core.wire.jobs import (
    JobSeriesView as JobSeriesView,
)
from gpudesk.core.wire.jobs import (
    JobSpecView as JobSpecView,
)
from gpudesk.core.wire.jobs import (
    JobView as JobView,
)
from gpudesk.core.wire.jobs import (
    LogChunk as LogChunk,
)
from gpudesk.core.wire.jobs import (
    PlacementView as PlacementView,
)
from gpudesk.core.wire.jobs import (
    RemainingView as RemainingView,
)
from gpudesk.core.wire.jobs import (
    SeriesPoints as SeriesPoints,
)
from gpudesk.core.wire.jobs import (
    SlurmJobView as SlurmJobView,
)
from gpudesk.core.wire.jobs import (
    SubmitResult as SubmitResult,
)
from gpudesk.core.wire.jobs import (
    TrackingView as TrackingView,
)
from gpudesk.core.wire.jobs import (
    UsageFigures as UsageFigures,
)
from gpudesk.core.wire.jobs import (
    UsageSummary as UsageSummary,
)
from gpudesk.core.wire.mig import (
    MigApplyResult as MigApplyResult,
)
from gpudesk.core.wire.mig import (
    MigDeviceCreated as MigDeviceCreated,
)
from gpudesk.core.wire.mig import (
    MigPlanResult as MigPlanResult,
)
from gpudesk.core.wire.mig import (
    MigPlanView as MigPlanView,
)
from gpudesk.core.wire.mig import (
    PlanBlocker as PlanBlocker,
)
from gpudesk.core.wire.mig import (
    PlanLeftOut as PlanLeftOut,
)
from gpudesk.core.wire.mig import (
    PlanSlice as PlanSlice,
)
from gpudesk.core.wire.mig import (
    QueueTimeView as QueueTimeView,
)
from gpudesk.core.wire.model import (
    GpuModelView as GpuModelView,
)
from gpudesk.core.wire.model import (
    ModelObserveResult as ModelObserveResult,
)
from gpudesk.core.wire.model import (
    ModelParamView as ModelParamView,
)
from gpudesk.core.wire.model import (
    ModelResetResult as ModelResetResult,
)
from gpudesk.core.wire.model import (
    ModelShowResult as ModelShowResult,
)
from gpudesk.core.wire.model import (
    ParamKind as ParamKind,
)
from gpudesk.core.wire.replies import (
    REPLY_MODELS as REPLY_MODELS,
)
from gpudesk.core.wire.station import (
    ConfigureResult as ConfigureResult,
)
from gpudesk.core.wire.station import (
    DatasetsResult as DatasetsResult,
)
from gpudesk.core.wire.station import (
    GpuCounts as GpuCounts,
)
from gpudesk.core.wire.station import (
    LoaderConsumer as LoaderConsumer,
)
from gpudesk.core.wire.station import (
    LoaderDecoding as LoaderDecoding,
)
from gpudesk.core.wire.station import (
    LoaderOrphan as LoaderOrphan,
)
from gpudesk.core.wire.station import (
    LoaderSelection as LoaderSelection,
)
from gpudesk.core.wire.station import (
    LoaderSpec as LoaderSpec,
)
from gpudesk.core.wire.station import (
    LoaderStaging as LoaderStaging,
)
from gpudesk.core.wire.station import (
    LoaderStatus as LoaderStatus,
)
from gpudesk.core.wire.station import (
    LoaderView as LoaderView,
)
from gpudesk.core.wire.station import (
    LoopRequest as LoopRequest,
)
from gpudesk.core.wire.station import (
    LoopTimingView as LoopTimingView,
)
from gpudesk.core.wire.station import (
    LoopTurn as LoopTurn,
)
from gpudesk.core.wire.station import (
    LoopTurns as LoopTurns,
)
from gpudesk.core.wire.station import (
    MpsFault as MpsFault,
)
from gpudesk.core.wire.station import (
    MpsInfo as MpsInfo,
)
from gpudesk.core.wire.station import (
    PingResult as PingResult,
)
from gpudesk.core.wire.station import (
    SettingChange as SettingChange,
)
from gpudesk.core.wire.station import (
    SettingNotApplied as SettingNotApplied,
)
from gpudesk.core.wire.station import (
    SettingValue as SettingValue,
)
from gpudesk.core.wire.station import (
    ShutdownResult as ShutdownResult,
)
from gpudesk.core.wire.station import (
    SlotCounts as SlotCounts,
)
from gpudesk.core.wire.station import (
    StationConfigView as StationConfigView,
)
from gpudesk.core.wire.station import (
    StationInfo as StationInfo,
)
from gpudesk.core.wire.station import (
    StationStatus as StationStatus,
)
from gpudesk.core.wire.station import (
    TrackingHealth as TrackingHealth,
)
from gpudesk.core.wire.station import (
    UserShare as UserShare,
)
from gpudesk.core.wire.telemetry import (
    GpuView as GpuView,
)
from gpudesk.core.wire.telemetry import (
    HistoryGpu as HistoryGpu,
)
from gpudesk.core.wire.telemetry import (
    HistoryPoint as HistoryPoint,
)
from gpudesk.core.wire.telemetry import (
    HostView as HostView,
)
from gpudesk.core.wire.telemetry import (
    JobTelemetry as JobTelemetry,
)
from gpudesk.core.wire.telemetry import (
    MigDeviceView as MigDeviceView,
)
from gpudesk.core.wire.telemetry import (
    ProcessView as ProcessView,
)
from gpudesk.core.wire.telemetry import (
    Snapshot as Snapshot,
)
from gpudesk.core.wire.telemetry import (
    TelemetryResult as TelemetryResult,
)

__all__ = [
    "REPLY_MODELS",
    "ActionOutcome",
    "ActionResult",
    "ArrayTasksView",
    "AttemptUsageFigures",
    "AttemptUsageView",
    "AttemptView",
    "ClusterView",
    "ConfigureResult",
    "DamagedJob",
    "DatasetsResult",
    "DemandView",
    "DrainResult",
    "DrainView",
    "EditResult",
    "EventView",
    "GpuCounts",
    "GpuModelView",
    "GpuView",
    "HistoryGpu",
    "HistoryPoint",
    "HostView",
    "JobDetail",
    "JobEvent",
    "JobList",
    "JobRunView",
    "JobSeriesView",
    "JobSpecView",
    "JobStateName",
    "JobTelemetry",
    "JobView",
    "LoaderConsumer",
    "LoaderDecoding",
    "LoaderOrphan",
    "LoaderSelection",
    "LoaderSpec",
    "LoaderStaging",
    "LoaderStatus",
    "LoaderView",
    "LogChunk",
    "LoopRequest",
    "LoopTimingView",
    "LoopTurn",
    "LoopTurns",
    "MigApplyResult",
    "MigDeviceCreated",
    "MigDeviceView",
    "MigPlanResult",
    "MigPlanView",
    "ModelObserveResult",
    "ModelParamView",
    "ModelResetResult",
    "ModelShowResult",
    "MpsFault",
    "MpsInfo",
    "PingResult",
    "PlacementMode",
    "PlacementView",
    "PlanBlocker",
    "PlanLeftOut",
    "PlanSlice",
    "ProcessView",
    "QueueTimeView",
    "RemainingView",
    "SettingChange",
    "SettingNotApplied",
    "SettingValue",
    "ShutdownResult",
    "SlotCounts",
    "SlurmJobView",
    "Snapshot",
    "StationConfigView",
    "StationInfo",
    "StationStatus",
    "SubmitResult",
    "TelemetryEvent",
    "TelemetryResult",
    "TrackingHealth",
    "TrackingView",
    "UsageFigures",
    "UsageSummary",
    "WireModel",
    "to_builtins",
]
