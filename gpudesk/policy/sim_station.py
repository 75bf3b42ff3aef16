"""The simulated station: its GPU model and count from the backend name (`sim:MODEL[xN]`), the
MIG layouts `--mig` fixes on some of its GPUs, and its MIG slices, made from each model's own
table (a GPU given a layout keeps it; the rest are carved on demand under `--policy mig`). What
the truth says a job can never run here is judged on it too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gpudesk.core.backend_names import check_backend_name, parse_sim_name
from gpudesk.core.gpu_models import STATIONS, GpuModel
from gpudesk.core.mig_profiles import (
    MEMORY_SLICES,
    compute_slices,
    find_profile,
    nominal_memory_mib,
    short_name,
)
from gpudesk.policy.policy import MigSlice, Placement
from gpudesk.policy.trace import TraceJob, parse_mig
from gpudesk.units import MIB_PER_GIB

if TYPE_CHECKING:
    from gpudesk.policy.sim_records import SimRun
    from gpudesk.policy.simulator import Simulation


def station_gpus(station: str) -> tuple[GpuModel, int]:
    """The simulated station's GPU model and how many it has."""
    check_backend_name(station)
    if not station.startswith("sim:"):
        raise ValueError(f"simulate needs a simulated station (sim:...), not {station!r}")
    model_name, count = parse_sim_name(station)
    return STATIONS[model_name][0], count or STATIONS[model_name][1]


def fixed_layouts(
    sim: Simulation, mig: Mapping[int, Sequence[str]] | str | None
) -> dict[int, tuple[str, ...]]:
    """The MIG layouts `--mig` gives GPUs of the station (a `parse_mig` text or a mapping)."""
    layouts = parse_mig(mig, sim.model.name, sim.gpu_count) if isinstance(mig, str) else mig
    return {g: tuple(n) for g, n in (layouts or {}).items()}


def carve_fixed(sim: Simulation, layouts: Mapping[int, Sequence[str]]) -> None:
    """The GPUs given a layout get its slices and keep them (`sim.fixed`)."""
    for gpu, names in layouts.items():
        if not 0 <= gpu < sim.gpu_count:
            raise ValueError(f"--mig: GPU {gpu} does not exist on {sim.station}")
        sim.fixed.add(gpu)
        sim.slices[gpu] = [new_slice(sim, gpu, name) for name in names]


def new_slice(sim: Simulation, gpu: int, name: str, key: str | None = None) -> MigSlice:
    profile = find_profile(name, sim.table)
    if key is None:
        sim.slice_serial += 1
        key = f"MIG-SIM-{gpu}-{sim.slice_serial}"
    if profile is not None:
        return MigSlice(key, profile.name, profile.memory_mib, profile.compute_slices)
    return MigSlice(key, short_name(name), nominal_memory_mib(name), compute_slices(name))


def slice_shape(sim: Simulation, mig: MigSlice) -> tuple[int, int]:
    """(compute slices, memory slices) of a slice, from this model's table."""
    profile = find_profile(mig.profile, sim.table)
    if profile is not None:
        return profile.compute_slices, profile.memory_slices
    # a profile this model does not have (a policy that carves another model's table):
    # its memory's share of the GPU, in whole memory slices
    share = mig.memory_mib / sim.model.memory_total_mib
    return mig.compute_slices, max(1, min(MEMORY_SLICES, math.ceil(share * MEMORY_SLICES)))


def slice_of(sim: Simulation, run: SimRun) -> MigSlice | None:
    """The MIG slice a running job was placed on (None when it is gone)."""
    key = run.placed.mig_slice
    gpu = run.placed.gpus[0]
    return next((s for s in sim.slices[gpu] if s.key == key), None)


def slice_for(sim: Simulation, placement: Placement) -> MigSlice:
    """The slice a MIG placement names: one the GPU has, else carved on demand now."""
    gpu = placement.gpus[0]
    mig = next((s for s in sim.slices[gpu] if s.key == placement.mig_slice), None)
    if mig is None:  # carved on demand
        mig = new_slice(sim, gpu, placement.slot.split("/", 1)[1], placement.mig_slice)
        sim.slices[gpu].append(mig)
    return mig


def impossible(sim: Simulation, job: TraceJob) -> str | None:
    """Why the job can never run here, judged on the truth (the policy never knows it)."""
    if job.gpus > sim.gpu_count:
        return f"asks for {job.gpus} GPUs; {sim.station} has {sim.gpu_count}"
    whole = sim.gpu_count - len(sim.fixed)
    if job.gpus > 1 and job.gpus > whole:
        # a multi-GPU job runs on whole GPUs only, and the engine never takes a GPU out of MIG
        # mode (an admin does): on the station as given it waits for ever
        return (
            f"asks for {job.gpus} whole GPUs; {whole} of {sim.station}'s {sim.gpu_count} are "
            "whole (the others are in MIG mode as given, which the engine never switches off)"
        )
    if job.peak_memory_mib > sim.model.memory_total_mib:
        return (
            f"needs {job.peak_memory_mib / MIB_PER_GIB:.1f} GiB at its peak; a "
            f"{sim.model.name} has {sim.model.memory_total_mib / MIB_PER_GIB:.1f} GiB"
        )
    return None
