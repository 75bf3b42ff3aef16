"""What the engine exports, as one immutable snapshot the engine's loop builds and the HTTP thread
only reads.

The loop owns the store, the queue and the telemetry monitor; the scrape runs on another thread
and must never touch them. So the loop copies what is exported into these frozen records (a new
`MetricsSnapshot` after each telemetry sample and each change of a job's state) and swaps the
exporter's reference; the HTTP thread renders whichever snapshot it finds. A slow scraper holds
an old snapshot, never a lock of the engine's.

The builders here are pure functions of typed inputs, so the rendering can be checked on a
snapshot built by hand (tests/engine/test_metrics_snapshot.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudesk.core.jobs import JobState
from gpudesk.core.mig_profiles import short_name
from gpudesk.core.wire.station import LoaderView
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.hw.telemetry.model import BackendReading, GpuHealth, GpuReading, MigDevice
from gpudesk.hw.telemetry.monitor import TrackedAttempt
from gpudesk.metrics.histogram import Buckets
from gpudesk.units import carbon_g


@dataclass(frozen=True)
class Device:
    """A GPU or a MIG device, named as dcgm-exporter names it, and what runs there."""

    gpu: int  # the GPU's index (a MIG device's parent's)
    uuid: str  # the GPU's UUID (a MIG device's parent's, as dcgm-exporter labels it)
    model_name: str
    mig_profile: str | None = None  # "3g.20gb" on a MIG device, None on a whole GPU
    mig_instance_id: int | None = None  # its GPU instance id
    jobs: tuple[int, ...] = ()  # the jobs placed there, by id
    users: tuple[str, ...] = ()  # their owners, each once


@dataclass(frozen=True)
class DeviceReading:
    """One device's reading in dcgm-exporter's units. None: the reading lacks it (the metric
    is left out, never exported as 0)."""

    device: Device
    gpu_util_pct: float | None = None  # NVML utilization: kernel-active time, %
    sm_active: float | None = None  # SM activity as a ratio 0..1 (GPM or simulated)
    # The graphics engine's active time as a ratio: GPM's GRAPHICS_UTIL, else NVML's
    # utilization (the share of time a kernel ran: the same quantity, coarser)
    gr_engine_active: float | None = None
    pipe_tensor_active: float | None = None  # GPM's ANY_TENSOR_UTIL as a ratio; none without GPM
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    power_w: float | None = None
    energy_mj: float | None = None  # the device's total-energy counter (since driver load)
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    energy_j: float | None = None  # gpudesk's meter: since the engine began sampling
    health: GpuHealth | None = None  # ECC, remapped rows, retired pages (whole GPUs)
    # The last XID since the engine started, 0 before any (whole GPUs; None: no XID events)
    xid: int | None = None


@dataclass(frozen=True)
class RunningJob:
    """A running job's current attempt and what it used so far."""

    job_id: int
    name: str
    user: str
    gpu_j: float | None  # its share of its GPUs' energy
    cpu_j: float | None  # its share of the CPU package energy (RAPL)
    co2e_g: float | None  # the two at the station's grid intensity


@dataclass(frozen=True)
class JobCount:
    state: str
    user: str
    count: int


@dataclass(frozen=True)
class LoaderFigures:
    """A shared loader's producer as its latest status had it (None: not reported yet)."""

    dataset: str
    running: bool
    batches: int | None = None  # batches it made since it started
    delivered: int | None = None  # batches handed to consumers (each consumer's counts)
    batches_per_s: float | None = None  # summed over its consumers
    samples_per_s: float | None = None
    consumers: int = 0
    cpu_s: float | None = None  # the producer's own CPU time
    saved_cpu_s: float | None = None  # what the consumers' own loaders would have cost more


@dataclass(frozen=True)
class MetricsSnapshot:
    backend: str
    simulated: bool
    hostname: str
    version: str
    taken_at: float | None = None  # when the GPU readings were taken (None: none yet)
    devices: tuple[DeviceReading, ...] = ()
    running: tuple[RunningJob, ...] = ()
    jobs: tuple[JobCount, ...] = ()
    placements: tuple[tuple[str, int], ...] = ()  # (mode, count)
    oom_recoveries: int = 0
    decisions: Buckets | None = None
    loaders: tuple[LoaderFigures, ...] = ()
    # How long the loop was held since the engine started: per request op, per periodic step.
    requests: tuple[tuple[str, Buckets], ...] = ()
    steps: tuple[tuple[str, Buckets], ...] = ()
    # Every placement mode, so each counter series exists from the start (a counter that
    # appears only at its first increment hides that first increment from rate()).
    modes: tuple[str, ...] = field(default=("cpu", "exclusive", "naive", "mps", "mig"))


# -------------------------------------------------------------------------------- devices
def device_readings(
    reading: BackendReading | None,
    attempts: Sequence[TrackedAttempt],
    energy_j: Mapping[int, float] | None = None,
) -> tuple[DeviceReading, ...]:
    """Each GPU's reading, then its MIG devices'. `attempts`: the running attempts the sample
    was taken for (where the engine placed them names the jobs on each device: by placement,
    as dcgm-exporter's Kubernetes mode maps pods by allocation, not by processes). `energy_j`:
    gpudesk's energy count per GPU index. A lost GPU has no readings but its last XID (the
    79 that came with its loss, where NVML delivered it)."""
    if reading is None:
        return ()
    energy_j = energy_j or {}
    out: list[DeviceReading] = []
    for gpu in reading.gpus:
        if gpu.lost:
            if gpu.last_xid:  # not 0, "no error", for a GPU that answers nothing
                out.append(DeviceReading(device=_device(gpu, ()), xid=gpu.last_xid))
            continue
        on_gpu = [a for a in attempts if gpu.index in a.gpus]
        out.append(_gpu_reading(gpu, on_gpu, energy_j.get(gpu.index)))
        for mig in gpu.mig_devices:
            on_slice = [a for a in on_gpu if mig.uuid is not None and a.mig_slice == mig.uuid]
            out.append(_mig_reading(gpu, mig, on_slice))
    return tuple(out)


def _device(gpu: GpuReading, attempts: Sequence[TrackedAttempt], **mig: Any) -> Device:
    return Device(
        gpu=gpu.index,
        uuid=gpu.uuid or "",
        model_name=gpu.name or "",
        jobs=tuple(sorted({a.job_id for a in attempts})),
        users=tuple(sorted({a.user for a in attempts if a.user})),
        **mig,
    )


def _gpu_reading(
    gpu: GpuReading, attempts: Sequence[TrackedAttempt], energy_j: float | None
) -> DeviceReading:
    return DeviceReading(
        device=_device(gpu, attempts),
        gpu_util_pct=gpu.kernel_active_pct,
        sm_active=_ratio(gpu.sm_activity_pct),
        gr_engine_active=_ratio(
            gpu.kernel_active_pct if gpu.graphics_active_pct is None else gpu.graphics_active_pct
        ),
        pipe_tensor_active=_ratio(gpu.tensor_active_pct),
        fb_used_mib=gpu.memory_used_mib,
        fb_free_mib=gpu.memory_free_mib,
        power_w=gpu.power_w,
        energy_mj=None if gpu.energy_counter_j is None else gpu.energy_counter_j * 1000.0,
        temperature_c=gpu.temperature_c,
        sm_clock_mhz=gpu.sm_clock_mhz,
        energy_j=energy_j,
        health=gpu.health,
        xid=gpu.last_xid,
    )


def _ratio(pct: float | None) -> float | None:
    """A percentage as DCGM's ratio fields give it (0..1)."""
    return None if pct is None else round(pct / 100.0, 6)


def _mig_reading(
    gpu: GpuReading, mig: MigDevice, attempts: Sequence[TrackedAttempt]
) -> DeviceReading:
    """A MIG device: its framebuffer only. Utilization, power, temperature and clocks are the
    whole GPU's (NVML gives no utilization in MIG mode; DCGM's per-instance profiling fields,
    SM_ACTIVE included, need DCGM, which gpudesk does not use)."""
    profile = short_name(mig.name) if mig.name else f"mig{mig.index}"
    instance = mig.gpu_instance_id if mig.gpu_instance_id is not None else mig.index
    return DeviceReading(
        device=_device(gpu, attempts, mig_profile=profile, mig_instance_id=instance),
        fb_used_mib=mig.memory_used_mib,
        fb_free_mib=mig.memory_free_mib,
    )


# ----------------------------------------------------------------------------------- jobs
def running_jobs(
    attempts: Iterable[TrackedAttempt],
    usage: Mapping[int, AttemptUsage],
    grid_g_per_kwh: float,
) -> tuple[RunningJob, ...]:
    """Each running attempt's energy so far. Only running ones: a finished job's figures are in
    the store (`gpudesk history`), and keeping every job ever run as a series would grow the
    exporter and Prometheus without end."""
    out = []
    for attempt in sorted(attempts, key=lambda a: a.job_id):
        used = usage.get(attempt.attempt_id)
        gpu_j = used.gpu_j if used else None
        cpu_j = used.cpu_j if used else None
        total = None if gpu_j is None and cpu_j is None else (gpu_j or 0.0) + (cpu_j or 0.0)
        out.append(
            RunningJob(
                attempt.job_id,
                attempt.name,
                attempt.user,
                gpu_j,
                cpu_j,
                carbon_g(total, grid_g_per_kwh),
            )
        )
    return tuple(out)


def job_counts(
    rows: Iterable[tuple[int | None, str, int]], user_name: Callable[[int | None], str]
) -> tuple[JobCount, ...]:
    """(owner uid, state, count) rows as counts per state and user name: every state for each
    user with jobs, 0 included, so that an emptied queue reads 0 rather than no data. The
    store counts a suspended job `running` and again in a `suspended` row (Store.counts_by_owner):
    it is counted `suspended` only, so the states add up to the jobs."""
    counts: dict[tuple[str, str], int] = {}
    for uid, state, count in rows:
        user = user_name(uid)
        for each in JobState:
            counts.setdefault((each.value, user), 0)
        counts[(state, user)] += count
        if state == JobState.SUSPENDED.value:
            counts[(JobState.RUNNING.value, user)] -= count
    return tuple(JobCount(state, user, n) for (state, user), n in sorted(counts.items()))


# -------------------------------------------------------------------------------- loaders
def loader_figures(summary: Iterable[LoaderView]) -> tuple[LoaderFigures, ...]:
    """The shared loaders as `LoaderSupervisor.summary()` reports them (the producers' last
    status, read on the loop's own schedule: nothing is read here)."""
    out = []
    for view in summary:
        status = view.status
        consumers = status.consumers if status else []
        out.append(
            LoaderFigures(
                dataset=view.name,
                running=view.running,
                batches=status.produced if status else None,
                delivered=status.delivered_total if status else None,
                batches_per_s=sum(c.batches_per_s for c in consumers) if status else None,
                samples_per_s=(
                    sum(c.batches_per_s * c.batch_size for c in consumers) if status else None
                ),
                consumers=len(consumers),
                cpu_s=view.cpu_s,
                saved_cpu_s=view.saved_cpu_s,
            )
        )
    return tuple(out)
