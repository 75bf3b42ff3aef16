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
    job_held: bool
    jobs: list[int]


class PlanLeftOut(WireModel, frozen=True):
    job_id: int
    job_name: str
    reason: str


class PlanBlocker(WireModel, frozen=True):
    code: str
    message: str


class MigPlanView(WireModel, frozen=True):
    """The MIG layout the queue would want on one GPU, and whether it may be applied."""

    gpu: int
    name: str
    mig_mode: str
    mig_enabled: bool
    simulated: bool
    current: list[str]
    wanted: list[str]
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
