"""What the desk shows, folded from the feed's frames: the latest engine status, jobs and
telemetry, plus what only the desk remembers (SM activity series for the sparklines, per-job
series for the job detail, energy counted since the desk opened). Pure data: no widgets."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpudesk.screens.feed import Frame

SERIES_POINTS = 120  # samples kept per series (2 minutes at the default 1 s interval)
GRAMS_PER_KWH_DEFAULT = 475.0


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
    last_sample_at: float | None = None
    updates: int = 0

    # ------------------------------------------------------------------ folding
    def fold(self, frame: Frame) -> None:
        for sample in frame.history:
            self._add_sample_points(sample.get("t"), sample.get("gpus") or [])
        telemetry = frame.telemetry
        if telemetry is not None:
            if self._add_sample_points(telemetry.get("taken_at"), telemetry.get("gpus") or []):
                for job in telemetry.get("jobs") or []:
                    series = self.job_series.setdefault(job["id"], JobSeries())
                    series.sm.append(job.get("gpu_sm_pct"))
                    series.memory.append(job.get("gpu_memory_mib"))
                    series.cpu.append(job.get("cpu_pct"))
            for gpu in telemetry.get("gpus") or []:
                if gpu.get("energy_j") is not None:
                    self.energy_at_open_j.setdefault(gpu["index"], gpu["energy_j"])
        self.frame = frame
        self.updates += 1

    def _add_sample_points(self, taken_at: float | None, gpus: list[dict[str, Any]]) -> bool:
        """Add one sample's GPU points unless it was seen already; True when added."""
        if (
            taken_at is not None
            and self.last_sample_at is not None
            and taken_at <= self.last_sample_at
        ):
            return False
        for gpu in gpus:
            series = self.gpu_series.setdefault(gpu["index"], GpuSeries())
            series.sm.append(gpu.get("sm_activity_pct"))
            series.kernel.append(gpu.get("kernel_active_pct"))
        self.last_sample_at = taken_at
        return True

    # ------------------------------------------------------------------ reading
    @property
    def now(self) -> float | None:
        """When the frame was taken: running jobs' times are as of then (a replay stays put)."""
        return self.frame.taken_at if self.frame and self.frame.taken_at else None

    @property
    def status(self) -> dict[str, Any]:
        return self.frame.status if self.frame else {}

    @property
    def station(self) -> dict[str, Any]:
        return self.status.get("station") or {}

    @property
    def simulated(self) -> bool:
        return bool(self.station.get("simulated"))

    @property
    def gpus(self) -> list[dict[str, Any]]:
        telemetry = self.frame.telemetry if self.frame else None
        return list((telemetry or {}).get("gpus") or [])

    @property
    def host(self) -> dict[str, Any] | None:
        telemetry = self.frame.telemetry if self.frame else None
        return (telemetry or {}).get("host")

    @property
    def jobs(self) -> list[dict[str, Any]]:
        return self.frame.jobs if self.frame else []

    @property
    def loaders(self) -> list[dict[str, Any]]:
        return list(self.status.get("loaders") or [])

    def job(self, job_id: int) -> dict[str, Any] | None:
        return next((j for j in self.jobs if j["id"] == job_id), None)

    def job_telemetry(self, job_id: int) -> dict[str, Any] | None:
        telemetry = self.frame.telemetry if self.frame else None
        return next((j for j in (telemetry or {}).get("jobs") or [] if j["id"] == job_id), None)

    def jobs_on_gpu(self, index: int) -> list[dict[str, Any]]:
        """Running jobs placed on GPU `index` (from their slot, e.g. "gpu:0/mps")."""
        return [j for j in self.jobs if j["state"] == "running" and index in slot_gpus(j)]

    def energy_since_open_j(self, gpu: dict[str, Any]) -> float | None:
        now, start = gpu.get("energy_j"), self.energy_at_open_j.get(gpu["index"])
        return None if now is None or start is None else max(0.0, now - start)

    def total_energy_j(self) -> float | None:
        """GPU energy since sampling began, all GPUs."""
        values = [g.get("energy_j") for g in self.gpus]
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    def carbon_g(self) -> float | None:
        energy = self.total_energy_j()
        if energy is None:
            return None
        grams = self.station.get("grid_intensity") or GRAMS_PER_KWH_DEFAULT
        return energy / 3.6e6 * grams

    def counts(self) -> dict[str, int]:
        return dict(self.status.get("counts") or {})


def slot_gpus(job: dict[str, Any]) -> list[int]:
    """The GPU indices in a job's slot: "gpu:0,1" -> [0, 1]; "gpu:2/3g.20gb" -> [2]."""
    slot = job.get("slot") or ""
    if not slot.startswith("gpu:"):
        return []
    listed = slot[4:].split("/", 1)[0]
    return [int(part) for part in listed.split(",") if part.isdigit()]


def sharing_mode(job: dict[str, Any]) -> str:
    """How a running job shares its placement: mps, naive, a MIG profile, exclusive or cpu."""
    slot = job.get("slot") or ""
    if not slot:
        return ""
    if slot.startswith("cpu"):
        return "cpu"
    _, _, mode = slot.partition("/")
    return mode or "exclusive"
