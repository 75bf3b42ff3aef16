"""The real GPUs, through nvidia-ml-py (`pynvml`).

Every NVML call in `read()` goes through `NvmlBackend._query`, which applies one error policy so
that no metric and no device can stop the sampler:

- NotSupported, FunctionNotFound, NoPermission: the metric is unavailable on that device. It is
  asked once, logged once at INFO, listed in `GpuReading.unavailable` and never asked again.
- GpuIsLost: the device fell off the bus; it is reported `lost` and not asked about again.
- Uninitialized, LibRmVersionMismatch, DriverNotLoaded: NVML itself stopped answering; the reading
  carries a banner.
- anything else (including a non-NVML exception): None for this read only, logged once per
  (device, metric, error class) at WARNING.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

import msgspec

from gpudesk.hw.telemetry.health import read_health
from gpudesk.hw.telemetry.model import (
    METRICS,
    MPS_CLIENT,
    MPS_SERVER,
    BackendReading,
    BackendUnavailable,
    GpuInfo,
    GpuProcess,
    GpuReading,
    JobLoad,
    MigDevice,
)
from gpudesk.hw.telemetry.xid import XidWatch

log = logging.getLogger("gpudesk.telemetry")

MIB = 1024 * 1024
# The MPS server's name as NVML gives it (nvmlSystemGetProcessName, which nvidia-smi's process
# table shows too; seen on an H200, driver 580.159.04). Its basename is compared, in case a
# control daemon starts it by path.
MPS_SERVER_NAME = "nvidia-cuda-mps-server"

DRIVER_MISMATCH = (
    "the NVIDIA kernel module and libnvidia-ml are different versions (usually a driver update "
    "without a reboot): reload the nvidia kernel modules or reboot the station"
)


# The GPM metrics read at each sample (Hopper and newer): (gpudesk's metric, pynvml's
# constant). GRAPHICS_UTIL is "the percentage of time any compute/graphics app was active",
# which dcgm-exporter names DCGM_FI_PROF_GR_ENGINE_ACTIVE; ANY_TENSOR_UTIL "the percentage of
# SMs busy executing any tensor instruction", NVML's nearest to DCGM_FI_PROF_PIPE_TENSOR_ACTIVE.
GPM_METRICS = (
    ("sm_activity", "NVML_GPM_METRIC_SM_UTIL"),
    ("graphics_activity", "NVML_GPM_METRIC_GRAPHICS_UTIL"),
    ("tensor_activity", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
)


class _DeviceLost(Exception):
    """A call on the device raised GpuIsLost."""


class _LibraryDown(Exception):
    """NVML as a whole stopped answering; the message is the banner."""


class _Gpm(msgspec.Struct):
    samples: tuple[Any, Any]  # two GPM samples, filled in turn
    current: int = 0  # the sample the next read fills
    primed: bool = False  # the other sample holds the previous read's


class _Device(msgspec.Struct):
    """What the backend keeps about one GPU (or one MIG slot under it) between reads."""

    index: int
    label: str  # "GPU 0", "GPU 0 MIG 2": for log lines
    handle: Any = None
    uuid: str | None = None
    name: str | None = None
    memory_total_mib: float | None = None
    mig_capable: bool = False
    lost: bool = False
    unavailable: set[str] = msgspec.field(default_factory=set)  # metrics probed as unsupported
    # (metric, error class) logged
    warned: set[tuple[str, str]] = msgspec.field(default_factory=set)
    memory_v1: bool = False  # nvmlDeviceGetMemoryInfo_v2 is missing: use the v1 call
    gpm: _Gpm | None = None
    xid: XidWatch | None = None  # its XID event set (gpudesk.hw.telemetry.xid)
    utilization_since_us: int = 0  # newest process-utilization sample seen
    migs: dict[int, _Device] = msgspec.field(default_factory=dict)  # MIG slot -> its state
    # pid -> whether it is an MPS server, for the processes listed at the last read
    mps_servers: dict[int, bool] = msgspec.field(default_factory=dict)

    def identity(self) -> GpuReading:
        return GpuReading(self.index, self.uuid, self.name, lost=self.lost)

    def xid_fields(self) -> dict[str, Any]:
        """The reading's last_xid and the XIDs new since the last read; none where the GPU
        gives no XID events."""
        if self.xid is None or "xid" in self.unavailable:
            return {}
        return {"last_xid": self.xid.last, "xids": self.xid.take()}


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def _scaled(value: float | None, divisor: float = 1.0) -> float | None:
    return None if value is None else value / divisor


def _init_failure(nv: Any, exc: BaseException) -> str:
    """A one-sentence reason nvmlInit failed."""
    if isinstance(exc, nv.NVMLError_LibRmVersionMismatch):
        return DRIVER_MISMATCH
    if isinstance(exc, nv.NVMLError_LibraryNotFound):
        return "no NVIDIA driver answers (libnvidia-ml.so.1, which the driver installs, is missing)"
    if isinstance(exc, nv.NVMLError_DriverNotLoaded):
        return "no NVIDIA driver answers (the nvidia kernel module is not loaded)"
    if isinstance(exc, nv.NVMLError):
        return f"NVML could not start: {exc}"
    return f"NVML could not start: {type(exc).__name__}: {exc}"


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


def probe_nvml(module: Any = None) -> bool:
    """Whether an NVIDIA driver answers: nvmlInit succeeds and sees at least one GPU."""
    try:
        nv = module if module is not None else _import_pynvml()
    except ImportError:
        return False
    try:
        nv.nvmlInit()
    except Exception:  # NVMLError, or OSError from a broken library
        return False
    try:
        return int(nv.nvmlDeviceGetCount()) > 0
    except Exception:
        return False
    finally:
        with suppress(Exception):
            nv.nvmlShutdown()


def nvml_problem(module: Any = None) -> str | None:
    """Why NVML shows no GPU here (no driver, a broken library, none attached), or None when
    it sees one: what `auto` resolving to `none` means, in words."""
    backend = NvmlBackend(module)
    try:
        backend.open()
    except BackendUnavailable as exc:
        return str(exc)
    try:
        return None if backend.inventory() else "the NVIDIA driver answers but sees no GPU"
    finally:
        backend.close()


class NvmlBackend:
    """The station's GPUs as NVML reports them. `module` is a pynvml-like object (tests pass a
    fake); by default `pynvml` is imported when the backend opens."""

    name = "nvml"
    simulated = False

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._nv: Any = None  # the module, once open
        self._devices: list[_Device] = []
        self._lock = threading.Lock()
        self._unsupported: tuple[type[BaseException], ...] = ()
        self._library_down: tuple[type[BaseException], ...] = ()
        self._lost: tuple[type[BaseException], ...] = ()
        self._memory_v2_missing: tuple[type[BaseException], ...] = ()
        self._memory_v2: int | None = None

    # -- protocol ---------------------------------------------------------------------------

    def open(self) -> None:
        with self._lock:
            if self._nv is not None:
                return
            nv = self._module
            if nv is None:
                try:
                    nv = _import_pynvml()
                except ImportError as exc:
                    raise BackendUnavailable(
                        f"NVML cannot be read: pynvml (nvidia-ml-py) failed to import: {exc}"
                    ) from None
            try:
                nv.nvmlInit()
            except Exception as exc:
                raise BackendUnavailable(_init_failure(nv, exc)) from None
            self._bind(nv)
            try:
                count = int(nv.nvmlDeviceGetCount())
                self._devices = [self._open_device(index) for index in range(count)]
            except Exception as exc:
                self._devices = []
                self._nv = None
                with suppress(Exception):
                    nv.nvmlShutdown()
                if isinstance(exc, _LibraryDown):
                    raise BackendUnavailable(str(exc)) from None
                reason = f"NVML started but could not list the GPUs: {exc}"
                raise BackendUnavailable(reason) from None

    def inventory(self) -> list[GpuInfo]:
        """The GPUs that can be read; a lost GPU is left out."""
        return [
            GpuInfo(d.index, d.uuid, d.name, d.memory_total_mib, d.mig_capable)
            for d in self._devices
            if not d.lost
        ]

    def read(self) -> BackendReading:
        with self._lock:
            taken_at, monotonic = time.time(), time.monotonic()
            if self._nv is None:
                return BackendReading(taken_at, monotonic, banner="the NVML backend is not open")
            gpus: list[GpuReading] = []
            banner: str | None = None
            for dev in self._devices:
                if banner is None:
                    try:
                        gpus.append(self._read_device(dev))
                        continue
                    except _LibraryDown as down:
                        banner = str(down)
                gpus.append(dev.identity())
            return BackendReading(taken_at, monotonic, tuple(gpus), banner)

    def set_load(self, loads: Sequence[JobLoad]) -> None:
        pass

    def close(self) -> None:
        with self._lock:
            nv, self._nv = self._nv, None
            if nv is None:
                return
            for dev in self._devices:
                for sample in dev.gpm.samples if dev.gpm else ():
                    with suppress(Exception):
                        nv.nvmlGpmSampleFree(sample)
                dev.gpm = None
                if dev.xid is not None:
                    dev.xid.close(nv)
                    dev.xid = None
            with suppress(Exception):
                nv.nvmlShutdown()

    # -- the error policy -------------------------------------------------------------------

    def _bind(self, nv: Any) -> None:
        self._nv = nv
        # The binding's unversioned calls (nvmlDeviceGetComputeRunningProcesses) turn
        # FunctionNotFound into NVMLLibraryMismatchError, which is not an NVMLError.
        mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
        self._unsupported = (
            nv.NVMLError_NotSupported,
            nv.NVMLError_FunctionNotFound,
            nv.NVMLError_NoPermission,
            *([mismatch] if mismatch else []),
        )
        self._lost = (nv.NVMLError_GpuIsLost,)
        self._library_down = (
            nv.NVMLError_Uninitialized,
            nv.NVMLError_LibRmVersionMismatch,
            nv.NVMLError_DriverNotLoaded,
        )
        self._memory_v2_missing = (
            nv.NVMLError_FunctionNotFound,
            nv.NVMLError_NotSupported,
            nv.NVMLError_ArgumentVersionMismatch,
        )
        self._memory_v2 = getattr(nv, "nvmlMemory_v2", None)

    def _query(self, dev: _Device, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) under the error policy: its value, or None when it failed or the metric is
        unavailable on this device."""
        if metric in dev.unavailable:
            return None
        try:
            return fn(*args)
        except self._lost:
            raise _DeviceLost from None
        except self._library_down as exc:
            if isinstance(exc, self._nv.NVMLError_LibRmVersionMismatch):
                raise _LibraryDown(DRIVER_MISMATCH) from None
            raise _LibraryDown(
                f"NVML stopped answering ({exc}): GPU readings resume once the engine restarts"
            ) from None
        except self._unsupported as exc:
            dev.unavailable.add(metric)
            log.info("%s: %s is not available (%s); not asked again", dev.label, metric, exc)
        except Exception as exc:
            self._warn_once(dev, metric, exc)
        return None

    def _warn_once(self, dev: _Device, metric: str, exc: Exception) -> None:
        key = (metric, type(exc).__name__)
        if key in dev.warned:
            return
        dev.warned.add(key)
        from_nvml = isinstance(exc, self._nv.NVMLError)
        log.warning(
            "%s: could not read %s (%s: %s)",
            dev.label,
            metric,
            type(exc).__name__,
            exc,
            exc_info=not from_nvml,
        )

    # -- opening ----------------------------------------------------------------------------

    def _open_device(self, index: int) -> _Device:
        nv = self._nv
        dev = _Device(index, f"GPU {index}")
        try:
            dev.handle = self._query(dev, "handle", nv.nvmlDeviceGetHandleByIndex, index)
            if dev.handle is None:
                raise _DeviceLost
            dev.name = self._query(dev, "name", nv.nvmlDeviceGetName, dev.handle)
            dev.uuid = self._query(dev, "uuid", nv.nvmlDeviceGetUUID, dev.handle)
            memory = self._query(dev, "memory", self._memory_info, dev)
            dev.memory_total_mib = _mib(memory.total) if memory is not None else None
            mig_mode = self._query(dev, "mig", nv.nvmlDeviceGetMigMode, dev.handle)
            dev.mig_capable = mig_mode is not None
            # XIDs reach only a set registered before they happen: registered now, drained
            # at each read (a MIG device's own handle is never registered: NVML reports its
            # instances' XIDs through the parent GPU's)
            dev.xid = self._query(dev, "xid", XidWatch.open, nv, dev.handle)
        except _DeviceLost:
            self._mark_lost(dev)
        return dev

    def _mark_lost(self, dev: _Device) -> None:
        dev.lost = True
        log.warning(
            "%s (%s) is lost: it stopped answering NVML and is not read again until "
            "the engine restarts (a GPU reset or reboot brings it back)",
            dev.label,
            dev.uuid or "no UUID",
        )

    # -- reading ----------------------------------------------------------------------------

    def _read_device(self, dev: _Device) -> GpuReading:
        return msgspec.structs.replace(self._read_reading(dev), **dev.xid_fields())

    def _read_reading(self, dev: _Device) -> GpuReading:
        if dev.lost:
            return dev.identity()
        try:
            self._drain_xids(dev)
            return self._read_metrics(dev)
        except _DeviceLost:
            if dev.xid is not None:  # an XID that came with the loss (79), where NVML gives it
                with suppress(Exception):
                    dev.xid.drain(self._nv)
            self._mark_lost(dev)
            return dev.identity()
        except _LibraryDown:
            raise
        except Exception as exc:  # a module answering with something unexpected
            self._warn_once(dev, "reading", exc)
            return dev.identity()

    def _read_metrics(self, dev: _Device) -> GpuReading:
        nv, handle = self._nv, dev.handle
        if dev.name is None:
            dev.name = self._query(dev, "name", nv.nvmlDeviceGetName, handle)
        if dev.uuid is None:
            dev.uuid = self._query(dev, "uuid", nv.nvmlDeviceGetUUID, handle)
        memory = self._query(dev, "memory", self._memory_info, dev)
        utilization = self._query(dev, "kernel_active", nv.nvmlDeviceGetUtilizationRates, handle)
        gpm = self._gpm_activity(dev)
        power_mw = self._query(dev, "power", nv.nvmlDeviceGetPowerUsage, handle)
        energy_mj = self._query(
            dev, "energy_counter", nv.nvmlDeviceGetTotalEnergyConsumption, handle
        )
        temperature = self._query(
            dev, "temperature", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU
        )
        sm_clock = self._query(dev, "clocks", nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
        memory_clock = self._query(
            dev, "clocks", nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM
        )
        limit_mw = self._query(dev, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        mig_enabled, mig_pending, mig_devices = self._mig(dev)
        processes = self._processes(dev, mig_devices)
        health = read_health(nv, handle, lambda metric, fn, *a: self._query(dev, metric, fn, *a))
        return GpuReading(
            dev.index,
            dev.uuid,
            dev.name,
            memory_used_mib=_mib(memory.used) if memory is not None else None,
            memory_total_mib=_mib(memory.total) if memory is not None else None,
            memory_free_mib=_mib(memory.free) if memory is not None else None,
            kernel_active_pct=float(utilization.gpu) if utilization is not None else None,
            sm_activity_pct=gpm.get("sm_activity"),
            graphics_active_pct=gpm.get("graphics_activity"),
            tensor_active_pct=gpm.get("tensor_activity"),
            power_w=_scaled(power_mw, 1000),
            energy_counter_j=_scaled(energy_mj, 1000),
            temperature_c=_scaled(temperature),
            sm_clock_mhz=_scaled(sm_clock),
            memory_clock_mhz=_scaled(memory_clock),
            power_limit_w=_scaled(limit_mw, 1000),
            mig_enabled=mig_enabled,
            mig_pending=mig_pending,
            mig_devices=mig_devices,
            processes=processes,
            unavailable=tuple(m for m in METRICS if m in dev.unavailable),
            health=health,
        )

    def _drain_xids(self, dev: _Device) -> None:
        """The XIDs waiting on the GPU's event set, taken without waiting; a set that could
        not be registered when the backend opened (not NotSupported: that is for good) is
        registered again."""
        if dev.xid is None:
            dev.xid = self._query(dev, "xid", XidWatch.open, self._nv, dev.handle)
        elif "xid" not in dev.unavailable:
            self._query(dev, "xid", dev.xid.drain, self._nv)

    def _memory_info(self, dev: _Device) -> Any:
        """nvmlDeviceGetMemoryInfo, v2 where the driver has it: v1's `used` includes the memory
        the driver reserves, v2 reports that apart."""
        nv = self._nv
        if not dev.memory_v1 and self._memory_v2 is not None:
            try:
                return nv.nvmlDeviceGetMemoryInfo(dev.handle, version=self._memory_v2)
            except self._memory_v2_missing:
                dev.memory_v1 = True
        return nv.nvmlDeviceGetMemoryInfo(dev.handle)

    def _gpm_activity(self, dev: _Device) -> dict[str, float]:
        """GPM's activity metrics (`GPM_METRICS`: SM, graphics engine, tensor), in %, between
        the previous read's sample and this one's; a metric the GPU does not give is left out
        (and not asked again)."""
        nv = self._nv
        if dev.gpm is None:
            dev.gpm = self._query(dev, "sm_activity", self._start_gpm, dev)
            if dev.gpm is None:
                if "sm_activity" in dev.unavailable:  # no GPM: none of its metrics
                    dev.unavailable.update(name for name, _ in GPM_METRICS)
                return {}
        gpm = dev.gpm
        sample, previous = gpm.samples[gpm.current], gpm.samples[1 - gpm.current]
        if self._query(dev, "sm_activity", nv.nvmlGpmSampleGet, dev.handle, sample) is None:
            gpm.primed = False
            return {}
        gpm.current = 1 - gpm.current
        if not gpm.primed:
            gpm.primed = True
            return {}
        wanted = [(m, c) for m, c in GPM_METRICS if m not in dev.unavailable]
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = previous
        request.sample2 = sample
        for slot, (_, constant) in enumerate(wanted):
            request.metrics[slot].metricId = getattr(nv, constant)
        result = self._query(dev, "sm_activity", nv.nvmlGpmMetricsGet, request)
        if result is None:
            return {}
        values = {}
        for slot, (name, _) in enumerate(wanted):
            metric = result.metrics[slot]
            if metric.nvmlReturn == nv.NVML_SUCCESS:
                values[name] = float(metric.value)
            elif metric.nvmlReturn == nv.NVML_ERROR_NOT_SUPPORTED:
                dev.unavailable.add(name)
                log.info("%s: %s is not available (GPM: Not Supported)", dev.label, name)
            else:
                self._warn_once(dev, name, nv.NVMLError(metric.nvmlReturn))
        return values

    def _start_gpm(self, dev: _Device) -> _Gpm:
        nv = self._nv
        if not nv.nvmlGpmQueryDeviceSupport(dev.handle).isSupportedDevice:
            # GPM needs Hopper or newer; an older GPU answers "not a supported device".
            raise nv.NVMLError_NotSupported()
        first = nv.nvmlGpmSampleAlloc()
        try:
            second = nv.nvmlGpmSampleAlloc()
        except BaseException:
            with suppress(Exception):
                nv.nvmlGpmSampleFree(first)
            raise
        return _Gpm((first, second))

    def _mig(self, dev: _Device) -> tuple[bool | None, bool | None, tuple[MigDevice, ...]]:
        """Its MIG mode now and after the next reset, and its MIG devices."""
        nv = self._nv
        mode = self._query(dev, "mig", nv.nvmlDeviceGetMigMode, dev.handle)
        if mode is None:
            return None, None, ()
        pending = mode[1] == nv.NVML_DEVICE_MIG_ENABLE
        if mode[0] != nv.NVML_DEVICE_MIG_ENABLE:
            return False, pending, ()
        slots = self._query(dev, "mig", nv.nvmlDeviceGetMaxMigDeviceCount, dev.handle) or 0
        devices = []
        for slot in range(slots):
            handle = self._query(dev, "mig", self._mig_handle, dev.handle, slot)
            if handle is not None:
                devices.append(self._read_mig(dev, slot, handle))
        return True, pending, tuple(devices)

    def _mig_handle(self, parent: Any, slot: int) -> Any:
        try:
            return self._nv.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
        except self._nv.NVMLError_NotFound:
            return None  # an empty slot

    def _read_mig(self, dev: _Device, slot: int, handle: Any) -> MigDevice:
        nv = self._nv
        # A slot's own state, so what one MIG device lacks does not mark the whole GPU; a
        # GpuIsLost here still marks the parent lost.
        sub = dev.migs.setdefault(slot, _Device(slot, f"{dev.label} MIG {slot}"))
        sub.handle = handle
        memory = self._query(sub, "memory", self._memory_info, sub)
        attributes = self._query(sub, "sm_count", nv.nvmlDeviceGetAttributes, handle)
        listed = self._query(sub, "processes", nv.nvmlDeviceGetComputeRunningProcesses, handle)
        return MigDevice(
            index=slot,
            uuid=self._query(sub, "uuid", nv.nvmlDeviceGetUUID, handle),
            name=self._query(sub, "name", nv.nvmlDeviceGetName, handle),
            gpu_instance_id=self._query(
                sub, "gpu_instance_id", nv.nvmlDeviceGetGpuInstanceId, handle
            ),
            compute_instance_id=self._query(
                sub, "compute_instance_id", nv.nvmlDeviceGetComputeInstanceId, handle
            ),
            memory_used_mib=_mib(memory.used) if memory is not None else None,
            memory_total_mib=_mib(memory.total) if memory is not None else None,
            sm_count=int(attributes.multiprocessorCount) if attributes is not None else None,
            processes=tuple(
                GpuProcess(p.pid, _mib(p.usedGpuMemory), mig_device=slot) for p in listed or ()
            ),
            memory_free_mib=_mib(memory.free) if memory is not None else None,
        )

    def _processes(self, dev: _Device, migs: tuple[MigDevice, ...]) -> tuple[GpuProcess, ...]:
        nv = self._nv
        listed = self._query(dev, "processes", nv.nvmlDeviceGetComputeRunningProcesses, dev.handle)
        memory: dict[int, float | None] = {}
        for info in listed or ():
            memory.setdefault(info.pid, _mib(info.usedGpuMemory))
        # With MIG on, the parent lists every instance's processes (privileged) or only some;
        # the MIG devices' own lists say where each one runs.
        on_mig: dict[int, int] = {}
        for mig in migs:
            for process in mig.processes:
                memory.setdefault(process.pid, process.used_memory_mib)
                on_mig.setdefault(process.pid, mig.index)
        if not memory:
            dev.mps_servers.clear()
            return ()
        sm = self._process_sm(dev)
        mps = self._mps_roles(dev, list(memory))
        return tuple(
            GpuProcess(pid, used, sm.get(pid), on_mig.get(pid), mps.get(pid))
            for pid, used in memory.items()
        )

    def _mps_roles(self, dev: _Device, pids: list[int]) -> dict[int, str]:
        """pid -> MPS_SERVER or MPS_CLIENT for the listed processes that are either. The
        clients are what NVML lists as MPS compute processes. The server is recognised by the
        name NVML gives it: that holds for a server gpudesk did not start, for `gpudesk top`
        without an engine, and for root and personal engines alike (NVML reads the name of any
        user's process), where the engine's MPS control daemon knows only its own servers."""
        nv = self._nv
        clients: set[int] = set()
        listing = getattr(nv, "nvmlDeviceGetMPSComputeRunningProcesses", None)
        if listing is not None:
            listed = self._query(dev, "mps_processes", listing, dev.handle)
            clients = {info.pid for info in listed or ()}
        known, dev.mps_servers = dev.mps_servers, {}
        for pid in pids:
            if pid in clients:
                continue
            if pid not in known:
                name = self._query(dev, "process_name", self._process_name, pid)
                if name is None:
                    continue  # asked again at the next read
                known[pid] = name.rsplit("/", 1)[-1] == MPS_SERVER_NAME
            dev.mps_servers[pid] = known[pid]
        roles = {pid: MPS_CLIENT for pid in clients if pid in pids}
        roles.update({pid: MPS_SERVER for pid, server in dev.mps_servers.items() if server})
        return roles

    def _process_name(self, pid: int) -> str | None:
        nv = self._nv
        try:
            name = nv.nvmlSystemGetProcessName(pid)
        except nv.NVMLError_NotFound:
            return None  # it ended since the list was taken
        return name.decode() if isinstance(name, bytes) else str(name)

    def _process_sm(self, dev: _Device) -> dict[int, float]:
        """Each process's SM share from the samples NVML took since the last read."""
        samples = self._query(dev, "process_utilization", self._utilization_samples, dev)
        newest: dict[int, Any] = {}
        for sample in samples or ():
            if sample.pid not in newest or sample.timeStamp > newest[sample.pid].timeStamp:
                newest[sample.pid] = sample
            dev.utilization_since_us = max(dev.utilization_since_us, int(sample.timeStamp))
        return {pid: float(sample.smUtil) for pid, sample in newest.items()}

    def _utilization_samples(self, dev: _Device) -> list[Any]:
        nv = self._nv
        try:
            return list(nv.nvmlDeviceGetProcessUtilization(dev.handle, dev.utilization_since_us))
        except nv.NVMLError as exc:
            # NotFound: no sample since that time. The binding raises a bare NVMLError(SUCCESS)
            # when its sizing call finds nothing, which means the same.
            if isinstance(exc, nv.NVMLError_NotFound) or exc.value == nv.NVML_SUCCESS:
                return []
            raise
