"""The station: which backend describes the hardware, which policy places jobs, the CPU slots
it offers, how often it is sampled and the grid's carbon intensity for energy reports (a figure,
or a country or region code of gpudesk's bundled table, gpudesk.grid)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from gpudesk import grid
from gpudesk.core.backend_names import check_backend_name, is_simulated, parse_sim_name
from gpudesk.core.gpu_models import STATIONS
from gpudesk.core.jobs import check_bool, describe, number_in, whole_number_in
from gpudesk.core.listen import check_metrics_listen
from gpudesk.core.mig_profiles import (
    COMPUTE_SLICES,
    compute_slices,
    is_plain_profile_name,
    layout_problem,
)
from gpudesk.core.record_dict import record_dict

# The kind a change of the station's settings is stored as (an event with no job): a drain,
# hooks.toml read again; `StationStatus.station_changes` lists the latest.
STATION_EVENT = "station"
DEFAULT_GRID_G_PER_KWH = 475.0  # world average grid intensity (IEA); set your own in [station]

POLICIES: tuple[str, ...] = ("fifo", "auto", "exclusive", "naive", "mps", "mig", "carma")
MAX_SLOTS = 4096
DEFAULT_SAMPLE_INTERVAL_S = 1.0
STATION_KEYS = (
    "backend",
    "policy",
    "slots",
    "sample_interval",
    "grid_intensity",
    "mig",
    "isolation",
    "mig_repartition",
    "log_max_mb",
    "log_keep",
    "fairshare_half_life_h",
    "fairshare_cpu_weight",
    "max_running_gpus_per_user",
    "max_queued_per_user",
    "metrics_listen",
    "job_pids_max",
    "job_memory_max_gb",
    "keep_finished_days",
    "queue_order",
)
# The queue's order within priority and fair share (gpudesk.policy.jct_order): by submission,
# or letting short jobs through (highest response ratio next, with what history measured).
QUEUE_ORDERS: tuple[str, ...] = ("submission", "shortest")
DEFAULT_LOG_MAX_MB = 100.0
DEFAULT_LOG_KEEP = 2
MAX_LOG_KEEP = 100


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_backend(value: Any) -> str:
    return check_backend_name(value)


def check_policy(value: Any) -> str:
    if value not in POLICIES:
        raise ValueError(f"expected one of {', '.join(POLICIES)}, found {describe(value)}")
    return value


def check_queue_order(value: Any) -> str:
    if value not in QUEUE_ORDERS:
        raise ValueError(f"expected one of {', '.join(QUEUE_ORDERS)}, found {describe(value)}")
    return value


def check_slots(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLOTS:
        raise ValueError(f"expected a whole number from 1 to {MAX_SLOTS}, found {describe(value)}")
    return value


def check_mig(value: Any) -> dict[str, str] | None:
    """A simulated station's MIG layout: {"3" = "3g.20gb,2g.10gb,2g.10gb"}."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(
            f'expected a table of GPU index = "PROFILE,PROFILE,...", found {describe(value)}'
        )
    layout = {}
    for key, profiles in value.items():
        if not str(key).isdigit() or int(key) >= 64:
            raise ValueError(f"{key!r} is not a GPU index")
        if not isinstance(profiles, str):
            raise ValueError(
                f"GPU {key}: expected a string of profiles, found {describe(profiles)}"
            )
        names = [p.strip() for p in profiles.split(",")]
        bad = [p for p in names if not is_plain_profile_name(p)]
        if bad or not names:
            raise ValueError(
                f"GPU {key}: {bad[0] if bad else profiles!r} is not a MIG profile name like 3g.20gb"
            )
        if sum(compute_slices(p) for p in names) > COMPUTE_SLICES:
            raise ValueError(f"GPU {key}: {profiles} needs more than the 7 compute slices of a GPU")
        layout[str(int(key))] = ",".join(names)
    return layout


def mig_layout_problem(backend: str, layout: Mapping[str, str] | None) -> str | None:
    """Why a checked `mig` table cannot be the layout of the simulated station `backend`: a
    GPU it does not have, a profile its model does not offer, or instances that do not fit
    together; None when it can, and for a backend that is not simulated (real GPUs are
    partitioned with `gpudesk mig apply`, which checks against what the driver offers)."""
    if not layout or not is_simulated(backend):
        return None
    name, count = parse_sim_name(backend)
    model, default_count = STATIONS[name]
    gpus = default_count if count is None else count
    for key, profiles in layout.items():
        if int(key) >= gpus:
            have = "GPU 0" if gpus == 1 else f"GPUs 0..{gpus - 1}"
            return f"GPU {key}: the station {backend} has {have}"
        problem = layout_problem(profiles.split(","), model.name)
        if problem is not None:
            return f"GPU {key}: {problem}"
    return None


check_sample_interval = number_in(0.1, 60.0)  # seconds between GPU and host readings
_check_grid_figure = number_in(0.0, 2000.0)  # g CO2e per kWh


def check_grid_intensity(value: Any) -> float | grid.GridRegion | None:
    """g CO2e per kWh from 0 to 2000, or a code of the bundled table (any case): its row, whose
    figure StationConfig.from_checked keeps with the code."""
    if isinstance(value, str):
        return grid.lookup(value)
    try:
        return _check_grid_figure(value)
    except ValueError:
        raise ValueError(
            'expected g CO2e per kWh from 0 to 2000, or a country or region code such as "FR", '
            f'"DEU" or "US-CA" (`gpudesk grid` lists them), found {describe(value)}'
        ) from None


check_log_max_mb = number_in(0.0, 1024.0 * 1024.0)  # MiB per attempt's output.log; 0: no cap


check_log_keep = whole_number_in(0, MAX_LOG_KEEP)  # rotated parts kept per attempt's log

# Fair share (gpudesk.policy.fairshare). Slurm's PriorityDecayHalfLife defaults to 7
# days: usage a week old counts half.
DEFAULT_FAIRSHARE_HALF_LIFE_H = 7 * 24.0
# What one CPU core-hour costs against one GPU-hour (Slurm's TRESBillingWeights, "CPU=...,
# GRES/gpu=1"): 1/16, a DGX Station A100's 64 cores over its 4 GPUs, so a job using a GPU's
# share of the cores weighs as much again as the GPU.
DEFAULT_FAIRSHARE_CPU_WEIGHT = 1.0 / 16.0
MAX_PER_USER_LIMIT = 1_000_000
check_fairshare_half_life_h = number_in(0.0, 24.0 * 366, lo_open=True)  # hours
check_fairshare_cpu_weight = number_in(0.0, 1000.0)  # GPU-hours per core-hour


# Each attempt's cgroup gets pids.max and memory.max (hw/containment.py), so one job cannot
# fork until the machine has no pid left, nor take all of its memory. 0 (or "none") turns one
# off. ASSUMPTION: 4096 tasks a job (pids.max counts threads too) is an eighth of Linux's
# default pid_max of 32768 (kernel/pid.c PID_MAX_DEFAULT), well above what a training job uses
# (a process with its data-loader workers and their threads: some hundreds), so eight runaway
# jobs together still leave the machine pids to log in and stop them with.
DEFAULT_JOB_PIDS_MAX = 4096
MAX_JOB_PIDS_MAX = 4194304  # the kernel's PID_MAX_LIMIT on 64-bit (include/linux/threads.h)
# ASSUMPTION: unset, a job may use 90 % of the host's memory (MemTotal): it can use nearly all
# of it, but when it wants more the kernel ends it inside its own cgroup, before the machine's
# own out-of-memory killer picks a victim that may be another member's job or the engine.
DEFAULT_JOB_MEMORY_FRACTION = 0.9
MAX_JOB_MEMORY_GB = 1048576.0  # 1 PiB: beyond any one machine, a typo's guard
_OFF_WORDS = {"none", "off"}


def check_job_pids_max(value: Any) -> int:
    """pids.max for each attempt's cgroup: a whole number, 0 or "none" for no limit."""
    if isinstance(value, str) and value.strip().lower() in _OFF_WORDS:
        return 0
    return whole_number_in(0, MAX_JOB_PIDS_MAX)(value)


def check_job_memory_max_gb(value: Any) -> float | None:
    """memory.max for each attempt's cgroup, in GB (GiB): a number, 0 or "none" for no limit."""
    if isinstance(value, str) and value.strip().lower() in _OFF_WORDS:
        return 0.0
    return number_in(0.0, MAX_JOB_MEMORY_GB)(value)


# The keys whose unset value (None, JSON null) is no limit at all, said "none" (`engine set`'s
# echo, docs/shared-station.md's defaults), not the "default" of a key unset to its default.
NO_LIMIT_WHEN_UNSET = frozenset({"max_running_gpus_per_user", "max_queued_per_user"})


def check_per_user_limit(value: Any) -> int | None:
    """A per-user limit: a whole number, 0, "none" or absent (null) for none."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _OFF_WORDS):
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_PER_USER_LIMIT
    ):
        raise ValueError(
            f'expected a whole number from 0 (or "none": no limit) to {MAX_PER_USER_LIMIT}, '
            f"found {describe(value)}"
        )
    return value or None


# Finished jobs stay in the live listings (queue, desk) this many days after they end, then are
# archived: history and accounting still read them (docs/reliability.md, "Listings of the whole
# store"). 30 days is an assumption: a month of a group's runs to look back on in the desk.
# 0: never archived.
DEFAULT_KEEP_FINISHED_DAYS = 30.0
check_keep_finished_days = number_in(0.0, 100.0 * 366)  # days; 0: never


STATION_CHECKS = {
    "backend": check_backend,
    "policy": check_policy,
    "slots": check_slots,
    "sample_interval": check_sample_interval,
    "grid_intensity": check_grid_intensity,
    "mig": check_mig,
    "isolation": check_bool,
    "mig_repartition": check_bool,
    "log_max_mb": check_log_max_mb,
    "log_keep": check_log_keep,
    "fairshare_half_life_h": check_fairshare_half_life_h,
    "fairshare_cpu_weight": check_fairshare_cpu_weight,
    "max_running_gpus_per_user": check_per_user_limit,
    "max_queued_per_user": check_per_user_limit,
    "metrics_listen": check_metrics_listen,
    "job_pids_max": check_job_pids_max,
    "job_memory_max_gb": check_job_memory_max_gb,
    "keep_finished_days": check_keep_finished_days,
    "queue_order": check_queue_order,
}


# The policies that place jobs on MIG slices, so may repartition on their own.
REPARTITIONING_POLICIES = ("auto", "mig")


class StationConfig(msgspec.Struct, frozen=True):
    backend: str = "auto"
    policy: str = "auto"
    slots: int | None = None  # concurrent CPU jobs; None = number of cores
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL_S
    grid_intensity: float = DEFAULT_GRID_G_PER_KWH  # g CO2e per kWh, for carbon figures
    # The bundled table's code ("FR", "US-CA") the figure was taken from; None for a figure
    # given as a number. The figure is the one every calculation uses; the code says where it
    # came from, and is what is kept (to_dict), so a newer table's figure follows it.
    grid_region: str | None = None
    mig: dict[str, str] | None = None  # a simulated station's MIG layout, by GPU index
    isolation: bool = False  # jobs never share a GPU except on separate MIG slices
    # The engine may repartition an idle MIG-mode GPU to fit the queue: on its own where that
    # pays (`repartitions_on_its_own`), and on a confirmed `mig_apply` request; off, it only
    # shows the plan. It never changes MIG mode.
    mig_repartition: bool = False
    # Each attempt's output.log is rotated past this many MiB (0: never), keeping the newest
    # `log_keep` rotated parts (gpudesk.joblog): a job printing without end cannot fill the disk.
    log_max_mb: float = DEFAULT_LOG_MAX_MB
    log_keep: int = DEFAULT_LOG_KEEP
    # Fair share among users with equal priority: each user's GPU-hours plus CPU core-hours x
    # `fairshare_cpu_weight`, decayed with this half-life (gpudesk.policy.fairshare).
    fairshare_half_life_h: float = DEFAULT_FAIRSHARE_HALF_LIFE_H
    fairshare_cpu_weight: float = DEFAULT_FAIRSHARE_CPU_WEIGHT
    # GPUs one user's running jobs may hold at once (None: no limit); their further GPU jobs
    # wait. Queued (waiting, held included) jobs one user may have; a submit beyond is refused.
    max_running_gpus_per_user: int | None = None
    max_queued_per_user: int | None = None
    # Where the engine serves Prometheus metrics ("127.0.0.1:9400", docs/metrics.md); None: it
    # does not. Loopback unless an admin writes another address (gpudesk.core.listen).
    metrics_listen: str | None = None
    # Each attempt's cgroup's pids.max and memory.max (GiB), where it has a cgroup; 0: none.
    # job_memory_max_gb None: DEFAULT_JOB_MEMORY_FRACTION of the host's memory.
    job_pids_max: int = DEFAULT_JOB_PIDS_MAX
    job_memory_max_gb: float | None = None
    # Days a finished job stays in the live listings before it is archived (0: never).
    keep_finished_days: float = DEFAULT_KEEP_FINISHED_DAYS
    queue_order: str = "submission"

    @property
    def repartitions_on_its_own(self) -> bool:
        """Whether the engine gives idle MIG-mode GPUs new layouts itself (policy.mig_payoff):
        with `mig_repartition`, under the policies that place jobs on MIG slices. A forced
        mode never changes a layout on its own; `gpudesk mig apply-plan` does it by hand."""
        return self.mig_repartition and self.policy in REPARTITIONING_POLICIES

    @property
    def effective_slots(self) -> int:
        return self.slots if self.slots is not None else host_cores()

    @property
    def grid_source(self) -> str | None:
        """Where the grid figure comes from ("Our World in Data 2023 via codecarbon 3.3.2");
        None for a figure given as a number."""
        region = grid.find(self.grid_region) if self.grid_region else None
        return region.source if region else None

    def to_dict(self) -> dict[str, Any]:
        """The config as a `[station]` table states it, which from_dict reads back: a grid code
        stands in grid_intensity for the figure it resolves to."""
        data = record_dict(self)
        region = data.pop("grid_region")
        if region is not None:
            data["grid_intensity"] = region
        return data

    def table(self, keys: Sequence[str] | None = None) -> dict[str, Any]:
        """The `[station]` table of only `keys` (a profile's, a command line's: what a client
        asks an engine for), every key when None."""
        data = self.to_dict()
        return data if keys is None else {key: data[key] for key in keys}

    def view(self) -> dict[str, Any]:
        """The config as replies carry it (api.models.StationConfigView): grid_intensity is the
        figure in use; with a code, grid_region and grid_source say which and whence."""
        data = record_dict(self)
        if data.pop("grid_region") is not None:
            data["grid_region"] = self.grid_region
            data["grid_source"] = self.grid_source
        return data

    def setting(self, key: str) -> Any:
        """A `[station]` key's value as a table states it: a grid code, else the figure."""
        if key == "grid_intensity" and self.grid_region is not None:
            return self.grid_region
        return getattr(self, key)

    def fields_of(self, key: str) -> dict[str, Any]:
        """The fields a `[station]` key sets: grid_intensity sets the figure and the code."""
        if key == "grid_intensity":
            return {"grid_intensity": self.grid_intensity, "grid_region": self.grid_region}
        return {key: getattr(self, key)}

    @classmethod
    def from_checked(cls, values: Mapping[str, Any]) -> StationConfig:
        """A config from values STATION_CHECKS passed: a grid code's row gives the figure and
        the code."""
        fields = dict(values)
        picked = fields.get("grid_intensity")
        if isinstance(picked, grid.GridRegion):
            fields["grid_intensity"], fields["grid_region"] = picked.g_per_kwh, picked.code
        return cls(**fields)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StationConfig:
        """Validate untrusted input; raises ValueError naming the key."""
        if not isinstance(data, Mapping):
            raise ValueError(f"station: expected a table, found {describe(data)}")
        unknown = sorted(set(data) - set(STATION_KEYS))
        if unknown:
            raise ValueError(f"station.{unknown[0]}: unknown key")
        values: dict[str, Any] = {}
        for key, check in STATION_CHECKS.items():
            if key in data and data[key] is not None:
                try:
                    values[key] = check(data[key])
                except ValueError as exc:
                    raise ValueError(f"station.{key}: {exc}") from None
        return cls.from_checked(values)

    @classmethod
    def from_saved(cls, saved: object, warn: Callable[[str], None]) -> StationConfig:
        """The config an engine saved. A setting this version no longer accepts (a grid code
        dropped from a newer table, say) goes back to its default alone, `warn`ed with the
        reason; the admin's other settings are kept."""
        if not isinstance(saved, dict) or not saved:
            return cls()
        try:
            return cls.from_dict(saved)
        except ValueError:
            pass
        kept: dict[str, object] = {}
        for key, value in saved.items():
            try:
                cls.from_dict({key: value})
            except ValueError as exc:
                warn(f"the saved station setting is not used, its default is: {exc}")
                continue
            kept[key] = value
        return cls.from_dict(kept)

    def with_env_override(self, env: Mapping[str, str] | None = None) -> StationConfig:
        """`GPUDESK_BACKEND`, when set, wins over what a profile or the store says."""
        env = os.environ if env is None else env
        backend = env.get("GPUDESK_BACKEND")
        if not backend:
            return self
        try:
            checked = check_backend(backend)
        except ValueError as exc:
            raise ValueError(f"GPUDESK_BACKEND: {exc}") from None
        return msgspec.structs.replace(self, backend=checked)
