"""The MIG planner: the layout the queue would want on a MIG GPU, and what applying it would run.

Pure logic, no I/O: the engine (gpudesk.engine.station.repartition.station) reads each GPU's MIG
state — from nvidia-smi on a real station, from the simulated model on a `sim:*` one — and
hands it here with the queued single-GPU jobs' demands. For each GPU the planner:

- gives each queued job that suits a MIG slice the smallest profile whose memory holds the job's
  need plus the headroom placement keeps free on a GPU a job holds alone (`RESERVE_MIB`) and
  whose share of the GPU's compute slices covers its SM demand; a job no profile fits (too large,
  or after an out-of-memory death, when it must run alone) is left to whole GPUs;
- packs those slices in queue order into what the GPU can hold, as `layout.plan_layout` checks it
  (the hardware's placement rules), and stops at the first job that no longer fits, so no job is
  overtaken by a later one; a held job is given none (it does not start until released);
- carves the room those slices leave into spare slices for jobs to come (`spare_profiles`), so
  the layout shown is the one `auto` would make (policy.mig_payoff) and `apply-plan` applies;
- lists the nvidia-smi commands that applying the layout would run, as the driver renders them
  (`MigCommands`: gpudesk.hw.mig.manager.MigManager's dry-run path: destroy the compute and GPU
  instances, create the new ones with `-cgi ... -C`, read back `-L`);
- says whether the engine may apply it, and if not, every reason why: MIG mode off or pending
  (with the command the user must run: gpudesk never enables MIG or resets a GPU), nothing to
  change, jobs running on the GPU, the station config (`mig_repartition`) not allowing it.

A plan replaces the GPU's whole layout: it is applied only to an idle GPU.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec

from gpudesk.core.gpu_models import GpuModel
from gpudesk.core.mig_layout import LayoutError, plan_layout
from gpudesk.core.mig_profiles import COMPUTE_SLICES, SliceSpan, table_for_gpu
from gpudesk.core.mig_records import GiProfile, MigMode
from gpudesk.core.record_dict import record_dict
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.mig import (
    MigPlanView,
    PlanBlocker,
    PlanLeftOut,
    PlanSlice,
    QueueTimeView,
)
from gpudesk.policy.demand import Demand
from gpudesk.policy.demand_history import DemandHistory
from gpudesk.policy.policy import RESERVE_MIB, GpuState
from gpudesk.policy.queue import JobQueue
from gpudesk.units import MIB_PER_GIB

# A slice must hold the job's need plus what placement keeps free on any GPU a job holds alone.
SLICE_HEADROOM_MIB = RESERVE_MIB
FULL_GPU_PCT = 100.0
MAX_LEFT_OUT_LISTED = 20  # a plan names at most this many queued jobs it gives no slice
# A held job does not wait for room: it waits for its release, and a slice made for it meanwhile
# would sit idle (`auto` weighs only the jobs that can start: policy.mig_payoff).
HELD_REASON = "held: it starts only once released, so no slice is planned for it"

# Why a plan cannot be applied (MigPlan.blockers), most fundamental first.
BLOCKED_MIG_MODE = "mig-mode"  # MIG mode is off or pending a reset: the user must act
BLOCKED_NOTHING_TO_CHANGE = "nothing-to-change"
BLOCKED_BUSY = "busy"  # jobs run on the GPU or its slices
BLOCKED_BY_CONFIG = "config"  # [station] mig_repartition is not true


class MigCommands(Protocol):
    """What the planner asks of the MIG driver (gpudesk.hw.mig.manager.MigManager): the command
    lines a layout would take, and the words for a GPU whose MIG mode is off. The planner runs
    nothing and imports no driver."""

    def plan_apply_to(
        self,
        gpu: int,
        profiles: Sequence[str] | str,
        available: Sequence[GiProfile],
        placements: Mapping[int, Sequence[SliceSpan]],
        *,
        gpu_instances: bool,
        compute_instances: bool,
    ) -> list[list[str]]: ...

    def verify_argv(self) -> list[str]: ...

    def enable_hint(self, gpu: int) -> str: ...

    def mode_message(self, gpu: int, mode: MigMode) -> str: ...


class PlansOnly:
    """`MigCommands` for plans that are never shown as commands (the simulator's: it weighs
    layouts and applies them to its own model): no command lines, and a mode message without
    the driver's command."""

    def plan_apply_to(
        self,
        gpu: int,
        profiles: Sequence[str] | str,
        available: Sequence[GiProfile],
        placements: Mapping[int, Sequence[SliceSpan]],
        *,
        gpu_instances: bool,
        compute_instances: bool,
    ) -> list[list[str]]:
        return []

    def verify_argv(self) -> list[str]:
        return []

    def enable_hint(self, gpu: int) -> str:
        return f"MIG mode is off on GPU {gpu}."

    def mode_message(self, gpu: int, mode: MigMode) -> str:
        return f"GPU {gpu} is not in MIG mode."


# ---------------------------------------------------------------------------------- inputs
class QueuedDemand(msgspec.Struct, frozen=True):
    """A queued single-GPU job as the planner sees it, in queue (placement) order."""

    job_id: int
    name: str
    memory_mib: float
    sm_pct: float
    held: bool = False  # held by the user: planned for, starts once released
    membw_pct: float | None = None  # its DRAM bandwidth share alone, where known
    run_s: float | None = None  # its expected run time alone (its command family's), where known
    # it must run alone (after an out-of-memory death): only a slice with all of the GPU's
    # compute takes it (policy.full_slice)
    alone: bool = False


def mig_candidates(
    queue: JobQueue, demands: DemandHistory, whole_gpus: bool = True
) -> list[QueuedDemand]:
    """The queued single-GPU jobs a MIG slice could take (`mig_candidate`), in placement order,
    held ones included: a plan names them as held and gives them no slice (`pack_queue`)."""
    candidates = (
        mig_candidate(job, demands.of(job), demands.typical_run_s(job), whole_gpus)
        for job in queue.ordered()
        if job.spec.gpus == 1
    )
    return [c for c in candidates if c is not None]


def mig_candidate(
    job: JobRecord, demand: Demand, run_s: float | None, whole_gpus: bool
) -> QueuedDemand | None:
    """A queued job as the planner sees it, or None where no MIG slice is for it: a multi-GPU
    job, or one that must run alone (after an out-of-memory death) on a station with GPUs that
    run whole (`whole_gpus`); where every GPU is in MIG mode such a job asks for a slice with
    all of a GPU's compute (`QueuedDemand.alone`), else it would never run. `run_s`: its
    expected run time (its family's), for the plan's queue-time replay. The engine's and the
    simulator's repartitioning list the queue by it."""
    if job.spec.gpus != 1 or (demand.exclusive and whole_gpus):
        return None
    return QueuedDemand(
        job.id,
        job.name,
        demand.memory_mib,
        demand.sm_pct,
        job.held,
        demand.membw_pct,
        run_s,
        alone=demand.exclusive,
    )


def any_whole_gpu(gpus: Sequence[GpuState]) -> bool:
    """Whether a GPU here could run a job whole (`GpuState.runs_whole`)."""
    return any(g.runs_whole for g in gpus)


class GpuMigState(msgspec.Struct, frozen=True):
    """One MIG-capable GPU as the planner needs it.

    `mig_mode` is `MigMode.state`: "enabled", "pending" (enabled, waiting for a GPU reset) or
    "disabled". `profiles` and `placements` are what `-lgip` and `-lgipp` say (a real GPU
    answers them only in MIG mode; a simulated one always has its model's table). `current`
    lists the profiles of the GPU instances it has now."""

    index: int
    name: str
    mig_mode: str
    profiles: tuple[GiProfile, ...] = ()
    placements: Mapping[int, tuple[SliceSpan, ...]] = msgspec.field(default_factory=dict)
    current: tuple[str, ...] = ()
    has_gpu_instances: bool = False
    has_compute_instances: bool = False
    running_job_ids: tuple[int, ...] = ()  # jobs running on the GPU or its MIG slices

    @property
    def mig_enabled(self) -> bool:
        return self.mig_mode == "enabled"

    @property
    def idle(self) -> bool:
        return not self.running_job_ids


# --------------------------------------------------------------------------------- results
class WantedSlice(msgspec.Struct, frozen=True):
    """A MIG slice the plan creates, and the queued job it is for."""

    profile: str
    profile_id: int
    memory_mib: float
    compute_slices: int
    job_id: int
    job_name: str
    job_memory_mib: float
    job_sm_pct: float


class LeftOut(msgspec.Struct, frozen=True):
    """A queued job the plan gives no slice, and why."""

    job_id: int
    job_name: str
    reason: str


class Blocker(msgspec.Struct, frozen=True):
    code: str  # one of the BLOCKED_* codes
    message: str


class MigPlan(msgspec.Struct, frozen=True):
    gpu: int
    gpu_name: str
    mig_mode: str
    simulated: bool
    current: tuple[str, ...]
    wanted: tuple[WantedSlice, ...]  # the slices for queued jobs
    spare: tuple[str, ...]  # then slices for jobs to come, in the room they leave
    left_out: tuple[LeftOut, ...]
    left_out_total: int
    commands: tuple[str, ...]  # shell lines, in the order applying runs them
    blockers: tuple[Blocker, ...]
    enable_hint: str | None  # what the user must run to turn MIG mode on
    running_job_ids: tuple[int, ...]

    @property
    def mig_enabled(self) -> bool:
        return self.mig_mode == "enabled"

    @property
    def allowed(self) -> bool:
        return not self.blockers

    @property
    def wanted_profiles(self) -> list[str]:
        """The whole layout the plan makes: the queued jobs' slices, then the spare ones."""
        return [s.profile for s in self.wanted] + list(self.spare)

    @property
    def reason(self) -> str | None:
        """Why it cannot be applied, in one paragraph; None when it can."""
        return " ".join(b.message for b in self.blockers) or None

    def view(self, auto: str | None = None, queue_time: QueueTimeView | None = None) -> MigPlanView:
        """The plan as `mig_plan` answers it; `auto`: what auto's repartitioning predicts;
        `queue_time`: the queue's drain time with the layout against the whole GPU."""
        return MigPlanView(
            gpu=self.gpu,
            name=self.gpu_name,
            mig_mode=self.mig_mode,
            mig_enabled=self.mig_enabled,
            simulated=self.simulated,
            current=list(self.current),
            wanted=self.wanted_profiles,
            # each slice is for one job; "jobs" lists it as the MIG screen reads it. A held job
            # is given no slice (pack_queue): job_held stays in the wire for older clients.
            slices=[
                PlanSlice(**record_dict(s), job_held=False, jobs=[s.job_id]) for s in self.wanted
            ],
            spare=list(self.spare),
            left_out=[PlanLeftOut(**record_dict(j)) for j in self.left_out],
            left_out_total=self.left_out_total,
            commands=list(self.commands),
            allowed=self.allowed,
            blockers=[PlanBlocker(**record_dict(b)) for b in self.blockers],
            reason=self.reason,
            enable_hint=self.enable_hint,
            running_jobs=list(self.running_job_ids),
            auto=auto,
            queue_time=queue_time,
        )


# ---------------------------------------------------------------------------- profile choice
def full_compute_slices(profiles: Sequence[GiProfile]) -> int:
    """A whole GPU's compute slices: the largest profile's (7 on A100, H100, H200)."""
    return max((p.compute_slices for p in profiles), default=0) or COMPUTE_SLICES


def compute_share_pct(profile: GiProfile, full_slices: int) -> float:
    """The share of the GPU's compute a profile gets, in % (3g of 7: 42.9)."""
    return FULL_GPU_PCT * profile.compute_slices / full_slices


def memory_mib(profile: GiProfile) -> float:
    return profile.memory_gib * MIB_PER_GIB


def _is_plain(profile: GiProfile) -> bool:
    """ "1g.5gb" rather than a variant with extra engines ("1g.5gb+me"), which are scarcer."""
    return profile.short_name.replace(".", "").isalnum()


def smallest_fitting_profile(
    profiles: Sequence[GiProfile], memory_need_mib: float, sm_pct: float
) -> GiProfile | None:
    """The smallest profile (memory, then compute) whose memory holds the need plus
    `SLICE_HEADROOM_MIB` and whose compute share covers the SM demand; None if none does."""
    full = full_compute_slices(profiles)
    fitting = [
        p
        for p in profiles
        if p.compute_slices
        and memory_mib(p) >= memory_need_mib + SLICE_HEADROOM_MIB
        and compute_share_pct(p, full) >= sm_pct
    ]
    if not fitting:
        return None
    return min(fitting, key=lambda p: (p.memory_gib, p.compute_slices, not _is_plain(p), p.id))


def _fits(
    profiles: Sequence[GiProfile],
    placements: Mapping[int, Sequence[SliceSpan]],
    chosen: Sequence[GiProfile],
) -> bool:
    try:
        plan_layout(profiles, [str(p.id) for p in chosen], placements)
    except LayoutError:
        return False
    return True


def sm_of(job: QueuedDemand) -> float:
    """The SM share a slice must give the job: all of the GPU's for one that must run alone."""
    return FULL_GPU_PCT if job.alone else job.sm_pct


def pack_queue(
    profiles: Sequence[GiProfile],
    placements: Mapping[int, Sequence[SliceSpan]],
    queue: Sequence[QueuedDemand],
) -> tuple[list[tuple[QueuedDemand, GiProfile]], list[LeftOut], int]:
    """The slices for the queue, in queue order, as many as the GPU holds: (job, profile) pairs,
    the jobs left out (at most MAX_LEFT_OUT_LISTED of them) and how many were left out. A held
    job is left out, so said: it does not start until released, so a slice made for it would
    sit idle (and `auto`, which weighs only jobs that can start, would not make it)."""
    chosen: list[tuple[QueuedDemand, GiProfile]] = []
    left_out: list[LeftOut] = []
    total_left_out = 0
    full = False
    for job in queue:
        reason = None
        if job.held:
            reason = HELD_REASON
        elif full:
            reason = "queued behind a job that no longer fits on this GPU"
        elif (profile := smallest_fitting_profile(profiles, job.memory_mib, sm_of(job))) is None:
            reason = (
                f"no profile fits {job.memory_mib / MIB_PER_GIB:.1f} GiB + "
                f"{SLICE_HEADROOM_MIB / MIB_PER_GIB:.1f} GiB and {sm_of(job):.0f}% SM: "
                f"it needs a whole GPU"
            )
        elif _fits(profiles, placements, [p for _, p in chosen] + [profile]):
            chosen.append((job, profile))
        else:
            full = True
            reason = f"no room left for a {profile.short_name} next to the slices before it"
        if reason is not None:
            total_left_out += 1
            if len(left_out) < MAX_LEFT_OUT_LISTED:
                left_out.append(LeftOut(job.job_id, job.name, reason))
    return chosen, left_out, total_left_out


def spare_profiles(
    profiles: Sequence[GiProfile],
    placements: Mapping[int, Sequence[SliceSpan]],
    chosen: Sequence[GiProfile],
) -> list[GiProfile]:
    """Slices for jobs still to come, in the room `chosen` leaves: the queue's own profiles
    again, in queue order, while one fits, then the smallest plain profile while it fits. A
    layout changes only while its GPU is idle, so room left uncarved would sit unused until the
    GPU next empties; more jobs like the queue's are the best guess of what comes next."""
    spare: list[GiProfile] = []
    plain = sorted(
        (p for p in profiles if p.compute_slices and _is_plain(p)),
        key=lambda p: (p.memory_gib, p.compute_slices, p.id),
    )
    for candidates in (list(chosen), plain[:1]):
        placed = True
        while placed and candidates:
            placed = False
            for profile in candidates:
                if _fits(profiles, placements, [*chosen, *spare, profile]):
                    spare.append(profile)
                    placed = True
    return spare


# ------------------------------------------------------------------------------- planning
def _mode_message(gpu: GpuMigState, simulated: bool, commands_from: MigCommands) -> str:
    pending = gpu.mig_mode == "pending"
    mode = MigMode("disabled", "enabled" if pending else "disabled")
    message = commands_from.mode_message(gpu.index, mode)
    if simulated and not pending:
        message += (
            " On this SIMULATED station, MIG mode comes from the [station] mig table: "
            f"give GPU {gpu.index} a layout there."
        )
    return message


def plan_gpu(
    gpu: GpuMigState,
    queue: Sequence[QueuedDemand],
    *,
    repartition_allowed: bool,
    simulated: bool,
    commands_from: MigCommands,
) -> MigPlan:
    """The plan for one GPU. `commands_from` builds the nvidia-smi command lines (its dry-run
    path; nothing runs)."""
    chosen, left_out, left_out_total = (
        pack_queue(gpu.profiles, gpu.placements, queue) if gpu.profiles else ([], [], 0)
    )  # a real GPU lists its profiles only in MIG mode
    wanted = tuple(
        WantedSlice(
            p.short_name,
            p.id,
            memory_mib(p),
            p.compute_slices,
            job.job_id,
            job.name,
            job.memory_mib,
            job.sm_pct,
        )
        for job, p in chosen
    )
    spare = spare_profiles(gpu.profiles, gpu.placements, [p for _, p in chosen]) if chosen else []
    wanted_names = [s.profile for s in wanted] + [p.short_name for p in spare]
    unchanged = not wanted or Counter(wanted_names) == Counter(gpu.current)
    commands: tuple[str, ...] = ()
    if not unchanged:
        argvs = commands_from.plan_apply_to(
            gpu.index,
            [str(s.profile_id) for s in wanted] + [str(p.id) for p in spare],
            gpu.profiles,
            gpu.placements,
            gpu_instances=gpu.has_gpu_instances,
            compute_instances=gpu.has_compute_instances,
        )
        commands = tuple(shlex.join(a) for a in [*argvs, commands_from.verify_argv()] if a)

    blockers = apply_blockers(
        gpu,
        repartition_allowed=repartition_allowed,
        simulated=simulated,
        commands_from=commands_from,
    )
    nothing = None
    if not gpu.profiles:
        if gpu.mig_enabled:
            nothing = f"nvidia-smi lists no MIG profiles for GPU {gpu.index}."
    elif not wanted:
        kept = f"; its layout ({', '.join(gpu.current)}) stays" if gpu.current else ""
        nothing = f"No queued job needs a MIG slice on GPU {gpu.index}{kept}."
    elif unchanged:
        nothing = f"GPU {gpu.index} already has this layout."
    if nothing is not None:
        at = 1 if blockers and blockers[0].code == BLOCKED_MIG_MODE else 0
        blockers.insert(at, Blocker(BLOCKED_NOTHING_TO_CHANGE, nothing))
    return MigPlan(
        gpu=gpu.index,
        gpu_name=gpu.name,
        mig_mode=gpu.mig_mode,
        simulated=simulated,
        current=gpu.current,
        wanted=wanted,
        spare=tuple(p.short_name for p in spare),
        left_out=tuple(left_out),
        left_out_total=left_out_total,
        commands=commands,
        blockers=tuple(blockers),
        enable_hint=None if gpu.mig_enabled else commands_from.enable_hint(gpu.index),
        running_job_ids=gpu.running_job_ids,
    )


def apply_blockers(
    gpu: GpuMigState, *, repartition_allowed: bool, simulated: bool, commands_from: MigCommands
) -> list[Blocker]:
    """Why the engine may not give this GPU a new layout now, whatever the layout."""
    blockers = []
    if not gpu.mig_enabled:
        blockers.append(Blocker(BLOCKED_MIG_MODE, _mode_message(gpu, simulated, commands_from)))
    if gpu.running_job_ids:
        listed = ", ".join(str(j) for j in gpu.running_job_ids)
        blockers.append(
            Blocker(
                BLOCKED_BUSY,
                f"Job(s) {listed} run on GPU {gpu.index}: its MIG layout can "
                f"change only while no job runs on it or its slices.",
            )
        )
    if not repartition_allowed:
        blockers.append(
            Blocker(
                BLOCKED_BY_CONFIG,
                "The station config does not allow the engine to repartition "
                "GPUs: set mig_repartition = true in [station] to allow it.",
            )
        )
    return blockers


def plan_station(
    gpus: Sequence[GpuMigState],
    queue: Sequence[QueuedDemand],
    *,
    repartition_allowed: bool,
    simulated: bool,
    commands_from: MigCommands,
) -> list[MigPlan]:
    """A plan per GPU, in index order. The GPUs that could take a new layout now (MIG mode on,
    idle) plan first, in index order, then the others, in index order; each claims the jobs its
    plan gives a slice and the next plans for the jobs left, so no job is given a slice on two
    GPUs (a job runs on one)."""
    plans = {}
    left = list(queue)
    by_index = sorted(gpus, key=lambda g: g.index)
    ready = [g for g in by_index if g.mig_enabled and g.idle]
    for gpu in [*ready, *(g for g in by_index if g not in ready)]:
        plan = plan_gpu(
            gpu,
            left,
            repartition_allowed=repartition_allowed,
            simulated=simulated,
            commands_from=commands_from,
        )
        plans[gpu.index] = plan
        claimed = {s.job_id for s in plan.wanted}
        left = [job for job in left if job.job_id not in claimed]
    return [plans[index] for index in sorted(plans)]


# ------------------------------------------------------------------------ simulated models
def simulated_profiles(
    model: GpuModel, gpu: int
) -> tuple[tuple[GiProfile, ...], dict[int, tuple[SliceSpan, ...]]]:
    """A simulated GPU's `-lgip` profiles and `-lgipp` placements, from its model's profile
    table (empty for a model without one), as nvidia-smi would list them."""
    if not model.mig_capable:
        return (), {}
    table = [p for p in table_for_gpu(model.name) if p.simulated]
    profiles = tuple(
        GiProfile(
            gpu=gpu,
            name=f"MIG {p.name}",
            short_name=p.name,
            id=p.id,
            free=p.instances,
            total=p.instances,
            memory_gib=p.memory_mib / MIB_PER_GIB,
            sm=model.sm_count * p.compute_slices // COMPUTE_SLICES,
        )
        for p in table
    )
    return profiles, {p.id: p.placements for p in table}
