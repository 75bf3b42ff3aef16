"""`gpudesk calibrate`'s plan and its measurements, as records: what the fit
(`gpudesk.policy.calibration`) plans and reads, and what the probe runner
(`gpudesk.hw.probe_runner`) runs and fills on a real GPU. They live here, below both, because the
brain and the driver stand side by side and import neither each other (docs/architecture.md).
Pure data: no I/O, no processes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# What one probe process costs beside its measured seconds (python, torch, the CUDA context,
# warm-up): the estimate --dry-run prints; the runner reports the real wall time.
STARTUP_S = 6.0


# --- the plan ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class MigSlice:
    """A free MIG slice of the GPU: where a MIG probe may run."""

    profile: str  # "3g.20gb"
    compute_slices: int
    memory_slices: int
    uuid: str = ""  # the MIG device's (real GPUs)


@dataclass(frozen=True)
class ProbeRun:
    """One run of the plan: these probes at the same time, under `mechanism`."""

    mechanism: str  # "alone", "naive", "mps", "mig"
    intensities: tuple[str, ...]
    seconds: float
    mig: MigSlice | None = None

    @property
    def key(self) -> str:
        where = f"/{self.mig.profile}" if self.mig else ""
        return f"{self.mechanism}{where}:{'+'.join(self.intensities)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "mechanism": self.mechanism,
            "intensities": list(self.intensities),
            "seconds": self.seconds,
            "mig": asdict(self.mig) if self.mig else None,
        }


@dataclass(frozen=True)
class Plan:
    runs: tuple[ProbeRun, ...]
    seconds: float
    notes: tuple[str, ...] = ()

    @property
    def probe_seconds(self) -> float:
        """Measured probe time: the seconds the runs take one after the other."""
        return sum(r.seconds for r in self.runs)

    @property
    def estimated_wall_s(self) -> float:
        return sum(r.seconds + STARTUP_S + 1.0 for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [r.to_dict() for r in self.runs],
            "seconds_per_probe": self.seconds,
            "probe_seconds": self.probe_seconds,
            "estimated_wall_s": round(self.estimated_wall_s, 1),
            "notes": list(self.notes),
        }


# --- measurements -----------------------------------------------------------------------------
@dataclass(frozen=True)
class AloneMeasurement:
    """One intensity alone on the whole GPU: its steps per second and what NVML saw (shares of
    the GPU, 0..1; None where the GPU does not report it)."""

    intensity: str
    steps_per_s: float
    sm: float | None = None  # SM activity (GPM, Hopper+)
    membw: float | None = None  # DRAM bandwidth (GPM), else memory-controller busy time
    kernel_active: float | None = None  # NVML utilization.gpu
    sm_source: str = "measured"
    burst: int = 0  # the probe's kernels per step and host gap: the pairs reuse them
    gap_ms: float = 0.0


@dataclass(frozen=True)
class RunMeasurement:
    """Steps per second of each probe of one shared (or MIG) run, in the run's order."""

    run: ProbeRun
    steps_per_s: tuple[float, ...]


@dataclass(frozen=True)
class Measurements:
    alone: dict[str, AloneMeasurement]
    runs: tuple[RunMeasurement, ...]
    simulated: bool = False
