"""Whether a job could start on this station as its GPUs are set up now (MIG mode, MIG
layouts, lost GPUs) once they drain, and, where it could not, what would let it: an admin
leaving MIG mode on a GPU, giving it a layout with a slice that holds the job, or a lost GPU
coming back.

A job the station could never run, whatever is changed on its GPUs, is refused at submit
(`policy.gpu_job_impossible`). One that fits the station only after such a change is accepted
and waits; this module is the one judgement of that case: the placement policies hold no GPU
for such a job (it could not use them, and later jobs would be pushed onto worse places for
nothing), and its waiting reason names the change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from gpudesk.core.mig_profiles import (
    CARVED_PROFILES,
    COMPUTE_SLICES,
    MigProfile,
    table_for_gpu,
)
from gpudesk.policy.policy import (
    RESERVE_MIB,
    GpuState,
    StationView,
    describe_gpus,
    gpus_named,
    in_words,
)
from gpudesk.units import gib


class MigRules(msgspec.Struct, frozen=True):
    """How a placement policy runs jobs on GPUs in MIG mode."""

    slices: bool = True  # a one-GPU job may run on a MIG slice (CARMA: never)
    slices_only: bool = False  # every one-GPU job runs on a slice (the `mig` mode)
    # an idle simulated MIG GPU whose slices may be carved (`mig_dynamic`) may be set whole again
    whole_when_dynamic: bool = True


class Ask(msgspec.Struct, frozen=True):
    """What a job needs of the station's GPUs."""

    gpus: int
    memory_mib: float  # on each GPU
    whole: bool  # whole GPUs to itself (several GPUs, after an OOM, or the `exclusive` mode)


def mig_table(gpu: GpuState) -> tuple[MigProfile, ...]:
    """The MIG profiles that may be carved on this GPU: its model's (simulated ones), else the
    A100 40GB's, the station the research measured."""
    table = tuple(p for p in table_for_gpu(gpu.model) if p.simulated) if gpu.model else ()
    return table or CARVED_PROFILES


def _carvable(gpu: GpuState, station: StationView) -> bool:
    """The GPU's slices may be given any layout the job needs: a simulated GPU carves them
    from free capacity; under `[station] mig_repartition` the engine relays an idle MIG-mode
    GPU for the queue (gpudesk.engine.station.repartition)."""
    return gpu.mig_dynamic or (gpu.mig_enabled and station.config.repartitions_on_its_own)


def room_once_drained(
    gpu: GpuState, whole: bool, rules: MigRules, station: StationView, one_gpu: bool = False
) -> float:
    """The most memory the GPU could give one job once its tenants have left, as it is set up
    now: all of it but the reserve where the job may use it whole, else its largest slice (or
    profile that may be carved); -inf where it runs no such job (a lost GPU, a GPU in MIG mode
    for a job that needs whole GPUs: MIG mode is never toggled). A one-GPU job that must run
    alone (`one_gpu`, after an out-of-memory death) may have a GPU in MIG mode whose one slice
    holds all of its compute (`full_slice_mib`)."""
    full = gpu.memory_total_mib - RESERVE_MIB
    if gpu.lost:
        return -math.inf
    if whole:
        usable = not gpu.mig_enabled or (gpu.mig_dynamic and rules.whole_when_dynamic)
        if usable:
            return full
        return full_slice_mib(gpu, station) if one_gpu else -math.inf
    if not rules.slices:
        return -math.inf if gpu.mig_enabled else full
    if not (gpu.mig_enabled or rules.slices_only):
        return full
    if _carvable(gpu, station):
        return max((p.memory_mib for p in mig_table(gpu)), default=-math.inf)
    return max((s.memory_mib for s in gpu.mig_slices), default=-math.inf)


def full_slice_mib(gpu: GpuState, station: StationView) -> float:
    """The memory of the GPU's MIG slice that holds all its compute (a 7g profile), which a job
    that must run alone may take: one it has, or one the engine may carve (`_carvable`);
    -inf where there is none."""
    slices = [s.memory_mib for s in gpu.mig_slices if s.holds_all_compute]
    if _carvable(gpu, station):
        slices += [p.memory_mib for p in mig_table(gpu) if p.compute_slices >= COMPUTE_SLICES]
    return max(slices, default=-math.inf)


def gpus_for(ask: Ask, rules: MigRules, station: StationView) -> list[GpuState]:
    """The GPUs not lost that could run the job once they drain, as they are set up now."""
    return [
        g
        for g in station.gpu_states
        if room_once_drained(g, ask.whole, rules, station, ask.gpus == 1) >= ask.memory_mib
    ]


def most_memory_as_is(gpus: int, whole: bool, rules: MigRules, station: StationView) -> float:
    """The most memory (per GPU) a job of `gpus` GPUs, whole or not, may need and still start
    on the station as it is set up now, once GPUs drain: the `gpus`-th largest room."""
    rooms = sorted(
        room_once_drained(g, whole, rules, station, gpus <= 1) for g in station.gpu_states
    )
    need = max(1, gpus)
    return rooms[-need] if len(rooms) >= need else -math.inf


def runs_as_is(ask: Ask, rules: MigRules, station: StationView) -> bool:
    """Whether enough GPUs could run the job once they drain: else it waits for a change, and
    no GPU is held for it."""
    return ask.memory_mib <= most_memory_as_is(ask.gpus, ask.whole, rules, station)


class AsIs(msgspec.Struct):
    """`runs_as_is` over one placement pass: worked out once per job shape (GPUs, whole), since
    the MIG setup does not change within a pass and a long queue asks for every job."""

    rules: MigRules
    station: StationView
    limits: dict[tuple[int, bool], float] = msgspec.field(default_factory=dict)

    def __call__(self, gpus: int, whole: bool, memory_mib: float) -> bool:
        """`runs_as_is` for a job of this shape (plain values: no `Ask` on the hot path)."""
        key = (gpus, whole)
        limit = self.limits.get(key)
        if limit is None:
            limit = self.limits[key] = most_memory_as_is(gpus, whole, self.rules, self.station)
        return memory_mib <= limit


def _leave_mig(indices: Sequence[int], station: StationView) -> str:
    """How an admin takes GPUs out of MIG mode, on this station."""
    named = gpus_named(indices)
    if station.simulated:
        return f"on this simulated station: {named} out of the [station] mig layout"
    listed = ",".join(map(str, indices))
    return f"as root, with nothing running there: nvidia-smi -i {listed} -mig 0"


def _set_layouts(slices: Sequence[tuple[int, str]], station: StationView) -> str:
    """How an admin gives each GPU (index) a layout with the slice (profile name), on this
    station: a simulated GPU's layout is a station setting, and nvidia-smi (under `gpudesk mig
    apply`) would change the host's GPUs instead."""
    if station.simulated:
        given = in_words([f"{name} for GPU {index}" for index, name in slices])
        return f"on this simulated station: {given} in the [station] mig layout"
    return in_words([f"gpudesk mig apply --gpu {index} {name}" for index, name in slices])


def _slice_for(gpu: GpuState, memory_mib: float) -> MigProfile | None:
    """The smallest profile of the GPU's model that holds the job."""
    fitting = [p for p in mig_table(gpu) if p.memory_mib >= memory_mib]
    return min(fitting, key=lambda p: (p.memory_mib, p.compute_slices), default=None)


def wait_for_change(ask: Ask, rules: MigRules, station: StationView, policy: str) -> str:
    """Why the job cannot start on this station as it is set up now, and what change would let
    it; "" when it could start once GPUs drain (`runs_as_is`)."""
    usable = gpus_for(ask, rules, station)
    missing = max(1, ask.gpus) - len(usable)
    if missing <= 0:
        return ""
    if ask.whole:
        asks = f"it needs {ask.gpus} whole GPU{'s' if ask.gpus != 1 else ''}"
    else:
        asks = f"it needs {gib(ask.memory_mib)} on one GPU" + (
            ", on a MIG slice (policy mig)" if rules.slices_only else ""
        )
    has = f"this station has {describe_gpus(station)}"
    in_mig = [g for g in station.gpu_states if g.mig_enabled and not g.lost and g not in usable]
    if in_mig and (ask.whole or not rules.slices):
        has += ", and a GPU in MIG mode runs jobs on its slices only"
    elif in_mig:
        has += f", and no slice there holds {gib(ask.memory_mib)}"
    # GPUs in MIG mode that would hold the job whole
    leavable = [g for g in in_mig if g.memory_total_mib - RESERVE_MIB >= ask.memory_mib]
    if not rules.slices_only and len(leavable) >= missing:
        chosen = leavable[:missing]
        indices = [g.index for g in chosen]
        change = f"Leaving MIG mode on {gpus_named(indices)} ({_leave_mig(indices, station)})"
        if not ask.whole and rules.slices:
            slices = [
                (g.index, profile.name)
                for g in chosen
                if (profile := _slice_for(g, ask.memory_mib)) is not None
            ]
            if len(slices) == len(chosen):
                change += (
                    f", or a layout with a slice that holds it ({_set_layouts(slices, station)}),"
                )
        return f"waiting for an admin: {asks}; {has}. {change} would let it start"
    lost = [g.index for g in station.gpu_states if g.lost]
    if len(lost) >= missing:
        back = "is" if len(lost) == 1 else "are"
        named = gpus_named(lost)
        return f"waiting for a lost GPU: {asks}; {has}. It can start once {named} {back} back"
    return (
        f"waiting for a change to the station: {asks}; {has}. Under policy {policy} it can start "
        "only once an admin changes the GPUs' MIG setup or the [station] policy"
    )
