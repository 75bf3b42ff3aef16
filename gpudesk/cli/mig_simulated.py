"""`gpudesk mig profiles` and `mig list` on a simulated station (`sim:*`): its GPUs and their MIG
slices are the engine's simulator's, so nvidia-smi has nothing to say about them. They are read
from the engine, as `mig plan` reads them: the layout from its MIG plan and its telemetry, the
profiles from the model's table (the one the simulator carves slices from)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from gpudesk.api.models import GpuView, MigDeviceView, MigPlanView
    from gpudesk.core.mig_profiles import SliceSpan
    from gpudesk.core.mig_records import GiProfile, MigSlot

SNAPSHOT_WAIT_S = 5.0  # an engine just started takes its first sample within a second or two


@dataclass(frozen=True)
class SimulatedStation:
    """What the engine of a simulated station says of its GPUs and their MIG layouts."""

    backend: str
    gpus: list[GpuView]  # every GPU of the latest sample, with its MIG devices
    plans: dict[int, MigPlanView]  # the MIG-capable GPUs, by index: mode and current layout


def simulated_station() -> SimulatedStation | None:
    """This home's station when it is simulated, else None (nvidia-smi answers for a real one).
    Only a running engine is asked: `profiles` and `list` only read, and never start one (as
    `gpudesk queue` and `top` do not). A simulated station's layout is its engine's (the
    station's `mig` setting, in a store only the engine reads), so where GPUDESK_BACKEND names
    a simulated station and no engine runs, that is said (exit 3, as a stopped engine's
    `queue`), with how to start one; a real station's nvidia-smi needs no engine."""
    from gpudesk.api.errors import EngineError
    from gpudesk.cli.common import current_home
    from gpudesk.cli.no_engine import running_client
    from gpudesk.core.backend_names import is_simulated

    asked_sim = is_simulated(os.environ.get("GPUDESK_BACKEND", ""))
    home = current_home()
    try:
        client = running_client(home)
    except EngineError:
        if asked_sim:
            raise
        return None  # an engine that does not answer: nvidia-smi then
    except Exception:  # another user's home (its lock not ours to read): nvidia-smi then
        if asked_sim:
            raise
        return None
    if client is None:
        if asked_sim:
            _not_running(home.root)
        return None  # a real station's nvidia-smi answers (or says what is missing)
    try:
        with client:
            station = client.status().station
            if not station.simulated:
                return None
            plans = {plan.gpu: plan for plan in client.mig_plan().plans}
            deadline = time.monotonic() + SNAPSHOT_WAIT_S
            snapshot = client.telemetry().snapshot
            while snapshot is None and time.monotonic() < deadline:
                time.sleep(0.1)
                snapshot = client.telemetry().snapshot
    except EngineError:
        if asked_sim:
            raise
        return None  # no engine to ask: nvidia-smi's own error says what is missing
    return SimulatedStation(station.effective_backend, snapshot.gpus if snapshot else [], plans)


def _not_running(root: object) -> NoReturn:
    from gpudesk.cli.common import fail
    from gpudesk.cli.exit_codes import EXIT_NOT_RUNNING

    backend = os.environ.get("GPUDESK_BACKEND", "")
    fail(
        f"GPUDESK_BACKEND={backend} is a SIMULATED station, whose MIG layout is its engine's "
        f"([station] mig), and no engine is running for {root}; this command only reads and "
        "does not start one: `gpudesk engine start` starts it",
        EXIT_NOT_RUNNING,
    )


def simulated_mode_note(gpu: int, gpu_name: str, mode: str) -> str:
    """What to do about a simulated GPU not in MIG mode: nothing on the machine (there is no
    nvidia-smi to run, no GPU to reset) but the station's `mig` table, which puts a GPU in MIG
    mode by giving it a layout."""
    from gpudesk.core.mig_profiles import table_for_gpu

    if mode != "disabled":  # a simulated GPU is either in MIG mode or not: nothing pends
        return "no MIG support" if mode == "unsupported" else f"MIG {mode}"
    halves = [p.name for p in table_for_gpu(gpu_name) if p.simulated and p.instances == 2]
    layout = ",".join(halves[:1] * 2) or "..."
    return (
        "MIG disabled (SIMULATED). A simulated GPU is in MIG mode when the station's `mig` "
        f'table gives it a layout: mig = {{ {gpu} = "{layout}" }} under [station].'
    )


# `nvidia-smi mig -lcip`: the compute instance that takes a whole GPU instance of N slices
# ("MIG 3g.20gb", marked *) is profile Nc's id (data/nvidia-smi lcip: 1c 0, 2c 1, 3c 2, ...)
FULL_CI_PROFILE_ID = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


def simulated_slots(gpu: int, devices: list[MigDeviceView]) -> list[MigSlot]:
    """A simulated GPU's MIG devices as `mig list` reads a real GPU's (no placement)."""
    from gpudesk.core.mig_records import MigSlot

    return [
        MigSlot(gpu, m.index, m.profile, m.uuid or "", m.gpu_instance_id, m.compute_instance_id)
        for m in sorted(devices, key=lambda m: m.index)
    ]


def simulated_layout_dict(gpu_name: str, slots: list[MigSlot]) -> dict[str, Any]:
    """`mig list --json`'s layout keys for a simulated GPU, as for a real one: each simulated
    slice is a GPU instance with one compute instance as large as itself."""
    from gpudesk.core.mig_profiles import table_for_gpu

    ids = {p.name: p.id for p in table_for_gpu(gpu_name)}

    def full_ci(profile: str) -> int | None:
        size = profile.partition("g.")[0]
        return FULL_CI_PROFILE_ID.get(int(size)) if size.isdigit() else None

    return {
        "mig_devices": [s.to_dict() for s in slots],
        "gpu_instances": [
            {"id": s.gpu_instance_id, "profile": s.profile, "profile_id": ids.get(s.profile)}
            | {"placement": None}
            for s in slots
        ],
        "compute_instances": [
            {"gpu_instance_id": s.gpu_instance_id, "id": s.compute_instance_id}
            | {"profile": s.profile, "profile_id": full_ci(s.profile), "placement": None}
            for s in slots
        ],
    }


def simulated_profiles(
    plan: MigPlanView,
) -> tuple[list[GiProfile], dict[int, tuple[SliceSpan, ...]]]:
    """A simulated GPU's instance profiles as `nvidia-smi mig -lgip` would list them, each with
    how many more instances fit beside its current layout, and their placements."""
    from gpudesk.core.mig_layout import MigError, plan_layout
    from gpudesk.core.mig_profiles import table_for_gpu
    from gpudesk.core.mig_records import GiProfile
    from gpudesk.units import MIB_PER_GIB

    table = [p for p in table_for_gpu(plan.name) if p.simulated]
    places = {p.id: p.placements for p in table}
    whole = [
        GiProfile(
            gpu=plan.gpu,
            name=f"MIG {p.name}",
            short_name=p.name,
            id=p.id,
            free=p.instances,
            total=p.instances,
            memory_gib=round(p.memory_mib / MIB_PER_GIB, 2),
        )
        for p in table
    ]
    try:
        occupied = [i.placement for i in plan_layout(whole, plan.current, places)]
    except MigError:
        occupied = [] if not plan.current else [s for p in table for s in p.placements]

    def free(profile: GiProfile) -> int:
        for count in range(profile.total, 0, -1):
            try:
                plan_layout(whole, [profile.short_name] * count, places, occupied)
                return count
            except MigError:
                continue
        return 0

    profiles = [
        GiProfile(
            gpu=p.gpu,
            name=p.name,
            short_name=p.short_name,
            id=p.id,
            free=free(p) if plan.current else p.total,
            total=p.total,
            memory_gib=p.memory_gib,
        )
        for p in whole
    ]
    return profiles, places
