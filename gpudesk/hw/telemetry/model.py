"""What a telemetry backend reports: plain records, `None` wherever a metric is unavailable.

Units are fixed by the field names (MiB, %, W, J, MHz, °C). `kernel_active_pct` is NVML's
"GPU utilization" — the share of time any kernel ran — and is *not* SM activity, which only GPM
(Hopper and newer) or DCGM can give; the two are kept apart on purpose.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gpudesk.core.record_dict import record_dict

# Metric names used in `GpuReading.unavailable` and in log messages.
METRICS = (
    "memory",
    "kernel_active",
    "sm_activity",
    "graphics_activity",
    "tensor_activity",
    "power",
    "energy_counter",
    "temperature",
    "clocks",
    "power_limit",
    "mig",
    "processes",
    "process_utilization",
    "ecc",
    "remapped_rows",
    "retired_pages",
    "xid",
)


class BackendUnavailable(RuntimeError):
    """The backend cannot read the station at all (no driver, a driver/library mismatch)."""


class GpuProcess(msgspec.Struct, frozen=True):
    pid: int
    used_memory_mib: float | None
    sm_pct: float | None = None  # the process's SM share, where NVML gives it
    mig_device: int | None = None  # index of the MIG device it runs on; None = the whole GPU
    # MPS_SERVER: the GPU's MPS server (nvidia-cuda-mps-server), MPS_CLIENT: a process running
    # through it, None: a process outside MPS. Under MPS, NVML's process-utilization samples
    # name the server alone: its SM share is its clients' together, none has one of its own.
    mps: str | None = None


MPS_SERVER = "server"
MPS_CLIENT = "client"


class MigDevice(msgspec.Struct, frozen=True):
    index: int  # position under its parent GPU
    uuid: str | None
    name: str | None  # e.g. "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    sm_count: int | None
    processes: tuple[GpuProcess, ...] = ()
    memory_free_mib: float | None = None  # what NVML calls free (its total less used, reserved)


class GpuHealth(msgspec.Struct, frozen=True):
    """A GPU's memory health as NVML counts it (None: the GPU does not give it; ECC off, or a
    GPU that remaps rows instead of retiring pages). Volatile ECC counts are since the driver
    loaded; remapped rows and retired pages are the GPU's for good."""

    ecc_sbe_volatile: int | None = None  # corrected (single-bit) errors
    ecc_dbe_volatile: int | None = None  # uncorrected (double-bit) errors
    remapped_correctable: int | None = None  # rows remapped for correctable errors
    remapped_uncorrectable: int | None = None
    remap_failure: bool | None = None  # a remapping failed: the GPU needs service
    retired_sbe: int | None = None  # pages retired for repeated single-bit errors
    retired_dbe: int | None = None  # pages retired for double-bit errors


class XidEvent(msgspec.Struct, frozen=True):
    """One XID error NVML delivered for a GPU (its nvmlEventData_t): the XID number and, on a
    GPU in MIG mode, the GPU and compute instance it is attributable to (None: not given)."""

    xid: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


class GpuReading(msgspec.Struct, frozen=True):
    index: int
    uuid: str | None
    name: str | None
    lost: bool = False  # the device fell off the bus (GpuIsLost); other fields are None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    # What NVML calls free: the total less what is used and what the driver reserves (v2), so
    # not total - used; what dcgm-exporter's DCGM_FI_DEV_FB_FREE reports.
    memory_free_mib: float | None = None
    kernel_active_pct: float | None = None
    sm_activity_pct: float | None = None
    # GPM (Hopper and newer): the share of time any compute/graphics work was active, and of
    # SMs busy with tensor instructions; None where there is no GPM (or on a simulated GPU: its
    # model's values, labelled SIMULATED with everything else)
    graphics_active_pct: float | None = None
    tensor_active_pct: float | None = None
    power_w: float | None = None
    energy_counter_j: float | None = None  # the device's cumulative counter; None if unsupported
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    power_limit_w: float | None = None
    mig_enabled: bool | None = None  # None: the GPU cannot do MIG, or the query is unsupported
    # its MIG mode after the next GPU reset (NVML's pending mode; None where unknown): set apart
    # from `mig_enabled` by `nvidia-smi -mig`, which takes effect only at a reset
    mig_pending: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    unavailable: tuple[str, ...] = ()  # METRICS this device does not support (probed once)
    health: GpuHealth | None = None  # its memory's error counts (None: none read)
    # The last XID error NVML delivered since the backend opened, 0 before the first (what
    # dcgm-exporter exports as DCGM_FI_DEV_XID_ERRORS); None: the GPU gives no XID events
    # (NotSupported when they were registered), or the backend has none to give.
    last_xid: int | None = None
    xids: tuple[XidEvent, ...] = ()  # the XIDs delivered since the previous read, oldest first

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


class BackendReading(msgspec.Struct, frozen=True):
    """One pass over every device. `banner` is a station-wide problem to show in every view
    (the driver and library disagree, NVML could not start); the GPUs list may then be empty."""

    taken_at: float  # time.time()
    monotonic: float  # time.monotonic(), for rates and energy integration
    gpus: tuple[GpuReading, ...] = ()
    banner: str | None = None


class GpuInfo(msgspec.Struct, frozen=True):
    """The static facts placement needs about one GPU."""

    index: int
    uuid: str | None
    name: str | None
    memory_total_mib: float | None
    mig_capable: bool = False


class JobLoad(msgspec.Struct, frozen=True):
    """What a job placed on a GPU asks of it; the simulated backend turns this into load."""

    job_id: int
    pid: int  # the attempt's process group leader: its processes are reported under this pid
    gpus: tuple[int, ...]
    memory_gb: float | None
    sm_pct: float | None
    mig_slice: str | None = None  # the MIG device (UUID) it runs on
