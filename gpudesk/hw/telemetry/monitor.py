"""The sampling core shared by the engine's sampler and `gpudesk top` without an engine.

`collect()` does the slow part — the GPU backend, psutil, RAPL — and touches nothing the engine
owns, so the engine runs it on a thread. `ingest()` turns what was collected into the station
view (the wire's `Snapshot`: what the `telemetry` reply and event carry, and `gpudesk top`
draws), credits energy and host use to each running attempt, and keeps short in-memory history
for live views.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Collection, Iterable, Sequence

import msgspec

from gpudesk.core.station import DEFAULT_GRID_G_PER_KWH
from gpudesk.core.wire.telemetry import (
    GpuView,
    HistoryGpu,
    HistoryPoint,
    HostView,
    JobTelemetry,
    MigDeviceView,
    ProcessView,
    Snapshot,
)
from gpudesk.hw import hostmetrics
from gpudesk.hw.telemetry.backend import TelemetryBackend
from gpudesk.hw.telemetry.energy import (
    AttemptUsage,
    GpuEnergyMeter,
    Interval,
    Occupant,
    attribute_cpu,
    attribute_gpu,
    rounded,
)
from gpudesk.hw.telemetry.foreign import ForeignProcess, ForeignProcesses
from gpudesk.hw.telemetry.model import (
    MPS_CLIENT,
    MPS_SERVER,
    BackendReading,
    BackendUnavailable,
    GpuInfo,
    GpuProcess,
    GpuReading,
    JobLoad,
)
from gpudesk.hw.telemetry.rapl import RaplReader
from gpudesk.units import carbon_g

log = logging.getLogger("gpudesk.telemetry")

REOPEN_AFTER_S = 30.0  # how often to retry a backend that could not start
HISTORY_POINTS = 600
MIB = 1024 * 1024


class TrackedAttempt(msgspec.Struct, frozen=True):
    """A running attempt as the engine describes it to the monitor."""

    attempt_id: int
    job_id: int
    name: str
    pgid: int
    slot: str
    gpus: tuple[int, ...] = ()
    memory_gb: float | None = None
    sm_pct: float | None = None
    started_at: float | None = None
    mig_slice: str | None = None
    user: str = ""  # its job's owner
    suspended: bool = False  # `gpudesk suspend` stopped its processes (it holds its GPUs)

    def load(self) -> JobLoad:
        # A suspended job keeps its memory and launches no kernel: a SIMULATED GPU shows it so
        # (0 % SM, its share of the power gone), as a real one would.
        sm_pct = 0.0 if self.suspended else self.sm_pct
        return JobLoad(self.job_id, self.pgid, self.gpus, self.memory_gb, sm_pct, self.mig_slice)


class RawSample(msgspec.Struct, frozen=True):
    reading: BackendReading
    inventory: tuple[GpuInfo, ...]
    host: hostmetrics.HostSample
    groups: dict[int, hostmetrics.GroupSample]
    pgid_of: dict[int, int]  # GPU process pid -> its process group
    rapl_j: float | None
    attempts: tuple[TrackedAttempt, ...]
    # the GPU processes outside every attempt's process group: whose and what (foreign.py)
    foreign: dict[int, ForeignProcess] = msgspec.field(default_factory=dict)


class _Previous(msgspec.Struct):
    host: hostmetrics.HostSample
    groups: dict[int, hostmetrics.GroupSample]
    rapl_j: float | None


class _Mean(msgspec.Struct):
    total: float = 0.0
    count: int = 0

    def add(self, value: float | None) -> None:
        if value is not None:
            self.total += value
            self.count += 1

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.count else None


class Averages(msgspec.Struct):
    """Means since the last drain, for the store's downsampled series."""

    gpus: dict[tuple[int, str], _Mean] = msgspec.field(default_factory=dict)
    # (job, attempt, metric)
    jobs: dict[tuple[int, int, str], _Mean] = msgspec.field(default_factory=dict)

    def add_gpu(self, index: int, metric: str, value: float | None) -> None:
        self.gpus.setdefault((index, metric), _Mean()).add(value)

    def add_job(self, job_id: int, attempt_id: int, metric: str, value: float | None) -> None:
        self.jobs.setdefault((job_id, attempt_id, metric), _Mean()).add(value)


GPU_SERIES = ("sm_activity_pct", "kernel_active_pct", "memory_used_mib", "power_w", "temperature_c")
JOB_SERIES = ("cpu_pct", "rss_mib", "gpu_memory_mib", "gpu_sm_pct")
# A job's share of its GPUs' power (W) over each sample's interval: the energy the split credited
# it (energy.attribute_gpu) over the interval's seconds. Stored with the job series, not in the
# view (the `telemetry` event's jobs carry their energy so far instead).
JOB_POWER_SERIES = "gpu_power_w"
# 1 for each window in which a job's GPUs were simulated: whether a stored job ran on simulated
# GPUs, whatever backend the engine has when it is asked later.
JOB_SIMULATED_SERIES = "gpu_simulated"


class Monitor:
    def __init__(
        self,
        backend: TelemetryBackend,
        *,
        grid_g_per_kwh: float = DEFAULT_GRID_G_PER_KWH,
        idle_power_w: dict[str, float] | None = None,
        rapl: RaplReader | None = None,
        history_points: int = HISTORY_POINTS,
        interval_s: float | None = None,
    ) -> None:
        self.backend = backend
        self.interval_s = interval_s  # how often it is sampled; None: on demand (`gpudesk top`)
        self.grid_g_per_kwh = grid_g_per_kwh
        self.meter = GpuEnergyMeter(
            idle_power_w, default_idle_w=getattr(backend, "idle_power_w", None)
        )
        self.rapl = rapl if rapl is not None else RaplReader()
        self.foreign = ForeignProcesses()  # the sampler thread's own
        self.usage: dict[int, AttemptUsage] = {}  # by attempt id
        self.history: deque[HistoryPoint] = deque(maxlen=history_points)
        self.averages = Averages()
        self.latest: Snapshot | None = None
        # The sample behind `latest`, its attempts those still running when it was taken in:
        # typed readings for the engine's metrics (gpudesk.engine.services.metrics).
        self.latest_raw: RawSample | None = None
        self.started_at = time.time()
        self.opened = False
        self.open_problem: str | None = None
        self._next_open = 0.0
        self._inventory: tuple[GpuInfo, ...] = ()
        self._previous: _Previous | None = None

    @property
    def simulated(self) -> bool:
        return self.backend.simulated

    @property
    def inventory(self) -> tuple[GpuInfo, ...]:
        return self._inventory

    # ------------------------------------------------------------ collecting
    def open(self) -> bool:
        """Start the backend if it is not running; retried at most every REOPEN_AFTER_S."""
        if self.opened:
            return True
        now = time.monotonic()
        if now < self._next_open:
            return False
        self._next_open = now + REOPEN_AFTER_S
        try:
            self.backend.open()
            self._inventory = tuple(self.backend.inventory())
        except BackendUnavailable as exc:
            if str(exc) != self.open_problem:
                log.warning("GPU backend %s unavailable: %s", self.backend.name, exc)
            self.open_problem = str(exc)
            return False
        if self.open_problem:
            log.info("GPU backend %s is back", self.backend.name)
        self.opened, self.open_problem = True, None
        return True

    def collect(self, attempts: Sequence[TrackedAttempt] = ()) -> RawSample:
        attempts = tuple(attempts)
        if self.open():
            self.backend.set_load([a.load() for a in attempts if a.gpus])
            try:
                reading = self.backend.read()
            except Exception as exc:  # a backend bug must not stop the sampler
                log.exception("reading the GPUs failed")
                reading = BackendReading(
                    time.time(), time.monotonic(), banner=f"reading the GPUs failed: {exc}"
                )
        else:
            reading = BackendReading(time.time(), time.monotonic(), banner=self.open_problem)
        pgid_of = {}
        for gpu in reading.gpus:
            for proc in _all_processes(gpu):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    pgid_of[proc.pid] = os.getpgid(proc.pid)
        ours = {a.pgid for a in attempts}
        outside = [pid for pid, pgid in pgid_of.items() if pgid not in ours and pid not in ours]
        return RawSample(
            reading=reading,
            inventory=self._inventory,
            host=hostmetrics.sample_host(),
            groups=hostmetrics.sample_groups(a.pgid for a in attempts),
            pgid_of=pgid_of,
            rapl_j=self.rapl.read(),
            attempts=attempts,
            foreign=self.foreign.describe(outside),
        )

    def close(self) -> None:
        try:
            self.backend.close()
        except Exception:
            log.exception("closing the GPU backend failed")

    # -------------------------------------------------------------- ingesting
    def ingest(self, raw: RawSample, running: Collection[int] | None = None) -> Snapshot:
        """Fold one sample into energy, usage and history; returns the station view.
        `running` are the attempts still running now: a sample taken before one ended must
        not credit it again (None: every attempt the sample names)."""
        reading = raw.reading
        if running is not None:
            raw = msgspec.structs.replace(
                raw, attempts=tuple(a for a in raw.attempts if a.attempt_id in running)
            )
        busy = {i for a in raw.attempts for i in a.gpus}
        intervals = self.meter.update(reading, busy)
        for attempt in raw.attempts:
            self.usage.setdefault(
                attempt.attempt_id, AttemptUsage(attempt.attempt_id, attempt.job_id)
            )

        credited = {a.attempt_id: self.usage[a.attempt_id].gpu_j for a in raw.attempts}
        gpu_views, job_gpu = self._ingest_gpus(raw, intervals)
        job_views = self._ingest_jobs(raw, job_gpu)
        self._add_series(raw, gpu_views, job_views)
        for attempt in raw.attempts:
            power = self._power_share(attempt, intervals, credited.get(attempt.attempt_id))
            self.averages.add_job(attempt.job_id, attempt.attempt_id, JOB_POWER_SERIES, power)
            if attempt.gpus and self.simulated:
                self.averages.add_job(attempt.job_id, attempt.attempt_id, JOB_SIMULATED_SERIES, 1)

        self.latest_raw = raw
        self.latest = Snapshot(
            taken_at=reading.taken_at,
            backend=self.backend.name,
            simulated=self.simulated,
            banner=reading.banner,
            sampling_since=self.started_at,
            interval_s=self.interval_s,
            host=self._host_view(raw),
            gpus=gpu_views,
            jobs=job_views,
        )
        return self.latest

    def _ingest_gpus(
        self, raw: RawSample, intervals: dict[int, Interval]
    ) -> tuple[list[GpuView], dict[int, dict[str, float]]]:
        """Each GPU's view, its energy split among its occupants; and attempt id -> the GPU
        memory and SM sums of its processes."""
        reading = raw.reading
        by_pgid = {a.pgid: a for a in raw.attempts}
        gpu_views = []
        occupants: dict[int, list[Occupant]] = {}
        job_gpu: dict[int, dict[str, float]] = {}  # attempt id -> gpu memory / sm sums
        for gpu in reading.gpus:
            # A pid we could not look up may still be a group leader (the simulator reports
            # each job under its leader).
            owners = {
                proc.pid: by_pgid.get(raw.pgid_of.get(proc.pid, proc.pid))
                for proc in _all_processes(gpu)
            }
            for proc in _all_processes(gpu):
                owner = owners[proc.pid]
                if owner is not None:
                    sums = job_gpu.setdefault(owner.attempt_id, {})
                    if proc.used_memory_mib is not None:
                        sums["memory"] = sums.get("memory", 0.0) + proc.used_memory_mib
                    if proc.sm_pct is not None:
                        sums["sm"] = sums.get("sm", 0.0) + proc.sm_pct
            holders = {a.attempt_id: a for a in raw.attempts if gpu.index in a.gpus}
            holders.update({o.attempt_id: o for o in owners.values() if o is not None})
            occupants[gpu.index] = _occupants(gpu, holders.values(), owners)
            gpu_views.append(
                self._gpu_view(
                    gpu, owners, sorted({a.job_id for a in holders.values()}), raw.foreign
                )
            )
        attribute_gpu(self.usage, intervals, occupants)
        return gpu_views, job_gpu

    def _ingest_jobs(
        self, raw: RawSample, job_gpu: dict[int, dict[str, float]]
    ) -> list[JobTelemetry]:
        """Each attempt's view; CPU time, memory and I/O into its usage, CPU energy split."""
        reading = raw.reading
        previous = self._previous
        seconds = raw.host.taken_at - previous.host.taken_at if previous else 0.0
        cpu_delta: dict[int, float] = {}
        job_views = []
        for attempt in raw.attempts:
            usage = self.usage[attempt.attempt_id]
            group = raw.groups.get(attempt.pgid)
            before = previous.groups.get(attempt.pgid) if previous else None
            cpu_pct = None
            if group is not None:
                if before is not None:
                    cpu_delta[attempt.attempt_id] = max(0.0, group.cpu_seconds - before.cpu_seconds)
                cpu_pct = hostmetrics.cpu_percent(before, group, seconds)
                usage.cpu_s = max(usage.cpu_s, group.cpu_seconds)
                usage.rss_peak_bytes = max(usage.rss_peak_bytes, group.rss_bytes)
                usage.io_read_bytes = max(usage.io_read_bytes, group.io_read_bytes)
                usage.io_write_bytes = max(usage.io_write_bytes, group.io_write_bytes)
            sums = job_gpu.get(attempt.attempt_id, {})
            usage.add_gpu_sample(sums.get("memory"), sums.get("sm"), reading.monotonic)
            job_views.append(self._job_view(attempt, group, cpu_pct, sums, reading.taken_at))
        if previous is not None and raw.rapl_j is not None and previous.rapl_j is not None:
            attribute_cpu(
                self.usage,
                raw.rapl_j - previous.rapl_j,
                cpu_delta,
                raw.host.busy_seconds - previous.host.busy_seconds,
            )
        self._previous = _Previous(raw.host, raw.groups, raw.rapl_j)
        return job_views

    def _add_series(
        self, raw: RawSample, gpu_views: list[GpuView], job_views: list[JobTelemetry]
    ) -> None:
        """The store's window averages and the live history."""
        for view in gpu_views:
            for metric in GPU_SERIES:
                self.averages.add_gpu(view.index, metric, getattr(view, metric))
        for attempt, job in zip(raw.attempts, job_views, strict=True):
            for metric in JOB_SERIES:
                self.averages.add_job(
                    attempt.job_id, attempt.attempt_id, metric, getattr(job, metric)
                )
        points = [
            HistoryGpu(
                index=v.index,
                memory_used_mib=v.memory_used_mib,
                kernel_active_pct=v.kernel_active_pct,
                sm_activity_pct=v.sm_activity_pct,
                power_w=v.power_w,
                temperature_c=v.temperature_c,
                energy_j=v.energy_j,
            )
            for v in gpu_views
        ]
        self.history.append(HistoryPoint(raw.reading.taken_at, points))

    def _power_share(
        self, attempt: TrackedAttempt, intervals: dict[int, Interval], before_j: float | None
    ) -> float | None:
        """The watts of its GPUs the energy split credited this attempt over this interval;
        None without an interval on its GPUs (the first sample, no GPU)."""
        seconds = next((intervals[i].seconds for i in attempt.gpus if i in intervals), None)
        after_j = self.usage[attempt.attempt_id].gpu_j
        if not seconds or seconds <= 0 or after_j is None:
            return None
        return max(0.0, after_j - (before_j or 0.0)) / seconds

    def finish(self, attempt_id: int) -> AttemptUsage | None:
        """An attempt ended: its final usage, no longer tracked."""
        return self.usage.pop(attempt_id, None)

    def pending_job_means(self, job_id: int) -> dict[str, float]:
        """The job's means in the window not stored yet (its latest attempt's), by metric."""
        found: dict[str, tuple[int, float]] = {}
        for (job, attempt, metric), mean in self.averages.jobs.items():
            value = mean.value
            if job == job_id and value is not None and attempt >= found.get(metric, (-1, 0.0))[0]:
                found[metric] = (attempt, value)
        return {metric: value for metric, (_, value) in found.items()}

    def drain_averages(self) -> Averages:
        averages, self.averages = self.averages, Averages()
        return averages

    # ------------------------------------------------------------------ views
    def _gpu_view(
        self,
        gpu: GpuReading,
        owners: dict[int, TrackedAttempt | None],
        job_ids: list[int],
        foreign: dict[int, ForeignProcess],
    ) -> GpuView:
        def process(proc: GpuProcess) -> ProcessView:
            owner = owners.get(proc.pid)
            # not a gpudesk job's: whose, and what
            outside = foreign.get(proc.pid) if owner is None else None
            return ProcessView(
                pid=proc.pid,
                used_memory_mib=rounded(proc.used_memory_mib),
                sm_pct=rounded(proc.sm_pct),
                mig_device=proc.mig_device,
                job_id=owner.job_id if owner else None,
                mps=proc.mps,
                user=outside.user if outside else None,
                command=outside.command if outside else None,
            )

        return GpuView(
            index=gpu.index,
            uuid=gpu.uuid,
            name=gpu.name,
            lost=gpu.lost,
            memory_used_mib=rounded(gpu.memory_used_mib),
            memory_total_mib=rounded(gpu.memory_total_mib),
            kernel_active_pct=rounded(gpu.kernel_active_pct),
            sm_activity_pct=rounded(gpu.sm_activity_pct),
            power_w=rounded(gpu.power_w),
            power_limit_w=rounded(gpu.power_limit_w),
            energy_j=rounded(self.meter.energy_j(gpu.index)),
            energy_source=self.meter.source(gpu.index),
            idle_power_w=rounded(self.meter.idle_power_w(gpu.index)),
            temperature_c=rounded(gpu.temperature_c),
            sm_clock_mhz=rounded(gpu.sm_clock_mhz),
            memory_clock_mhz=rounded(gpu.memory_clock_mhz),
            mig_enabled=gpu.mig_enabled,
            mig_pending=gpu.mig_pending,
            mig_devices=[
                MigDeviceView(
                    index=mig.index,
                    uuid=mig.uuid,
                    name=mig.name,
                    gpu_instance_id=mig.gpu_instance_id,
                    compute_instance_id=mig.compute_instance_id,
                    memory_used_mib=rounded(mig.memory_used_mib),
                    memory_total_mib=rounded(mig.memory_total_mib),
                    sm_count=mig.sm_count,
                    processes=[process(p) for p in mig.processes],
                )
                for mig in gpu.mig_devices
            ],
            processes=[process(p) for p in gpu.processes],
            jobs=job_ids,
            unavailable=list(gpu.unavailable),
        )

    def _job_view(
        self,
        attempt: TrackedAttempt,
        group: hostmetrics.GroupSample | None,
        cpu_pct: float | None,
        gpu_sums: dict[str, float],
        now: float,
    ) -> JobTelemetry:
        usage = self.usage[attempt.attempt_id]
        return JobTelemetry(
            id=attempt.job_id,
            attempt_id=attempt.attempt_id,
            name=attempt.name,
            user=attempt.user,
            slot=attempt.slot,
            gpus=list(attempt.gpus),
            runtime_s=rounded(now - attempt.started_at) if attempt.started_at else None,
            processes=group.processes if group else 0,
            cpu_pct=rounded(cpu_pct),
            cpu_s=rounded(group.cpu_seconds) if group else None,
            rss_mib=rounded(group.rss_bytes / MIB) if group else None,
            io_read_mib=rounded(group.io_read_bytes / MIB) if group else None,
            io_write_mib=rounded(group.io_write_bytes / MIB) if group else None,
            gpu_memory_mib=rounded(gpu_sums.get("memory")),
            gpu_sm_pct=rounded(gpu_sums.get("sm")),
            energy=usage.figures(self.grid_g_per_kwh),
            suspended=attempt.suspended,
        )

    def _host_view(self, raw: RawSample) -> HostView:
        host = raw.host
        return HostView(
            cpu_pct=host.cpu_pct,
            cores=host.cores,
            memory_used_mib=round(host.memory_used / MIB),
            memory_total_mib=round(host.memory_total / MIB),
            load_avg=list(host.load_avg),
            cpu_energy_j=rounded(raw.rapl_j),
            cpu_energy_note=self.rapl.problem if raw.rapl_j is None else None,
            grid_g_per_kwh=self.grid_g_per_kwh,
            gpu_energy_carbon_g=rounded(
                carbon_g(
                    sum(self.meter.energy_j(g.index) or 0.0 for g in raw.reading.gpus),
                    self.grid_g_per_kwh,
                ),
                3,
            ),
        )


def _all_processes(gpu: GpuReading) -> Iterable[GpuProcess]:
    """Each process on the GPU once. Backends list a MIG GPU's processes on the GPU (with their
    MIG device) and again under that device; a process only a MIG device lists counts too."""
    seen: set[int] = set()
    for proc in (*gpu.processes, *(p for mig in gpu.mig_devices for p in mig.processes)):
        if proc.pid not in seen:
            seen.add(proc.pid)
            yield proc


def _occupants(
    gpu: GpuReading, holders: Iterable[TrackedAttempt], owners: dict[int, TrackedAttempt | None]
) -> list[Occupant]:
    """Each attempt on a GPU with its processes' SM share, or None for all when the GPU gives
    no per-process SM figures. Under MPS, NVML's samples name only the MPS server: its share
    is its clients', and goes to the attempts with a client on the GPU, evenly (NVML gives no
    per-client figure); attempts outside MPS keep their own processes' share."""
    holders = list(holders)
    processes = list(_all_processes(gpu))
    servers = [p for p in processes if p.mps == MPS_SERVER]
    mps_clients = {
        owner.attempt_id
        for p in processes
        if p.mps == MPS_CLIENT and (owner := owners.get(p.pid)) is not None
    }
    if not any(p.sm_pct is not None for p in processes) or (mps_clients and not servers):
        # no figures, or MPS clients whose server is not known: none of theirs can be told
        return [Occupant(a.attempt_id, None) for a in holders]
    share = {a.attempt_id: 0.0 for a in holders}
    for proc in processes:
        owner = owners.get(proc.pid)
        if owner is not None and proc.sm_pct is not None:
            share[owner.attempt_id] = share.get(owner.attempt_id, 0.0) + proc.sm_pct
    if mps_clients:
        server_sm = sum(p.sm_pct or 0.0 for p in servers) / len(mps_clients)
        for attempt_id in mps_clients:
            share[attempt_id] = share.get(attempt_id, 0.0) + server_sm
    return [
        Occupant(a.attempt_id, share[a.attempt_id], a.attempt_id in mps_clients) for a in holders
    ]


# Per GPU: (index, MIG mode, its MIG devices' UUIDs): what placement's slices come from.
MigLayout = tuple[tuple[int, bool, tuple[str, ...]], ...]


def mig_layout(view: Snapshot) -> MigLayout:
    """The MIG layout a station view (`Monitor`'s) shows: the engine's placement watches it."""
    return tuple(
        (g.index, bool(g.mig_enabled), tuple(sorted(m.uuid or "" for m in g.mig_devices)))
        for g in view.gpus
    )
