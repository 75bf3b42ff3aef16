"""What `gpudesk simulate` replays: a job trace (`load_trace`: each job's arrival, size, peak memory
and SM share, checked), the simulated ground truth (`load_truth`), and the MIG layouts a
simulated station starts with (`parse_mig`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from gpudesk.core.backend_names import SIM_PREFIX, SIM_STATIONS, parse_sim_name
from gpudesk.core.jobs import (
    MAX_GPUS,
    MAX_JOB_ID,
    MAX_MEMORY_GB,
    MAX_PREEMPT_GRACE_S,
    check_bool,
    check_name,
    check_priority,
    describe,
    number_in,
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
from gpudesk.named_file import read_named_json
from gpudesk.policy.interference import ModelParams, load_params_file
from gpudesk.text import quoted
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
# Each field's check, as `gpudesk submit` takes the same figure where it has one (a whole
# number is an integer: 2.0 is refused, as a profile refuses it)
CHECK_TRACE_GPUS = whole_number_in(1, MAX_GPUS)  # a trace job runs on a GPU
CHECK_TRACE_ID = whole_number_in(1, MAX_JOB_ID)  # as the engine numbers jobs
CHECK_ARRIVAL_S = number_in(0.0, MAX_TRACE_SECONDS, optional=False)
CHECK_EXCLUSIVE_MINUTES = number_in(0.0, MAX_TRACE_SECONDS / 60, lo_open=True, optional=False)
CHECK_TRACE_MB = number_in(0.0, MAX_MEMORY_GB * MIB_PER_GB, optional=False)  # as `submit --mem`
CHECK_TRACE_PERCENT = number_in(0.0, 100.0, optional=False)
CHECK_CHECKPOINT_S = number_in(0.0, MAX_PREEMPT_GRACE_S, optional=False)  # within its grace
CHECK_STARTUP_S = number_in(0.0, MAX_TRACE_SECONDS, optional=False)  # and below its time alone
# What a job must give, as a missing one is said
REQUIRED_FIELDS = {
    "arrival_s": "seconds from the trace's start",
    "exclusive_minutes": "the job's run time alone, in minutes",
    "peak_memory_mb": "the job's true peak memory, in MB",
}
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
    # Phases (docs/simulator.md "Start-up"): each attempt's first `startup_s` seconds (Python,
    # imports, a CUDA context) take no share of the GPU and run at wall-clock speed; the rest,
    # `steady_s`, is its steady work, which sharing slows, at `sm_pct`.
    startup_s: float = 0.0
    # What the policy is told of its SM share (its `sm_pct` hint), where it is not the truth
    # `sm_pct` the simulated GPU runs (None: the same): e.g. a life average, start-up included.
    hint_sm_pct: float | None = None

    @property
    def steady_s(self) -> float:
        """Its run time alone past its start-up: the work sharing slows."""
        return self.exclusive_s - self.startup_s

    @property
    def told_sm_pct(self) -> float:
        """Its SM share as the policy and the engine's learner are told it (its hint)."""
        return self.sm_pct if self.hint_sm_pct is None else self.hint_sm_pct


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


class _BadField(ValueError):
    """A trace's field that is missing or that its check refuses (the message names it)."""


_T = TypeVar("_T")
_REQUIRED: Any = object()  # `_field`'s default for a field the job must give
_NULL_IS_ABSENT = frozenset(  # fields whose null means "not given", as their absence does
    {
        "sm_pct",
        "hint_sm_pct",
        "membw_pct",
        "model",
        "task",
        *(f"estimate_{e}_mb" for e in GUESSING_ESTIMATORS),
    }
)

# What a job may give besides what it must: read by the replay, or (the last five) kept for the
# reader of the file alone, as the bundled traces give them (a training's dataset, batch size,
# epochs, sweep and command). Any other key is a typo to say, not to ignore: `sm_pctt` would
# have left the job at its class's share without a word.
JOB_FIELDS = (
    *REQUIRED_FIELDS,
    *("id", "gpus", "priority", "class", "task", "model", "sm_pct", "membw_pct"),
    *("hint_sm_pct", "preemptible", "checkpoint_s", "progress", "startup_s"),
    *(f"estimate_{e}_mb" for e in GUESSING_ESTIMATORS),
    *("dataset", "batch_size", "epochs", "sweep", "command"),
)
TRACE_FIELDS = ("jobs", "name", "station", "source")  # `source`: where the trace came from


def _unknown_field(raw: Mapping[str, Any], known: tuple[str, ...]) -> str | None:
    """The first key of `raw` that is none of `known`, said with the field it is closest to."""
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"the fields are: {', '.join(known)}"
            return f"{quoted(str(key))} is not a trace field; {hint}"
    return None


def _job_class(value: Any) -> str:
    """A job's `class`: one of SM_BY_CLASS's, which stands for an SM share where the job gives
    none (an unknown one, "Heavy" or "ultra", would have taken a share no one chose)."""
    cls = _text(value)
    if cls not in SM_BY_CLASS:
        raise ValueError(f"expected one of {', '.join(SM_BY_CLASS)}, found {quoted(cls)}")
    return cls


def _field(raw: Mapping[str, Any], key: str, check: Callable[[Any], _T], default: Any) -> _T:
    """`raw[key]` as `check` takes it, else `default` where it is not given (a field in
    `_NULL_IS_ABSENT` may be null for that); raises _BadField naming the field."""
    if key not in raw or (raw[key] is None and key in _NULL_IS_ABSENT):
        if default is _REQUIRED:
            raise _BadField(f"missing {key} ({REQUIRED_FIELDS[key]})")
        return default
    try:
        return check(raw[key])
    except ValueError as exc:
        raise _BadField(f"{key}: {exc}") from None


def _number(
    raw: Mapping[str, Any], key: str, check: Callable[[Any], float | None], default: Any = _REQUIRED
) -> float:
    """A figure the job must give (`REQUIRED_FIELDS`), or one with a default (not null)."""
    number = _field(raw, key, check, default)
    assert number is not None, key  # the check is not optional: it refuses null
    return number


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, found {describe(value)}")
    return value


def _station_name(value: Any) -> str:
    """A trace's `station`: a simulated one's name without `sim:` ("h100x2"), or "" for none."""
    why = ""
    if isinstance(value, str):
        if not value:
            return value
        try:
            parse_sim_name(SIM_PREFIX + value)
            return value
        except ValueError as exc:
            why = f" ({exc})" if "GPUs" in str(exc) else ""  # a count past what a station has
    raise ValueError(
        f"expected a simulated station's name: {', '.join(SIM_STATIONS)}, each with xN for N "
        f'GPUs (e.g. "h100x2"), found {describe(value)}{why}'
    )


def load_trace(path: str | Path) -> Trace:
    """A trace file, every field checked: a TraceError names the file, the job and the field."""
    if not str(path):
        raise TraceError(
            "the trace's name is empty: give a JSON trace file, or a bundled trace's name "
            "(e.g. carma-philly-t1)"
        )
    # Installed from a wheel, `traces/carma-philly-t1.json` (or `carma-philly-t1`) names the
    # bundled copy when no such file is here.
    path = bundled(path, "traces") or path
    try:
        data = read_named_json(
            path, MAX_TRACE_BYTES, "a trace", called="the trace ", json_kind="a JSON trace"
        )
    except ValueError as exc:
        raise TraceError(str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise TraceError(f'{path}: expected an object with a non-empty "jobs" list')
    if unknown := _unknown_field(data, TRACE_FIELDS):
        raise TraceError(f"{path}: {unknown}")
    try:
        name = _field(data, "name", check_name, Path(path).stem)
        station = _field(data, "station", _station_name, "")
    except _BadField as exc:
        raise TraceError(f"{path}: {exc}") from None
    jobs = []
    first_of: dict[int, int] = {}  # job id -> the index of the job that has it
    for i, raw in enumerate(data["jobs"]):
        where = f"{path}: jobs[{i}]"
        if not isinstance(raw, dict):
            raise TraceError(f"{where}: expected an object (a job), found {describe(raw)}")
        try:
            job_id = _field(raw, "id", CHECK_TRACE_ID, i + 1)
            if "id" in raw:
                where += f" (id {job_id})"
            if unknown := _unknown_field(raw, JOB_FIELDS):
                raise _BadField(unknown)
            jobs.append(_job(raw, i, job_id))
        except _BadField as exc:
            raise TraceError(f"{where}: {exc}") from None
        if job_id in first_of:
            raise TraceError(
                f"{where}: id {job_id} is given twice (jobs[{first_of[job_id]}] has it too); "
                "each job needs its own"
            )
        first_of[job_id] = i
    return Trace(name, station, tuple(jobs))


def _job(raw: Mapping[str, Any], i: int, job_id: int) -> TraceJob:
    """One job of a trace, each field checked (raises _BadField)."""
    cls = _field(raw, "class", _job_class, "medium")
    model = _field(raw, "model", _text, "")
    task = "" if raw.get("task") == "" else _field(raw, "task", check_name, "")
    sm_pct = _field(raw, "sm_pct", CHECK_TRACE_PERCENT, None)
    if sm_pct is None:  # the job's class's share (or its model's published one)
        sm_pct = SM_BY_MODEL.get(model, SM_BY_CLASS[cls])
    # (checked in this order: a job with several bad fields is told of the first)
    arrival_s = _number(raw, "arrival_s", CHECK_ARRIVAL_S)
    gpus = _field(raw, "gpus", CHECK_TRACE_GPUS, 1)
    exclusive_s = _number(raw, "exclusive_minutes", CHECK_EXCLUSIVE_MINUTES) * 60.0
    return TraceJob(
        id=job_id,
        name=task or model or f"job{i + 1}",
        arrival_s=arrival_s,
        gpus=gpus,
        exclusive_s=exclusive_s,
        peak_memory_mib=_number(raw, "peak_memory_mb", CHECK_TRACE_MB),
        sm_pct=sm_pct,
        job_class=cls,
        estimates={
            e: mib
            for e in GUESSING_ESTIMATORS
            if (mib := _field(raw, f"estimate_{e}_mb", CHECK_TRACE_MB, None)) is not None
        },
        membw_pct=_field(raw, "membw_pct", CHECK_TRACE_PERCENT, None),
        model=model,
        priority=_field(raw, "priority", check_priority, 0),
        preemptible=_field(raw, "preemptible", check_bool, False),
        checkpoint_s=_number(raw, "checkpoint_s", CHECK_CHECKPOINT_S, 0.0),
        progress=_field(raw, "progress", check_bool, False),
        startup_s=_startup_s(raw, exclusive_s),
        hint_sm_pct=_field(raw, "hint_sm_pct", CHECK_TRACE_PERCENT, None),
    )


def _startup_s(raw: Mapping[str, Any], exclusive_s: float) -> float:
    """A job's `startup_s`: 0 where not given; at least 0 and below its run time alone (a
    start-up is part of that run, and a job all start-up would have no work to share)."""
    startup_s = _number(raw, "startup_s", CHECK_STARTUP_S, 0.0)
    if startup_s >= exclusive_s:
        raise _BadField(
            f"startup_s: expected less than the job's run time alone ({exclusive_s:g} s: "
            f"exclusive_minutes x 60), found {raw['startup_s']}"
        )
    return startup_s


def missing_estimates(trace: Trace, estimator: str) -> int:
    """How many of the trace's jobs have no guess from `estimator` (a guessing one): their
    memory hint is then their true peak. 0 under "measured", which needs none."""
    if estimator not in GUESSING_ESTIMATORS:
        return 0
    return sum(estimator not in j.estimates for j in trace.jobs)


def estimators_given(trace: Trace) -> tuple[str, ...]:
    """The guessing estimators at least one of the trace's jobs has a guess from."""
    return tuple(e for e in GUESSING_ESTIMATORS if any(e in j.estimates for j in trace.jobs))


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
                    f"--mig: {quoted(gpu_text)} is not a GPU index (GPU=PROFILE,...)"
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
                f"--mig: start with a GPU index, e.g. 0=3g.20gb,2g.10gb (got {quoted(text)})"
            )
        if not item:
            raise ValueError(f"--mig: an empty profile name in {quoted(text)}")
        profile = find_profile(item, table)
        if profile is None:
            raise ValueError(
                f"--mig: unknown MIG profile {quoted(item)} for a {gpu_name}; it offers: {offered}"
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
