"""Telemetry on the wire: a snapshot of the station (GPUs, MIG devices, processes, running
jobs, the host), the history points, and `telemetry`'s reply.
"""

from __future__ import annotations

from gpudesk.core.wire.base import WireModel
from gpudesk.core.wire.jobs import AttemptUsageFigures


class ProcessView(WireModel, frozen=True):
    pid: int
    used_memory_mib: float | None
    sm_pct: float | None
    mig_device: int | None  # the MIG device (index on its GPU) the process runs on
    job_id: int | None
    # "server": the GPU's MPS server (nvidia-cuda-mps-server); "client": a process running
    # through it (NVML gives no SM share of its own); None: outside MPS
    mps: str | None = None
    # A process outside gpudesk's jobs (job_id None): its owner's login name and its command
    # line (cut, control characters spelled out), where /proc shows them to the engine.
    user: str | None = None
    command: str | None = None

    @property
    def mps_server(self) -> bool:
        return self.mps == "server"


class MigDeviceView(WireModel, frozen=True):
    index: int
    uuid: str | None
    name: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    sm_count: int | None
    processes: list[ProcessView]

    @property
    def profile(self) -> str:
        """ "3g.20gb" from the device name "NVIDIA A100-SXM4-40GB MIG 3g.20gb"."""
        return (self.name or "").rsplit(" ", 1)[-1]


class GpuView(WireModel, frozen=True):
    """One GPU in a telemetry snapshot. `kernel_active_pct` is NVML's "GPU utilization"
    (time a kernel ran); `sm_activity_pct` is SM activity (DCGM or GPM), None where unknown."""

    index: int
    uuid: str | None
    name: str | None
    lost: bool
    memory_used_mib: float | None
    memory_total_mib: float | None
    kernel_active_pct: float | None
    sm_activity_pct: float | None
    power_w: float | None
    power_limit_w: float | None
    energy_j: float | None
    energy_source: str | None
    idle_power_w: float | None
    temperature_c: float | None
    sm_clock_mhz: float | None
    memory_clock_mhz: float | None
    mig_enabled: bool | None  # None: the GPU cannot do MIG, or could not be asked (a lost one)
    mig_devices: list[MigDeviceView]
    processes: list[ProcessView]
    jobs: list[int]
    unavailable: list[str]
    # its MIG mode after the next GPU reset, where NVML says (None: unknown, or an older engine)
    mig_pending: bool | None = None


class JobTelemetry(WireModel, frozen=True):
    """A running attempt in a snapshot: its process group's CPU, memory, I/O and GPU use."""

    id: int
    attempt_id: int
    name: str
    user: str  # its job's owner
    slot: str
    gpus: list[int]
    runtime_s: float | None
    processes: int
    cpu_pct: float | None
    cpu_s: float | None
    rss_mib: float | None
    io_read_mib: float | None
    io_write_mib: float | None
    gpu_memory_mib: float | None
    gpu_sm_pct: float | None
    energy: AttemptUsageFigures
    # its processes stopped (`gpudesk suspend`): it is `suspended`, holding its GPUs; absent
    # (False) from an engine before suspension
    suspended: bool = False


class HostView(WireModel, frozen=True):
    cpu_pct: float | None
    cores: int
    memory_used_mib: int
    memory_total_mib: int
    load_avg: list[float]
    cpu_energy_j: float | None
    cpu_energy_note: str | None
    grid_g_per_kwh: float
    gpu_energy_carbon_g: float | None


class Snapshot(WireModel, frozen=True):
    """The station at one sample: what the `telemetry` event carries and `telemetry` answers."""

    taken_at: float
    backend: str
    simulated: bool
    banner: str | None
    sampling_since: float
    interval_s: float | None  # how often the engine samples; None: `gpudesk top` sampled it itself
    host: HostView
    gpus: list[GpuView]
    jobs: list[JobTelemetry]

    def gpu(self, index: int) -> GpuView | None:
        return next((g for g in self.gpus if g.index == index), None)


class HistoryGpu(WireModel, frozen=True):
    index: int
    memory_used_mib: float | None
    kernel_active_pct: float | None
    sm_activity_pct: float | None
    power_w: float | None
    temperature_c: float | None
    energy_j: float | None


class HistoryPoint(WireModel, frozen=True):
    t: float
    gpus: list[HistoryGpu]


class TelemetryResult(WireModel, frozen=True):
    snapshot: Snapshot | None  # None before the first sample
    history: list[HistoryPoint]
    energy_today_j: dict[int, float]  # GPU index -> joules since local midnight
