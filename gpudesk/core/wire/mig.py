"""MIG on the wire: `mig_plan`'s plans (the layout the queue wants, the jobs its slices are for,
why it may not be applied) and what `mig_apply` did.
"""

from __future__ import annotations

from gpudesk.core.wire.base import WireModel


class PlanSlice(WireModel, frozen=True):
    """A MIG slice a plan creates, and the queued job it is for."""

    profile: str
    profile_id: int
    memory_mib: float
    compute_slices: int
    job_id: int
    job_name: str
    job_memory_mib: float
    job_sm_pct: float
    job_held: bool  # always false: a held job is given no slice (kept for older clients)
    jobs: list[int]


class PlanLeftOut(WireModel, frozen=True):
    job_id: int
    job_name: str
    reason: str


class PlanBlocker(WireModel, frozen=True):
    code: str
    message: str


class QueueTimeView(WireModel, frozen=True):
    """How long the queue as it is takes to drain on the GPU with the plan's MIG layout, and with
    the GPU whole (shared under MPS; one job at a time), in seconds: SIMULATED, by the
    simulator's replay of the queued jobs with the station's model (gpudesk.policy.
    mig_queue_time). `*_cannot_run`: queued jobs that never start there (no slice holds them)."""

    layout: list[str]
    mig_s: float
    mig_cannot_run: int
    mps_s: float
    mps_cannot_run: int
    exclusive_s: float
    exclusive_cannot_run: int
    cost_s: float  # mig_s - mps_s: what the layout costs the queue (< 0: what it saves)
    costs_queue_time: bool  # it costs more than the simulator's noise (2 %), or jobs never start
    recommended: bool  # not costs_queue_time
    current: list[str]  # the layout the GPU has
    current_s: float | None  # the drain time with it, where it differs from `layout`
    current_cannot_run: int
    jobs: int  # queued jobs replayed
    left_out: int  # queued jobs beyond the replay's cap
    run_time_unknown: int  # replayed jobs with no run-time history ...
    assumed_run_s: float  # ... each assumed to run this long alone
    running_not_counted: int  # jobs running on the GPU now, not in the replay
    summary: str  # the one line `gpudesk mig plan` and the desk show
    notes: list[str]  # what the figures rest on, beyond the model


class MigPlanView(WireModel, frozen=True):
    """The MIG layout the queue would want on one GPU, and whether it may be applied."""

    gpu: int
    name: str
    mig_mode: str
    mig_enabled: bool
    simulated: bool
    current: list[str]
    wanted: list[str]  # the whole layout: `slices`' profiles, then `spare`
    slices: list[PlanSlice]
    left_out: list[PlanLeftOut]
    left_out_total: int
    commands: list[str]
    allowed: bool
    blockers: list[PlanBlocker]
    reason: str | None
    enable_hint: str | None
    running_jobs: list[int]
    auto: str | None = None  # what auto's own repartitioning predicts of it now, if it weighs it
    # the slices for jobs to come, carved from the room the jobs' slices leave (in `wanted` too)
    spare: list[str] = []
    # the queue's drain time with the layout against the whole GPU (null: nothing to weigh)
    queue_time: QueueTimeView | None = None


class MigPlanResult(WireModel, frozen=True):
    plans: list[MigPlanView]
    simulated: bool


class MigDeviceCreated(WireModel, frozen=True):
    gpu: int
    device: int
    profile: str
    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None
    placement: str | None


class MigApplyResult(WireModel, frozen=True):
    gpu: int
    previous: list[str]
    profiles: list[str]
    commands: list[str]
    mig_devices: list[MigDeviceCreated]
    simulated: bool
    applied: bool
    message: str
