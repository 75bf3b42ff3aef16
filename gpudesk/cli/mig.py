"""`gpudesk mig`: MIG partitions through nvidia-smi. `profiles`, `list`, `apply` and `clear` need
nothing but nvidia-smi: no engine, no NVML. `plan` and `apply-plan` ask the engine for the layout
its queue would want (gpudesk.policy.mig_planner) and apply it through the engine: those two
live in gpudesk.cli.mig_plan and are registered here, after the others."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpudesk import render
from gpudesk.cli.common import fail, print_json
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.cli.mig_common import NO_MIG_GPU, GpuOption, JsonOption
from gpudesk.cli.mig_common import engine_errors as _engine_errors
from gpudesk.cli.mig_common import gpu_title as _gpu_title
from gpudesk.cli.mig_common import paragraph as _paragraph
from gpudesk.cli.mig_common import table as _table
from gpudesk.cli.mig_plan import apply_plan_cmd, plan_cmd
from gpudesk.cli.std_streams import already_done

if TYPE_CHECKING:
    from gpudesk.cli.mig_simulated import SimulatedStation
    from gpudesk.core.mig_profiles import SliceSpan
    from gpudesk.core.mig_records import GiProfile, GpuEntry, MigLayout, MigSlot
    from gpudesk.hw.mig.nvidia_smi import NvidiaSmiError

# gpudesk.hw.mig is imported inside the commands: every `gpudesk` command loads this module
# (it is registered in gpudesk.cli.main), and the MIG layer costs ~25-40 ms to import.

# On a simulated station `profiles` and `list` answer from the engine (gpudesk.cli.mig_simulated).
mig_app = typer.Typer(help="MIG partitions through nvidia-smi.", no_args_is_help=True)

DryRunOption = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Print the nvidia-smi commands that would run, one per line, and change nothing.",
    ),
]


@contextmanager
def _mig_errors() -> Iterator[None]:
    from gpudesk.core.mig_layout import MigError, MigUsageError

    try:
        yield
    except MigUsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except MigError as exc:
        fail(str(exc), EXIT_FAILED)


def _placements_text(placements: tuple[SliceSpan, ...]) -> str:
    if not placements:
        return "-"
    sizes = {p.size for p in placements}
    starts = ",".join(str(p.start) for p in placements)
    return f"{{{starts}}}:{sizes.pop()}" if len(sizes) == 1 else " ".join(map(str, placements))


def _mode_note(gpu: int, state: str) -> str:
    from gpudesk.hw.mig.nvidia_smi import enable_hint

    return {
        "disabled": f"MIG disabled. {enable_hint(gpu)}",
        "pending": f"MIG enabled but pending a GPU reset: {render.gpu_reset_advice(gpu)}",
        "unsupported": "no MIG support",
    }.get(state, f"MIG {state}")


# ---------------------------------------------------------------------------- profiles
@dataclass(frozen=True)
class _GpuProfiles:
    """A MIG GPU's instance profiles and where each may be placed."""

    entry: GpuEntry
    profiles: list[GiProfile]
    places: dict[int, tuple[SliceSpan, ...]]
    simulated: bool = False
    # a simulated GPU not in MIG mode: its mode and what to do, above the profiles it would offer
    mode: str = "enabled"
    note: str | None = None


@dataclass(frozen=True)
class _Skipped:
    """A GPU not in MIG mode (listed without profiles): its mode and what to do about it."""

    entry: GpuEntry
    mode: str  # disabled, pending, unsupported
    problem: str
    simulated: bool = False


@mig_app.command("profiles")
def profiles_cmd(
    gpu: Annotated[int | None, typer.Option("--gpu", "-g", min=0, help="Only this GPU.")] = None,
    json_out: JsonOption = False,
) -> None:
    """The GPU instance profiles each MIG-enabled (or simulated) GPU offers.

    Free/total counts, memory, engines, and placements (start:size in memory slices)."""
    from gpudesk.cli.mig_simulated import simulated_station

    with _engine_errors():
        station = simulated_station()
    found, skipped = _read_profiles(gpu) if station is None else _simulated_profiles(station, gpu)
    if not found and not skipped:  # as where every GPU is one without MIG: nothing to list
        fail(NO_MIG_GPU, EXIT_FAILED)
    if json_out:
        print_json({"gpus": _profiles_json(found, skipped)})
        return
    blocks = [(f.entry.index, _profiles_text(f)) for f in found]
    blocks += [
        (
            s.entry.index,
            f"{_gpu_title(s.entry.index, s.entry.name, s.simulated)}\n{_paragraph(s.problem)}",
        )
        for s in skipped
    ]
    print("\n\n".join(text for _, text in sorted(blocks)))


def _simulated_profiles(
    station: SimulatedStation, gpu: int | None
) -> tuple[list[_GpuProfiles], list[_Skipped]]:
    """Each simulated MIG-capable GPU's profiles (from its model's table), as `_read_profiles`
    reads a real station's."""
    from gpudesk.cli.mig_simulated import simulated_mode_note, simulated_profiles
    from gpudesk.core.mig_records import GpuEntry

    if gpu is not None and gpu not in station.plans:
        known = ", ".join(str(i) for i in sorted(station.plans)) or "none"
        fail(
            f"GPU {gpu} is not a MIG-capable GPU of this station (MIG-capable GPUs: {known}).",
            EXIT_USAGE,
        )
    uuids = {g.index: g.uuid or "" for g in station.gpus}
    found: list[_GpuProfiles] = []
    skipped: list[_Skipped] = []
    for plan in (p for i, p in sorted(station.plans.items()) if gpu is None or i == gpu):
        entry = GpuEntry(plan.gpu, plan.name, uuids.get(plan.gpu, ""))
        profiles, places = simulated_profiles(plan)
        if plan.mig_enabled:
            found.append(_GpuProfiles(entry, profiles, places, simulated=True))
            continue
        note = simulated_mode_note(plan.gpu, plan.name, plan.mig_mode)
        if not profiles:  # a model without a profile table
            skipped.append(_Skipped(entry, plan.mig_mode, note, simulated=True))
            continue
        # A real GPU lists its profiles only in MIG mode (nvidia-smi mig -lgip); a simulated
        # one has its model's table whatever its mode: what it would offer is listed, as the
        # planner plans on it, rather than an error for want of a mode nothing here can set.
        note += " In MIG mode it would offer:"
        found.append(_GpuProfiles(entry, profiles, places, True, plan.mig_mode, note))
    return found, skipped


def _read_profiles(gpu: int | None) -> tuple[list[_GpuProfiles], list[_Skipped]]:
    """Each asked-for GPU's profiles; with no `--gpu`, GPUs not in MIG mode are skipped with
    the reason (an error only when none is in MIG mode)."""
    from gpudesk.core.mig_layout import MigError, derive_placements
    from gpudesk.hw.mig.manager import MigManager
    from gpudesk.hw.mig.nvidia_smi import MIG_MODE_KINDS, NvidiaSmiError

    manager = MigManager()
    found: list[_GpuProfiles] = []
    skipped: list[tuple[GpuEntry, NvidiaSmiError]] = []
    with _mig_errors():
        targets = [manager.gpu(gpu)] if gpu is not None else manager.gpus()
        modes = manager.mig_modes()
        for entry in targets:
            try:
                profiles = manager.profiles(entry.index, modes)
                placements = manager.placements(entry.index)
            except NvidiaSmiError as exc:
                if gpu is not None or exc.kind not in MIG_MODE_KINDS:
                    raise
                skipped.append((entry, exc))
                continue
            derived = derive_placements(profiles)
            places = {p.id: placements.get(p.id) or derived.get(p.id, ()) for p in profiles}
            found.append(_GpuProfiles(entry, profiles, places))
        if not found and len(skipped) == 1:
            raise skipped[0][1]
        if not found and skipped:  # every GPU: said of each, not of the first alone
            said = " ".join(f"GPU {e.index}: {exc}" for e, exc in skipped)
            raise MigError(
                f"no GPU here is in MIG mode, and nvidia-smi lists a GPU's profiles "
                f"only in MIG mode. {said}"
            )
    return found, [_Skipped(e, exc.kind.removeprefix("mig-"), str(exc)) for e, exc in skipped]


def _profiles_json(found: list[_GpuProfiles], skipped: list[_Skipped]) -> list[dict[str, Any]]:
    gpus: list[dict[str, Any]] = [
        {
            "index": f.entry.index,
            "name": f.entry.name,
            "uuid": f.entry.uuid,
            "simulated": f.simulated,
            "mig_mode": f.mode,
            **({"problem": f.note} if f.note else {}),
            "profiles": [
                {
                    "id": p.id,
                    "name": p.short_name,
                    "free": p.free,
                    "total": p.total,
                    "memory_gib": p.memory_gib,
                    "sm": p.sm,
                    "ce": p.ce,
                    "dec": p.dec,
                    "enc": p.enc,
                    "jpeg": p.jpeg,
                    "ofa": p.ofa,
                    "p2p": p.p2p,
                    "placements": [str(pl) for pl in f.places[p.id]],
                }
                for p in f.profiles
            ],
        }
        for f in found
    ]
    gpus += [
        {
            "index": s.entry.index,
            "name": s.entry.name,
            "uuid": s.entry.uuid,
            "simulated": s.simulated,
            "mig_mode": s.mode,
            "problem": s.problem,
            "profiles": [],
        }
        for s in skipped
    ]
    return sorted(gpus, key=lambda g: g["index"])


_PROFILE_HEADERS = (
    "ID",
    "PROFILE",
    "FREE/TOTAL",
    "MEMORY",
    "SM",
    "CE",
    "DEC",
    "ENC",
    "JPEG",
    "OFA",
    "PLACEMENTS",
)


def _profiles_text(found: _GpuProfiles) -> str:
    rows = [
        (
            p.id,
            p.short_name,
            f"{p.free}/{p.total}",
            f"{p.memory_gib:.2f} GiB",
            # a simulated GPU models no engine counts: "-", not a made-up figure
            *("-" if n is None else n for n in (p.sm, p.ce, p.dec, p.enc, p.jpeg, p.ofa)),
            _placements_text(found.places[p.id]),
        )
        for p in found.profiles
    ]
    # the engine counts give way first, then where it may sit; the profile and its size stay
    table = _table(
        _PROFILE_HEADERS, rows, right=(0, 4, 5, 6, 7, 8, 9), optional=(3, 10, 4, 5, 6, 7, 8, 9)
    )
    note = f"\n{_paragraph(found.note)}" if found.note else ""
    return _gpu_title(found.entry.index, found.entry.name, found.simulated) + note + "\n" + table


# -------------------------------------------------------------------------------- list
def _layout_dict(layout: MigLayout) -> dict[str, Any]:
    return {
        "mig_devices": [s.to_dict() for s in layout.slots],
        "gpu_instances": [
            {
                "id": g.instance_id,
                "profile": g.short_name,
                "profile_id": g.profile_id,
                "placement": str(g.placement),
            }
            for g in layout.gpu_instances
        ],
        "compute_instances": [
            {
                "gpu_instance_id": c.gpu_instance_id,
                "id": c.instance_id,
                "profile": c.short_name,
                "profile_id": c.profile_id,
                "placement": None if c.placement is None else str(c.placement),
            }
            for c in layout.compute_instances
        ],
    }


def _slots_table(slots: Sequence[MigSlot]) -> str:
    rows = [
        (s.device, s.profile, s.gpu_instance_id, s.compute_instance_id, s.placement, s.uuid)
        for s in slots
    ]
    return _table(("DEV", "PROFILE", "GI", "CI", "PLACEMENT", "UUID"), rows, right=(0, 2, 3))


def _layout_text(gpu: int, layout: MigLayout) -> list[str]:
    if not layout.gpu_instances:
        return [
            f"  no MIG instances (`gpudesk mig apply --gpu {gpu} PROFILE[,PROFILE...]` "
            f"creates some)"
        ]
    lines = [_slots_table(layout.slots)] if layout.slots else []
    with_ci = {c.gpu_instance_id for c in layout.compute_instances}
    bare = [g for g in layout.gpu_instances if g.instance_id not in with_ci]
    if bare:
        lines.append(
            "  GPU instances without a compute instance (not usable by jobs): "
            + ", ".join(f"GI {g.instance_id} {g.short_name} at {g.placement}" for g in bare)
        )
    return lines


@mig_app.command("list")
def list_cmd(json_out: JsonOption = False) -> None:
    """Every GPU's MIG mode and MIG devices, with the UUIDs jobs use (CUDA_VISIBLE_DEVICES)."""
    from gpudesk.cli.mig_simulated import simulated_station
    from gpudesk.hw.mig.manager import MigManager

    with _engine_errors():
        station = simulated_station()
    if station is not None:
        _list_simulated(station, json_out)
        return
    from gpudesk.hw.mig.nvidia_smi import MIG_MODE_KINDS, NvidiaSmiError

    manager = MigManager()
    report = []
    with _mig_errors():
        gpus = manager.gpus()
        modes = manager.mig_modes()
        for entry in gpus:
            mode = modes.get(entry.index)
            state = mode.state if mode else "unknown"
            layout = None
            if state in ("enabled", "unknown"):
                try:
                    layout = manager.layout(entry.index, entry)
                    state = "enabled"
                except NvidiaSmiError as exc:
                    if exc.kind not in MIG_MODE_KINDS:
                        raise
                    state = exc.kind.removeprefix("mig-")
            report.append((entry, state, layout))
    if json_out:
        print_json(
            {
                "gpus": [
                    {
                        "index": e.index,
                        "name": e.name,
                        "uuid": e.uuid,
                        "mig_mode": state,
                        **(
                            _layout_dict(layout)
                            if layout
                            else {"mig_devices": [], "gpu_instances": [], "compute_instances": []}
                        ),
                    }
                    for e, state, layout in report
                ]
            }
        )
        return
    if not report:
        print("no GPUs (nvidia-smi -L lists none)")
        return
    lines = []
    for entry, state, layout in report:
        if layout is None:
            lines.append(_gpu_title(entry.index, entry.name))
            lines.append(_paragraph(_mode_note(entry.index, state)))
            continue
        devices = f"MIG enabled, {len(layout.slots)} MIG device(s)"
        lines.append(_gpu_title(entry.index, entry.name, mode=devices))
        lines.extend(_layout_text(entry.index, layout))
    print("\n".join(lines))


def _list_simulated(station: SimulatedStation, json_out: bool) -> None:
    """`list` on a simulated station: each GPU's mode and MIG devices as the engine's telemetry
    shows them (a simulated slice has no memory-slice placement to show)."""
    from gpudesk.cli.mig_simulated import (
        simulated_layout_dict,
        simulated_mode_note,
        simulated_slots,
    )

    report = []
    for gpu in sorted(station.gpus, key=lambda g: g.index):
        plan = station.plans.get(gpu.index)
        mode = plan.mig_mode if plan else "unsupported"
        slots = simulated_slots(gpu.index, gpu.mig_devices if mode == "enabled" else [])
        report.append((gpu, mode, slots))
    if json_out:
        gpus = [
            {"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "simulated": True}
            | {"mig_mode": mode, **simulated_layout_dict(gpu.name or "", slots)}
            for gpu, mode, slots in report
        ]
        print_json({"simulated": True, "backend": station.backend, "gpus": gpus})
        return
    lines = [
        _paragraph(
            f"{station.backend} SIMULATED: MIG devices of the simulated GPUs (not nvidia-smi's)",
            first="",
        )
    ]
    for gpu, mode, slots in report:
        name = gpu.name or "?"  # a simulated GPU always has its model's name
        if mode != "enabled":
            lines.append(_gpu_title(gpu.index, name))
            lines.append(_paragraph(simulated_mode_note(gpu.index, name, mode)))
            continue
        devices = f"MIG enabled, {len(slots)} MIG device(s)"
        lines.append(_gpu_title(gpu.index, name, mode=devices))
        if slots:
            lines.append(_slots_table(slots))
        else:
            lines.append(f"  no MIG instances (`gpudesk mig apply-plan --gpu {gpu.index}`)")
    print("\n".join(lines))


# ------------------------------------------------------------------------------- apply
def _refuse_on_simulated(command: str, instead: str) -> None:
    """`apply` and `clear` drive nvidia-smi, which acts on this machine's real GPUs: on a
    SIMULATED station (whose GPUs `list` and `profiles` show) they are refused, saying how its
    layout is set instead (the station's `mig` setting)."""
    import os

    from gpudesk.cli.mig_simulated import simulated_station
    from gpudesk.core.backend_names import is_simulated

    backend = os.environ.get("GPUDESK_BACKEND", "")
    if not is_simulated(backend):  # else refused as it is, with no engine asked or started
        with _engine_errors():
            station = simulated_station()
        if station is None:
            return
        backend = station.backend
    fail(
        f"mig {command}: the station is SIMULATED ({backend}): its GPUs are the "
        "engine's simulator's, and nvidia-smi would act on this machine's real GPUs instead. "
        f"A simulated GPU's MIG layout is the station's mig setting: {instead}, or [station] "
        "mig in a profile; it changes while no job runs on that GPU.",
        EXIT_USAGE,
    )


@mig_app.command("apply")
def apply_cmd(
    gpu: GpuOption,
    profiles: Annotated[
        list[str],
        typer.Argument(
            metavar="PROFILES", help="Profiles by name or ID, e.g. 3g.20gb,2g.10gb,1g.5gb,1g.5gb."
        ),
    ],
    dry_run: DryRunOption = False,
) -> None:
    """Replace a GPU's MIG layout with these profiles.

    Destroys its instances, then creates these, largest first, each with a full compute instance.

    Needs root, and nothing may run on the GPU. Prints the new MIG devices and their UUIDs."""
    from gpudesk.hw.mig.manager import MigManager

    layout = ",".join(profiles)
    instead = f"gpudesk engine set 'mig={{{gpu}=\"{layout}\"}}' (with any other MIG GPU's layout)"
    _refuse_on_simulated("apply", instead)
    manager = MigManager()
    with _mig_errors():
        if dry_run:
            for argv in manager.plan_apply(gpu, profiles):
                print(shlex.join(argv))
            return
        slots = manager.apply(gpu, profiles)
    already_done(f"GPU {gpu}'s MIG layout was applied all the same: gpudesk mig list shows it")
    rows = [
        (s.device, s.profile, s.gpu_instance_id, s.compute_instance_id, s.placement, s.uuid)
        for s in slots
    ]
    print(f"GPU {gpu} now has {len(slots)} MIG device(s):")
    print(_table(("DEV", "PROFILE", "GI", "CI", "PLACEMENT", "UUID"), rows, right=(0, 2, 3)))
    print("A job runs on one with CUDA_VISIBLE_DEVICES=<UUID>.")


# ------------------------------------------------------------------------------- clear
@mig_app.command("clear")
def clear_cmd(gpu: GpuOption, dry_run: DryRunOption = False) -> None:
    """Destroy every compute and GPU instance on a GPU. MIG mode stays on. Needs root."""
    from gpudesk.hw.mig.manager import MigManager

    _refuse_on_simulated(
        "clear",
        f"gpudesk engine set with a mig table that leaves GPU {gpu} out (a simulated GPU then "
        "leaves MIG mode)",
    )
    manager = MigManager()
    with _mig_errors():
        if dry_run:
            commands = manager.plan_clear(gpu)
            for argv in commands:
                print(shlex.join(argv))
            if not commands:
                print(f"GPU {gpu} has no MIG instances; nothing would run", file=sys.stderr)
            return
        ran = manager.clear(gpu)
    if ran:
        already_done(f"GPU {gpu}'s MIG instances were destroyed all the same")
        print(f"cleared GPU {gpu}: its compute and GPU instances are destroyed (MIG mode stays on)")
    else:
        print(f"GPU {gpu} has no MIG instances; nothing to do")


# -------------------------------------------------------------------- the engine's plan
# Registered last, so that `gpudesk mig --help` lists them after the nvidia-smi commands.
mig_app.command("plan")(plan_cmd)
mig_app.command("apply-plan")(apply_plan_cmd)
