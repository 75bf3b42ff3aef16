"""What `gpudesk simulate` replays: a job trace (`load_trace`: each job's arrival, size, peak memory
and SM share, checked), the simulated ground truth (`load_truth`), and the MIG layouts a
simulated station starts with (`parse_mig`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpudesk.core.jobs import (
    MAX_GPUS,
    MAX_MEMORY_GB,
    MAX_PREEMPT_GRACE_S,
    check_priority,
    whole_number_in,
)
from gpudesk.core.mig_profiles import (
    COMPUTE_SLICES,
    MEMORY_SLICES,
    MigProfile,
    find_profile,
    layout_fits,
    simulated_profiles,
)
from gpudesk.examples import bundled
from gpudesk.named_file import FileTooLarge, read_named
from gpudesk.policy.interference import ModelParams, load_params_file
from gpudesk.units import MIB_PER_GB

# SM activity of a job running alone, by the trace's class, where the trace gives no `sm_pct`;
# DLRM is the published ~5 %. The class figures are ASSUMPTIONS (no per-job SM figure is
# published for the trace); a user knows roughly this much about a job and gives it as the
# `sm_pct` hint. docs/simulator.md says what they do to the results.
SM_BY_CLASS = {"light": 10.0, "medium": 30.0, "heavy": 70.0}
SM_BY_MODEL = {"DLRM": 5.0}
GUESSING_ESTIMATORS = ("gpumemnet", "horus", "faketensor")
# "measured": each job's true peak, as the engine's history of earlier runs of the same command
# would give it (Demand source "history").
ESTIMATORS = (*GUESSING_ESTIMATORS, "measured")


# A trace that names no station runs on the station the CARMA trace was measured on.
DEFAULT_STATION = "sim:dgx-station-a100"
# The latest arrival and the longest run a trace may give (ASSUMPTION: ten years, far past any
# published cluster trace). The simulated clock is float seconds: an arrival of NaN is never
# reached (the replay turned forever), and far enough out the clock's resolution is coarser
# than a replay's steps.
MAX_TRACE_SECONDS = 10 * 365 * 24 * 3600.0
CHECK_TRACE_GPUS = whole_number_in(1, MAX_GPUS)  # a trace job runs on a GPU
# The most a trace file may hold (assumption: ~700,000 jobs of t1's ~370 bytes each, far past
# what a replay gets through; /dev/zero named as a trace read until memory ran out)
MAX_TRACE_BYTES = 256 * 1024 * 1024


class TraceError(ValueError):
    pass


@dataclass(frozen=True)
class TraceJob:
    id: int
    name: str
    arrival_s: float
    gpus: int
    exclusive_s: float
    peak_memory_mib: float
    sm_pct: float
    job_class: str
    estimates: dict[str, float]
    membw_pct: float | None = None  # DRAM bandwidth share alone, where the trace gives it
    model: str = ""
    # Preemption (docs/preemption.md): its priority (higher first), whether it may be preempted,
    # and what saving its checkpoint takes (resuming is taken to take as long)
    priority: int = 0
    preemptible: bool = False
    checkpoint_s: float = 0.0
    # It prints `progress DONE/TOTAL` lines (docs/interference.md): the engine then knows its
    # remaining time from them (policy/remaining.py); without, from its family's history.
    progress: bool = False


@dataclass(frozen=True)
class Trace:
    name: str
    station: str
    jobs: tuple[TraceJob, ...]  # in arrival order, however the trace was made

    def __post_init__(self) -> None:
        # the simulator takes the jobs in this order as they arrive
        ordered = tuple(sorted(self.jobs, key=lambda j: (j.arrival_s, j.id)))
        object.__setattr__(self, "jobs", ordered)

    @property
    def sim_station(self) -> str:
        """The simulated station it runs on unless told otherwise: the one it names, else
        DEFAULT_STATION."""
        return f"sim:{self.station}" if self.station else DEFAULT_STATION


def _percent(raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    number = float(value)
    if not 0.0 <= number <= 100.0:
        raise ValueError(f"{key} must be 0..100, found {value!r}")
    return number


def _flag(raw: dict[str, object], key: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise TypeError(f"{key} is true or false")
    return value


def load_trace(path: str | Path) -> Trace:
    # Installed from a wheel, `traces/carma-philly-t1.json` (or `carma-philly-t1`) names the
    # bundled copy when no such file is here.
    path = bundled(path, "traces") or path
    try:
        data = json.loads(read_named(path, MAX_TRACE_BYTES, "a trace"))
    except OSError as exc:
        raise TraceError(f"cannot read the trace {path}: {exc.strerror or exc}") from None
    except FileTooLarge as exc:
        raise TraceError(f"cannot read the trace {path}: {exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path} is not a JSON trace: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise TraceError(f'{path}: expected an object with a non-empty "jobs" list')
    jobs = []
    first_of: dict[int, int] = {}  # job id -> the index of the job that has it
    for i, raw in enumerate(data["jobs"]):
        try:
            if not isinstance(raw, dict):
                raise TypeError("a job is an object")
            cls = str(raw.get("class", "medium"))
            model = str(raw.get("model") or "")
            sm_pct = _percent(raw, "sm_pct")
            jobs.append(
                TraceJob(
                    id=int(raw.get("id", i + 1)),
                    name=str(raw.get("task") or model or f"job{i + 1}"),
                    arrival_s=float(raw["arrival_s"]),
                    gpus=int(raw.get("gpus", 1)),
                    exclusive_s=float(raw["exclusive_minutes"]) * 60.0,
                    peak_memory_mib=float(raw["peak_memory_mb"]),
                    sm_pct=sm_pct
                    if sm_pct is not None
                    else SM_BY_MODEL.get(model, SM_BY_CLASS.get(cls, 50.0)),
                    job_class=cls,
                    estimates={
                        e: float(raw[f"estimate_{e}_mb"])
                        for e in GUESSING_ESTIMATORS
                        if raw.get(f"estimate_{e}_mb") is not None
                    },
                    membw_pct=_percent(raw, "membw_pct"),
                    model=model,
                    priority=int(raw.get("priority", 0)),
                    preemptible=_flag(raw, "preemptible"),
                    checkpoint_s=float(raw.get("checkpoint_s", 0.0)),
                    progress=_flag(raw, "progress"),
                )
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            # OverflowError: a whole number given as 1e400 (JSON's Infinity)
            raise TraceError(f"{path}: jobs[{i}]: missing or bad field ({exc})") from None
        _check_job(jobs[-1], raw, f"{path}: jobs[{i}]", first_of, i)
    return Trace(str(data.get("name", Path(path).stem)), str(data.get("station", "")), tuple(jobs))


def _check_job(
    job: TraceJob, raw: dict[str, Any], where: str, first_of: dict[int, int], i: int
) -> None:
    """Raise TraceError (`where`: the file and the job) for a figure a replay cannot use: NaN,
    infinity, past `MAX_TRACE_SECONDS` or what `gpudesk submit` takes, or an id an earlier job
    has (`first_of`: id -> index, which this one joins)."""
    if job.id in first_of:
        raise TraceError(
            f"{where}: id {job.id} is given twice (jobs[{first_of[job.id]}] has it too); each "
            "job needs its own"
        )
    first_of[job.id] = i
    # as a job's spec takes them (`gpudesk submit`), at least one GPU
    for key, check, value in (
        ("gpus", CHECK_TRACE_GPUS, job.gpus),
        ("priority", check_priority, job.priority),
    ):
        try:
            check(value)
        except ValueError as exc:
            raise TraceError(f"{where}: {key}: {exc}") from None
    if not 0 < job.exclusive_s <= MAX_TRACE_SECONDS:  # NaN fails it too
        raise TraceError(
            f"{where}: exclusive_minutes must be above 0 to {MAX_TRACE_SECONDS / 60:.0f}, found "
            f"{raw['exclusive_minutes']!r}"
        )
    if not 0 <= job.arrival_s <= MAX_TRACE_SECONDS:
        raise TraceError(
            f"{where}: arrival_s must be 0 to {MAX_TRACE_SECONDS:.0f} (seconds from the trace's "
            f"start), found {raw['arrival_s']!r}"
        )
    sizes = {"peak_memory_mb": job.peak_memory_mib} | {
        f"estimate_{name}_mb": mib for name, mib in job.estimates.items()
    }
    most = MAX_MEMORY_GB * MIB_PER_GB  # as `gpudesk submit --mem` takes it
    for key, mib in sizes.items():
        if not 0 <= mib <= most:  # NaN fails it too
            raise TraceError(
                f"{where}: {key} must be a size in MB, 0 to {most:.0f}, found {raw[key]!r}"
            )
    if not 0 <= job.checkpoint_s <= MAX_PREEMPT_GRACE_S:
        raise TraceError(
            f"{where}: checkpoint_s must be 0 to {MAX_PREEMPT_GRACE_S:g} s (a preempted job must "
            "save within its grace)"
        )


def with_progress_lines(trace: Trace) -> Trace:
    """The trace with every job taken to print `progress DONE/TOTAL` lines (`gpudesk simulate
    --progress-lines`), as the bundled workloads do: placement then knows each running job's
    remaining time from its progress, as the engine would."""
    return replace(trace, jobs=tuple(replace(j, progress=True) for j in trace.jobs))


# --------------------------------------------------------------------- truth and MIG layouts
def load_truth(path: str | Path) -> ModelParams:
    """The simulated ground truth (`--truth FILE`): the parameters it names, the rest the
    defaults. Raises ValueError."""
    return load_params_file(path, "--truth")


def parse_mig(text: str, gpu_name: str, gpu_count: int) -> dict[int, tuple[str, ...]]:
    """`--mig 3=3g.20gb,2g.10gb,1g.5gb,1g.5gb` -> {3: (...)}: items without `=` continue the
    last GPU; `3=` alone puts GPU 3 in MIG mode with no instances yet. Raises ValueError."""
    table = simulated_profiles(gpu_name)
    if not table:
        raise ValueError(f"--mig: a simulated {gpu_name} has no MIG profiles")
    offered = ", ".join(p.name for p in table)
    layouts: dict[int, list[str]] = {}
    current: int | None = None
    for raw in text.split(","):
        item = raw.strip()
        if "=" in item:
            gpu_text, _, item = (part.strip() for part in item.partition("="))
            try:
                current = int(gpu_text)
            except ValueError:
                raise ValueError(
                    f"--mig: {gpu_text!r} is not a GPU index (GPU=PROFILE,...)"
                ) from None
            if not 0 <= current < gpu_count:
                raise ValueError(
                    f"--mig: GPU {current} does not exist; the station has GPUs 0..{gpu_count - 1}"
                )
            if current in layouts:
                raise ValueError(f"--mig: GPU {current} is given twice")
            layouts[current] = []
            if not item:
                continue
        elif current is None:
            raise ValueError(
                f"--mig: start with a GPU index, e.g. 0=3g.20gb,2g.10gb (got {text!r})"
            )
        if not item:
            raise ValueError(f"--mig: an empty profile name in {text!r}")
        profile = find_profile(item, table)
        if profile is None:
            raise ValueError(
                f"--mig: unknown MIG profile {item!r} for a {gpu_name}; it offers: {offered}"
            )
        layouts[current].append(profile.name)
    for gpu, names in layouts.items():
        if not layout_fits([_must_find(n, table) for n in names]):
            raise ValueError(
                f"--mig: the layout {','.join(names)} does not fit GPU {gpu} (a {gpu_name} has "
                f"{COMPUTE_SLICES} compute and {MEMORY_SLICES} memory slices, and each profile "
                f"sits only at its own placements)"
            )
    return {gpu: tuple(names) for gpu, names in sorted(layouts.items())}


def _must_find(name: str, table: tuple[MigProfile, ...]) -> MigProfile:
    profile = find_profile(name, table)
    assert profile is not None, name
    return profile
