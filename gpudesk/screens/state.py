"""What the desk shows, folded from the feed's frames: the latest engine status, jobs and
telemetry, plus what only the desk remembers (SM activity series for the sparklines, per-job
series for the job detail, energy counted since the desk opened). Pure data: no widgets."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpudesk import units
from gpudesk.api import (
    GpuView,
    HistoryGpu,
    HostView,
    JobTelemetry,
    JobView,
    LoaderView,
    MigDeviceView,
    StationInfo,
    StationStatus,
)
from gpudesk.render import since
from gpudesk.screens.feed import Frame

SERIES_POINTS = 120  # samples kept per series (2 minutes at the default 1 s interval)
GRAMS_PER_KWH_DEFAULT = 475.0
# How a job's state is drawn wherever the desk lists jobs (the queue, a job's screen, the
# running jobs under the GPU cards).
STATE_STYLES = {
    "queued": "yellow",
    "held": "magenta",
    "running": "green",
    "succeeded": "dim green",
    "failed": "bold red",
    "cancelled": "dim",
    "suspended": "bold magenta",
}


@dataclass
class GpuSeries:
    sm: deque[float | None] = field(default_factory=lambda: deque(maxlen=SERIES_POINTS))
    kernel: deque[float | None] = field(default_factory=lambda: deque(maxlen=SERIES_POINTS))


@dataclass
class JobSeries:
    sm: deque[float | None] = field(default_factory=lambda: deque(maxlen=SERIES_POINTS))
    memory: deque[float | None] = field(default_factory=lambda: deque(maxlen=SERIES_POINTS))
    cpu: deque[float | None] = field(default_factory=lambda: deque(maxlen=SERIES_POINTS))


@dataclass
class DeskState:
    frame: Frame | None = None
    gpu_series: dict[int, GpuSeries] = field(default_factory=dict)
    job_series: dict[int, JobSeries] = field(default_factory=dict)
    energy_at_open_j: dict[int, float] = field(default_factory=dict)
    opened_at: float | None = None  # the first frame's time
    # Today's energy as the engine last told it (it is read every few refreshes, the counters
    # at every sample), and each GPU's counter when it was read: today moves on with them.
    today_read: dict[int, float] | None = None
    counter_at_today_read: dict[int, float] = field(default_factory=dict)
    last_sample_at: float | None = None
    updates: int = 0

    # ------------------------------------------------------------------ folding
    def fold(self, frame: Frame) -> None:
        for point in frame.history:
            self._add_sample_points(point.t, point.gpus)
        telemetry = frame.telemetry
        if telemetry is not None:
            if self._add_sample_points(telemetry.taken_at, telemetry.gpus):
                for job in telemetry.jobs:
                    series = self.job_series.setdefault(job.id, JobSeries())
                    series.sm.append(job.gpu_sm_pct)
                    series.memory.append(job.gpu_memory_mib)
                    series.cpu.append(job.cpu_pct)
            for gpu in telemetry.gpus:
                if gpu.energy_j is not None:
                    self.energy_at_open_j.setdefault(gpu.index, gpu.energy_j)
        if frame.energy_today_j is not self.today_read:  # read anew
            self.today_read = frame.energy_today_j
            self.counter_at_today_read = {
                gpu.index: gpu.energy_j
                for gpu in (telemetry.gpus if telemetry else [])
                if gpu.energy_j is not None
            }
        if self.opened_at is None and frame.taken_at:
            self.opened_at = frame.taken_at
        self.frame = frame
        self.updates += 1

    def _add_sample_points(
        self, taken_at: float | None, gpus: Sequence[HistoryGpu | GpuView]
    ) -> bool:
        """Add one sample's GPU points unless it was seen already; True when added."""
        if (
            taken_at is not None
            and self.last_sample_at is not None
            and taken_at <= self.last_sample_at
        ):
            return False
        for gpu in gpus:
            series = self.gpu_series.setdefault(gpu.index, GpuSeries())
            series.sm.append(gpu.sm_activity_pct)
            series.kernel.append(gpu.kernel_active_pct)
        self.last_sample_at = taken_at
        return True

    # ------------------------------------------------------------------ reading
    @property
    def now(self) -> float | None:
        """When the frame was taken: running jobs' times are as of then (a replay stays put)."""
        return self.frame.taken_at if self.frame and self.frame.taken_at else None

    @property
    def status(self) -> StationStatus | None:
        return self.frame.status if self.frame else None

    @property
    def station(self) -> StationInfo | None:
        return self.status.station if self.status else None

    @property
    def simulated(self) -> bool:
        return self.station is not None and self.station.simulated

    @property
    def gpus(self) -> list[GpuView]:
        telemetry = self.frame.telemetry if self.frame else None
        return list(telemetry.gpus) if telemetry else []

    @property
    def host(self) -> HostView | None:
        telemetry = self.frame.telemetry if self.frame else None
        return telemetry.host if telemetry else None

    @property
    def jobs(self) -> list[JobView]:
        return self.frame.jobs if self.frame else []

    @property
    def loaders(self) -> list[LoaderView]:
        return list(self.status.loaders) if self.status else []

    def job(self, job_id: int) -> JobView | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def job_telemetry(self, job_id: int) -> JobTelemetry | None:
        telemetry = self.frame.telemetry if self.frame else None
        return next((j for j in (telemetry.jobs if telemetry else []) if j.id == job_id), None)

    def jobs_on_gpu(self, index: int) -> list[JobView]:
        """Running jobs placed on GPU `index` (the engine's `gpus` of each job)."""
        return [j for j in self.jobs if j.placed and index in j.gpus]

    def mig_device(self, uuid: str) -> MigDeviceView | None:
        """The MIG device with this UUID in the latest sample."""
        devices = (mig for gpu in self.gpus for mig in gpu.mig_devices)
        return next((mig for mig in devices if mig.uuid == uuid), None)

    def energy_since_open_j(self, gpu: GpuView) -> float | None:
        now, start = gpu.energy_j, self.energy_at_open_j.get(gpu.index)
        return None if now is None or start is None else max(0.0, now - start)

    def energy_today_j(self, gpu: GpuView) -> float | None:
        """GPU `gpu`'s energy since local midnight: the engine's figure, moved on by what the
        GPU's counter added since it was read, and never less than what the desk counted since
        it opened when it opened today (a fresh engine's sums start late). None if unknown."""
        told = (self.today_read or {}).get(gpu.index)
        if told is None:
            return None
        at_read = self.counter_at_today_read.get(gpu.index)
        if gpu.energy_j is not None and at_read is not None:
            told += max(0.0, gpu.energy_j - at_read)
        opened = self.energy_since_open_j(gpu)
        if opened is not None and self._opened_today():
            told = max(told, opened)
        return told

    def _opened_today(self) -> bool:
        now = self.now
        if self.opened_at is None or now is None:
            return False
        return time.localtime(self.opened_at)[:3] == time.localtime(now)[:3]

    def total_energy_j(self) -> tuple[float, str] | None:
        """GPU energy of all GPUs and since when it counts, for the header: today's (the
        engine's per-GPU sums since local midnight, as `energy_today_j` moves them on) where
        the engine tells them, else since its sampler began ("since 14:13")."""
        today = [self.energy_today_j(g) for g in self.gpus]
        if any(t is not None for t in today):
            return sum(t for t in today if t is not None), "today"
        told = self.frame.energy_today_j if self.frame else {}
        if told:  # no sample yet to move them on
            return sum(told.values()), "today"
        known = [g.energy_j for g in self.gpus if g.energy_j is not None]
        if not known:
            return None
        telemetry = self.frame.telemetry if self.frame else None
        began = since(telemetry.sampling_since, self.now) if telemetry else ""
        return sum(known), f"since {began}" if began else "since sampling began"

    def carbon_g(self) -> float | None:
        energy = self.total_energy_j()
        if energy is None:
            return None
        # A station set to 0 g/kWh (all hydro, say) means zero, not "unknown": the default is
        # only for a desk that has not heard from the station yet.
        grams = self.station.grid_intensity if self.station else GRAMS_PER_KWH_DEFAULT
        return units.carbon_g(energy[0], grams)

    def counts(self) -> dict[str, int]:
        return dict(self.status.counts) if self.status else {}


def sharing_mode(job: JobView, state: DeskState) -> str:
    """How a running job shares its placement: mps, naive, its MIG slice's profile (or "mig"
    before the slice shows in a sample), exclusive or cpu; "" when it is not placed."""
    if job.mode == "mig" and job.mig_slice:
        mig = state.mig_device(job.mig_slice)
        return mig.profile if mig is not None else "mig"
    return job.mode or ""


def job_runtime(job: JobView, now: float | None = None) -> float | None:
    """Seconds a job has run, its time suspended left out (`JobView.run_s`)."""
    return job.run_s(now)
