"""MIG planning on the engine's station: read each MIG-capable GPU's state, plan, and check or
carry out a layout change.

A simulated station (`sim:*`) takes its profiles from its model's table and its layout from the
station's `mig` table; changing it is the engine's business (a new station config), never
nvidia-smi's. A real station is read and changed through nvidia-smi (`GPUDESK_NVIDIA_SMI`) with
MigManager: every call has a timeout, so the engine loop, which calls this, waits at most that
long per call (as it does for its MPS checks).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

import msgspec

from gpudesk.core.mig_layout import (
    MigError,
    UnknownGpuError,
    plan_layout,
    resolve_profile,
    split_profiles,
)
from gpudesk.core.mig_records import GpuEntry, MigMode, MigSlot
from gpudesk.hw.mig.manager import MigManager
from gpudesk.hw.mig.nvidia_smi import DEFAULT_TIMEOUT, MIG_MODE_KINDS, NvidiaSmiError
from gpudesk.hw.telemetry.backend import TelemetryBackend
from gpudesk.hw.telemetry.sim import SimBackend
from gpudesk.policy.mig_planner import (
    Blocker,
    GpuMigState,
    MigPlan,
    QueuedDemand,
    apply_blockers,
    plan_station,
    simulated_profiles,
)

QUERY_TIMEOUT_S = 10.0  # per nvidia-smi call while planning; applying allows DEFAULT_TIMEOUT
SETTLE_S = 5.0  # at most this long the engine waits for telemetry to show a changed layout
SIMULATED_NVIDIA_SMI = "nvidia-smi"  # shown in a simulated station's commands (never run)


class MigApplyRefused(MigError):
    """The engine may not change this GPU's layout now; `blockers` say why."""

    def __init__(self, message: str, blockers: Sequence[Blocker]) -> None:
        super().__init__(message)
        self.blockers = tuple(blockers)


class LayoutChange(msgspec.Struct, frozen=True):
    """A checked request to give a GPU a new layout."""

    gpu: GpuMigState
    profiles: tuple[str, ...]  # resolved short names, in the order asked
    commands: tuple[str, ...]  # what applying runs (shown, never run, on a simulated station)

    @property
    def unchanged(self) -> bool:
        return sorted(self.profiles) == sorted(self.gpu.current)


# ---------------------------------------------------------------------------------- reading
def simulated_gpus(
    backend: SimBackend, running: Mapping[int, tuple[int, ...]]
) -> list[GpuMigState]:
    """The simulated station's MIG-capable GPUs: in MIG mode when the station's `mig` table
    gives them a layout, each slice a GPU instance with its compute instance."""
    states = []
    for index in range(backend.count):
        profiles, placements = simulated_profiles(backend.model, index)
        if not profiles:
            continue
        current = tuple(backend.mig.get(index, ()))
        states.append(
            GpuMigState(
                index=index,
                name=backend.model.name,
                mig_mode="enabled" if index in backend.mig else "disabled",
                profiles=profiles,
                placements=placements,
                current=current,
                has_gpu_instances=bool(current),
                has_compute_instances=bool(current),
                running_job_ids=running.get(index, ()),
            )
        )
    return states


def real_gpus(manager: MigManager, running: Mapping[int, tuple[int, ...]]) -> list[GpuMigState]:
    """Every GPU nvidia-smi lists that can do MIG, with its profiles and instances when it is
    in MIG mode. Raises MigError when nvidia-smi cannot be run or read."""
    states = []
    modes = manager.mig_modes()
    for entry in manager.gpus():
        mode = modes.get(entry.index)
        state = mode.state if mode else "unknown"
        if state == "unsupported":
            continue
        if state not in ("enabled", "unknown"):
            states.append(
                GpuMigState(
                    entry.index, entry.name, state, running_job_ids=running.get(entry.index, ())
                )
            )
            continue
        try:
            states.append(_enabled_gpu(manager, entry, modes, running.get(entry.index, ())))
        except NvidiaSmiError as exc:  # the driver could not say the mode; nvidia-smi did now
            if exc.kind not in MIG_MODE_KINDS:
                raise
            if exc.kind != "mig-unsupported":
                states.append(
                    GpuMigState(
                        entry.index,
                        entry.name,
                        exc.kind.removeprefix("mig-"),
                        running_job_ids=running.get(entry.index, ()),
                    )
                )
    return states


def _enabled_gpu(
    manager: MigManager,
    entry: GpuEntry,
    modes: Mapping[int, MigMode],
    running_job_ids: tuple[int, ...],
) -> GpuMigState:
    profiles = manager.profiles(entry.index, modes)
    placements = manager.placements(entry.index)
    layout = manager.layout(entry.index, entry)
    return GpuMigState(
        index=entry.index,
        name=entry.name,
        mig_mode="enabled",
        profiles=tuple(profiles),
        placements=placements,
        current=tuple(
            g.short_name for g in sorted(layout.gpu_instances, key=lambda g: g.instance_id)
        ),
        has_gpu_instances=bool(layout.gpu_instances),
        has_compute_instances=bool(layout.compute_instances),
        running_job_ids=running_job_ids,
    )


def read_gpus(
    backend: TelemetryBackend,
    running: Mapping[int, tuple[int, ...]],
    timeout: float = QUERY_TIMEOUT_S,
) -> tuple[list[GpuMigState], MigManager]:
    """The station's MIG-capable GPUs, and the MigManager that builds (or runs) their commands.
    A station without GPUs and without nvidia-smi has none."""
    if isinstance(backend, SimBackend):
        return simulated_gpus(backend, running), MigManager(SIMULATED_NVIDIA_SMI)
    manager = MigManager(timeout=timeout)
    if manager.nvidia_smi is None and backend.name == "none":
        return [], manager
    return real_gpus(manager, running), manager


def _one(gpus: Sequence[GpuMigState], index: int) -> GpuMigState:
    for gpu in gpus:
        if gpu.index == index:
            return gpu
    known = ", ".join(str(g.index) for g in gpus) or "none"
    raise UnknownGpuError(
        f"GPU {index} is not a MIG-capable GPU of this station (MIG-capable GPUs: {known})."
    )


# --------------------------------------------------------------------------------- planning
def station_plans(
    gpus: Sequence[GpuMigState],
    manager: MigManager,
    queue: Sequence[QueuedDemand],
    *,
    repartition_allowed: bool,
    simulated: bool,
    gpu: int | None = None,
) -> list[MigPlan]:
    """The plan of every MIG-capable GPU (or of GPU `gpu`) as `read_gpus` read them: see
    mig_planner. Raises UnknownGpuError for a `gpu` that is not among them."""
    if gpu is not None:
        _one(gpus, gpu)
    plans = plan_station(
        gpus,
        queue,
        repartition_allowed=repartition_allowed,
        simulated=simulated,
        commands_from=manager,
    )
    return [p for p in plans if gpu is None or p.gpu == gpu]


# --------------------------------------------------------------------------------- applying
def check_change(
    backend: TelemetryBackend,
    gpu: int,
    profiles: Sequence[str] | str,
    running: Mapping[int, tuple[int, ...]],
    *,
    repartition_allowed: bool,
) -> tuple[LayoutChange, MigManager]:
    """Check that the engine may give GPU `gpu` this layout now: the station config allows it,
    the GPU is in MIG mode and idle, and the layout fits. Raises MigApplyRefused (not allowed),
    MigUsageError (no such GPU, an unknown profile, a layout that does not fit) or MigError."""
    gpus, manager = read_gpus(backend, running)
    state = _one(gpus, gpu)
    blockers = apply_blockers(
        state,
        repartition_allowed=repartition_allowed,
        simulated=backend.simulated,
        commands_from=manager,
    )
    if blockers:
        raise MigApplyRefused(
            f"GPU {gpu} keeps its MIG layout: " + " ".join(b.message for b in blockers), blockers
        )
    names = split_profiles(profiles)
    plan_layout(state.profiles, names, state.placements)  # raises when it cannot be made
    resolved = tuple(resolve_profile(state.profiles, name).short_name for name in names)
    argvs = manager.plan_apply_to(
        gpu,
        resolved,
        state.profiles,
        state.placements,
        gpu_instances=state.has_gpu_instances,
        compute_instances=state.has_compute_instances,
    )
    commands = tuple(shlex.join(a) for a in [*argvs, manager.verify_argv()])
    return LayoutChange(state, resolved, commands), manager


def apply_on_gpu(change: LayoutChange) -> list[MigSlot]:
    """Carry out a checked change on a real GPU through nvidia-smi (DEFAULT_TIMEOUT per call):
    the MIG devices it has afterwards."""
    return MigManager(timeout=DEFAULT_TIMEOUT).apply(change.gpu.index, list(change.profiles))
