"""A fake `pynvml` for tests, built on the real nvidia-ml-py module.

`FakeNvml(gpus)` is an object whose attributes are the pynvml functions gpudesk uses, the real
module's constants, ctypes structures and error classes. Its functions raise the real errors
(`pynvml.NVMLError(code)`, which yields the subclass, exactly as the binding does) and return what
the binding returns: ctypes structures for memory, utilization, GPM and attributes; str for names
and UUIDs; plain ints for power, energy, clocks and temperature; a list of friendly objects (with
`usedGpuMemory` None where NVML cannot tell) for running processes; a list of ctypes samples for
process utilization. Device handles and GPM samples are real ctypes pointers.

Each `FakeGpu` is a scenario: its readings, the functions it does not support (they raise
NotSupported), per-function errors (always, or one outcome per call), and `lost`. The fake clock is
manual (`advance`) or the wall clock; the energy counter grows at `power_w` with it. `calls` and
`device_calls` count every call, per function and per (function, GPU index).

Function names for `unsupported`, `errors` and the counters are pynvml's; the versioned memory
call (`nvmlDeviceGetMemoryInfo(h, version=...)`) counts as "nvmlDeviceGetMemoryInfo_v2".

What the real driver answers, as seen on an H200, driver 580.159.04, nvidia-ml-py 13.610.43, MIG
disabled, 2026-11-29 (bench/results/h200-2026-11-29/run2: raw_probe.json, section `nvml`, and
hardware_truth.json, `checks.mps_engine.meter_windows`):

- MPS. A GPU with an MPS server (a `FakeProcess` with `mps="server"`, its clients `mps="client"`):
  nvmlDeviceGetComputeRunningProcesses lists the server (about 66 MiB of its own) and every
  client; nvmlDeviceGetMPSComputeRunningProcesses lists only the clients (nvidia-smi's "M+C");
  nvmlDeviceGetProcessUtilization has samples for the server's pid only, never for a client, its
  smUtil the whole GPU's (the clients' together, at most 100). A process outside MPS on the same
  GPU keeps samples of its own. The server stays listed after its clients end, until the control
  daemon stops it. nvmlSystemGetProcessName answers the process's command as started
  ("/opt/torch/.venv/bin/python3" for a client), "nvidia-cuda-mps-server" for the server, and
  NotFound for a pid that does not exist (bench/results/h200-2026-11-29/nvml_mps_names.json).
- A full GPU (not a MIG device): nvmlDeviceGetAttributes raises NotSupported (NVML's reference:
  "currently only supports MIG device handles");
  nvmlDeviceGetGpuInstanceId / nvmlDeviceGetComputeInstanceId raise InvalidArgument; with MIG
  disabled nvmlDeviceGetMaxMigDeviceCount answers 0 and nvmlDeviceGetMigDeviceHandleByIndex(0)
  raises NotFound; a process's gpuInstanceId / computeInstanceId are 4294967295.
- nvmlDeviceGetGraphicsRunningProcesses answers [] on a compute GPU; nvmlDeviceGetComputeMode 0
  (default), nvmlDeviceGetPersistenceMode 1; nvmlSystemGetDriverVersion "580.159.04",
  nvmlSystemGetNVMLVersion "13.580.159.04", nvmlSystemGetCudaDriverVersion(_v2) 13000.
- GPM metrics come back with each metric's `metricInfo` (shortName "smutil", longName "SM_UTIL",
  unit "%") filled in.

Assumption: nvmlSystemGetProcessName of a process that runs but is on no GPU raises NotFound
(seen for a pid that does not exist).

Assumption (not recorded on the H200): the health calls, nvmlDeviceGetTotalEccErrors,
nvmlDeviceGetRemappedRows and nvmlDeviceGetRetiredPages, answer as the binding's code returns
(an int; a (correctable, uncorrectable, pending, failure) tuple; a list of page addresses), by
default with nothing counted; a GPU without one (ECC off; page retirement on a GPU that remaps
rows instead, which nvidia-smi -q shows as N/A) lists it in `unsupported`.

XID events, as NVML's reference describes them (not recorded on the H200): nvmlEventSetCreate
makes a set; nvmlDeviceRegisterEvents(handle, types, set) registers a GPU's events on it, raising
NotSupported for a type the GPU does not give (`FakeGpu.event_types`, 0 on a GPU without events,
as some vGPUs) and for a MIG device's handle (NVML: per-instance events are reported through the
parent GPU, "not ... using MIG device handles"); an XID reaches only the sets registered for it
before it happened (`FakeNvml.inject_xid`). nvmlEventSetWait_v2(set, timeoutms) returns the
oldest waiting event as the binding does (a c_nvmlEventData_t: `device`, `eventType`,
`eventData` the XID number, `gpuInstanceId`, `computeInstanceId`), or sleeps `timeoutms` of real
time and raises Timeout when none waits: a caller that waits is seen waiting. An event with no
MIG instance to name has both instance ids NVML_VALUE_NOT_AVAILABLE_uint (an assumption).
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any, NamedTuple

_SHIM_DIR = Path(__file__).resolve().parent / "nvml_shim"
_REAL_NAME = "_gpudesk_real_pynvml"


def _real_pynvml_path() -> Path:
    try:
        located = Path(str(metadata.distribution("nvidia-ml-py").locate_file("pynvml.py")))
        if located.is_file():
            return located
    except metadata.PackageNotFoundError:
        pass
    for entry in sys.path:
        candidate = Path(entry or ".").resolve() / "pynvml.py"
        if candidate.is_file() and candidate.parent != _SHIM_DIR:
            return candidate
    raise ImportError("nvidia-ml-py (pynvml.py) is not installed")


def load_real_pynvml() -> ModuleType:
    """The real nvidia-ml-py module, even when the shim in nvml_shim/ answers `import pynvml`."""
    if _REAL_NAME in sys.modules:
        return sys.modules[_REAL_NAME]
    spec = importlib.util.find_spec("pynvml")
    if spec is not None and spec.origin and Path(spec.origin).resolve().parent != _SHIM_DIR:
        import pynvml

        return pynvml
    spec = importlib.util.spec_from_file_location(_REAL_NAME, _real_pynvml_path())
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # The binding builds its error classes through sys.modules[__name__].
    sys.modules[_REAL_NAME] = module
    spec.loader.exec_module(module)
    return module


real = load_real_pynvml()

MIB = 1024 * 1024
# What the H200's driver answered (see the module's docstring).
DRIVER_VERSION = "580.159.04"
NVML_VERSION = "13.580.159.04"
CUDA_DRIVER_VERSION = 13000
# GPM metric -> the metricInfo (shortName, longName, unit) the driver fills in
# (recorded on the H200 for SM_UTIL and DRAM_BW_UTIL; GRAPHICS_UTIL's and ANY_TENSOR_UTIL's
# were not recorded, so the fake leaves their metricInfo empty rather than guess it: gpudesk
# reads only metricId, nvmlReturn and value)
GPM_METRIC_INFO = {
    real.NVML_GPM_METRIC_SM_UTIL: (b"smutil", b"SM_UTIL", b"%"),
    real.NVML_GPM_METRIC_DRAM_BW_UTIL: (b"dram", b"DRAM_BW_UTIL", b"%"),
}
_ERROR_CODES = {
    cls.__name__.removeprefix("NVMLError_"): code
    for code, cls in real.NVMLError._valClassMapping.items()
}

ErrorSpec = str | BaseException  # "NotSupported" names pynvml.NVMLError_NotSupported


def nvml_error(spec: ErrorSpec) -> BaseException:
    """The exception for an error name ("GpuIsLost", "NVMLError_GpuIsLost"), raised the way the
    binding raises it; an exception instance is returned as it is."""
    if isinstance(spec, BaseException):
        return spec
    name = spec.removeprefix("NVMLError_")
    if name not in _ERROR_CODES:
        raise ValueError(f"unknown NVML error {spec!r}; known: {', '.join(sorted(_ERROR_CODES))}")
    return real.NVMLError(_ERROR_CODES[name])


MPS_ROLES = (None, "client", "server")


@dataclass
class FakeProcess:
    pid: int
    used_memory_mib: float | None = 0.0  # None: NVML cannot tell (usedGpuMemory None)
    # what nvmlSystemGetProcessName answers: the command as it was started
    name: str = "/usr/bin/python3"
    mps: str | None = None  # "client", "server" (nvidia-cuda-mps-server), None: outside MPS
    # A steady load: every nvmlDeviceGetProcessUtilization call finds a fresh sample of it with
    # this smUtil (None: only the samples added to the GPU's process_samples)
    sm_util: int | None = None

    def __post_init__(self) -> None:
        if self.mps not in MPS_ROLES:
            raise ValueError(f"FakeProcess.mps is client, server or None, found {self.mps!r}")


@dataclass
class FakeSample:
    """One nvmlDeviceGetProcessUtilization sample."""

    pid: int
    timestamp_us: int
    sm_util: int
    mem_util: int = 0


@dataclass
class FakeMig:
    uuid: str
    name: str = "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    gpu_instance_id: int = 1
    compute_instance_id: int = 0
    memory_total_mib: float = 19968.0
    memory_used_mib: float = 0.0
    sm_count: int = 42
    processes: list[FakeProcess] = field(default_factory=list)


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""  # "" : FakeNvml gives it one from its index
    memory_total_mib: float = 81559.0
    memory_used_mib: float = 0.0
    memory_reserved_mib: float = 0.0  # in v1's `used`; apart in v2
    utilization_gpu: int = 0
    utilization_memory: int = 0
    sm_util_pct: float = 0.0  # what GPM reports: the value when the later sample was taken
    dram_bw_util_pct: float = 0.0  # GPM's DRAM bandwidth use, as sm_util_pct
    graphics_util_pct: float = 0.0  # GPM's GRAPHICS_UTIL (any compute/graphics work active)
    tensor_util_pct: float = 0.0  # GPM's ANY_TENSOR_UTIL (SMs busy with tensor instructions)
    # GPM metrics this GPU answers NotSupported for, in nvmlGpmMetricsGet's per-metric
    # nvmlReturn (pynvml's constant names: "NVML_GPM_METRIC_ANY_TENSOR_UTIL")
    gpm_unsupported: set[str] = field(default_factory=set)
    ecc_corrected: int = 0  # volatile ECC counts (nvmlDeviceGetTotalEccErrors)
    ecc_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # corr, unc, pending, failure
    retired_sbe: list[int] = field(default_factory=list)  # retired page addresses, by cause
    retired_dbe: list[int] = field(default_factory=list)
    gpm_supported: bool = True  # isSupportedDevice (Hopper and newer)
    # the event types the GPU gives (nvmlDeviceGetSupportedEventTypes); 0: no events (a vGPU)
    event_types: int = (
        real.nvmlEventTypeSingleBitEccError
        | real.nvmlEventTypeDoubleBitEccError
        | real.nvmlEventTypePState
        | real.nvmlEventTypeXidCriticalError
        | real.nvmlEventTypeClock
    )
    power_w: float = 70.0
    power_limit_w: float = 700.0
    energy_mj: float = 0.0  # the counter; grows at power_w with the fake clock
    energy_step_mj: float = 0.0  # added on every energy read as well
    temperature_c: int = 35
    sm_clock_mhz: int = 1980
    memory_clock_mhz: int = 2619
    serial: str = "1653724027175"
    compute_mode: int = 0  # NVML_COMPUTEMODE_DEFAULT
    persistence_mode: int = 1
    mig_enabled: bool | None = False  # None: the GPU cannot do MIG (GetMigMode: NotSupported)
    # the mode after the next GPU reset (`nvidia-smi -mig 1` sets it; None: as `mig_enabled`)
    mig_pending: bool | None = None
    mig_devices: list[FakeMig | None] = field(default_factory=list)  # None: an empty slot
    processes: list[FakeProcess] = field(default_factory=list)
    process_samples: list[FakeSample] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)  # functions raising NotSupported
    # function -> an error raised on every call, or one outcome per call (None: answer), after
    # which the function answers
    errors: dict[str, ErrorSpec | list[ErrorSpec | None]] = field(default_factory=dict)
    lost: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FakeGpu:
        values = _checked(cls, data)
        values["processes"] = [FakeProcess(**p) for p in values.get("processes", [])]
        values["process_samples"] = [FakeSample(**s) for s in values.get("process_samples", [])]
        values["mig_devices"] = [
            None
            if m is None
            else FakeMig(
                **{
                    **_checked(FakeMig, m),
                    "processes": [FakeProcess(**p) for p in m.get("processes", [])],
                }
            )
            for m in values.get("mig_devices", [])
        ]
        values["unsupported"] = set(values.get("unsupported", ()))
        values["gpm_unsupported"] = set(values.get("gpm_unsupported", ()))
        values["errors"] = dict(values.get("errors", {}))
        return cls(**values)


def _checked(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {sorted(unknown)}")
    return dict(data)


def _mps_folded(gpu: FakeGpu, samples: list[FakeSample]) -> list[FakeSample]:
    """The process-utilization samples NVML gives for `gpu`: under MPS the clients' samples
    become the server's (their SM and memory use summed, at most 100 each), at the times they
    were taken; a process outside MPS keeps its own."""
    server = next((p.pid for p in gpu.processes if p.mps == "server"), None)
    if server is None:
        return samples
    clients = {p.pid for p in gpu.processes if p.mps == "client"}
    own = [s for s in samples if s.pid not in clients]
    folded: dict[int, FakeSample] = {}
    for sample in samples:
        if sample.pid in clients:
            at = sample.timestamp_us
            into = folded.setdefault(at, FakeSample(server, at, 0))
            into.sm_util = min(100, into.sm_util + sample.sm_util)
            into.mem_util = min(100, into.mem_util + sample.mem_util)
    return sorted([*own, *folded.values()], key=lambda s: s.timestamp_us)


class _Target(NamedTuple):
    index: int
    gpu: FakeGpu
    mig: FakeMig | None


@dataclass
class _GpmSample:
    gpu: int | None = None  # None until nvmlGpmSampleGet fills it
    sm_util: float = 0.0
    dram_bw_util: float = 0.0
    graphics_util: float = 0.0
    tensor_util: float = 0.0
    unsupported: frozenset[int] = frozenset()  # metric ids the GPU does not give


@dataclass
class _EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # GPU index -> event types
    waiting: deque[Any] = field(default_factory=deque)  # c_nvmlEventData_t, oldest first


def _address(pointer: Any) -> int | None:
    return ctypes.cast(pointer, ctypes.c_void_p).value


class FakeNvml:
    """The fake module: pass it as `NvmlBackend(module=fake)`."""

    def __init__(
        self,
        gpus: list[FakeGpu] | tuple[FakeGpu, ...] = (),
        *,
        init_error: ErrorSpec | None = None,
        clock: str = "manual",
        start: float = 1000.0,
    ) -> None:
        if clock not in ("manual", "wall"):
            raise ValueError(f"clock is manual or wall, found {clock!r}")
        self.gpus = list(gpus)
        for index, gpu in enumerate(self.gpus):
            gpu.uuid = gpu.uuid or f"GPU-00000000-0000-0000-0000-{index:012d}"
        self.init_error = init_error
        self.library_error: ErrorSpec | None = None  # every call raises it (driver trouble)
        self.initialized = 0  # nvmlInit's reference count
        self.calls: Counter[str] = Counter()
        self.device_calls: Counter[tuple[str, int]] = Counter()
        self.last_args: dict[str, tuple[Any, ...]] = {}
        self.gpm_allocated = 0
        self.gpm_freed = 0
        self._clock = clock
        self._manual = start
        self._wall_offset = start - time.monotonic()
        self._energy_at = {index: self.now() for index in range(len(self.gpus))}
        self._buffers: list[Any] = []  # keeps the memory behind fake pointers alive
        self._handles: dict[tuple[int, int | None], Any] = {}
        self._handle_targets: dict[int, tuple[int, int | None]] = {}
        self._gpm: dict[int, _GpmSample] = {}
        self._event_sets: dict[int | None, _EventSet] = {}
        self.event_sets_freed = 0

    @classmethod
    def from_scenario(cls, data: Mapping[str, Any], *, clock: str = "manual") -> FakeNvml:
        unknown = set(data) - {"gpus", "init_error", "clock"}
        if unknown:
            raise ValueError(f"scenario: unknown keys {sorted(unknown)}")
        return cls(
            [FakeGpu.from_dict(g) for g in data.get("gpus", [])],
            init_error=data.get("init_error"),
            clock=data.get("clock", clock),
        )

    # -- driving the scenario ---------------------------------------------------------------

    def now(self) -> float:
        if self._clock == "wall":
            return time.monotonic() + self._wall_offset
        return self._manual

    def advance(self, seconds: float) -> None:
        if self._clock != "manual":
            raise RuntimeError("advance() drives the manual clock only")
        self._manual += seconds

    def lose(self, index: int) -> None:
        """GPU `index` falls off the bus: every call on it raises GpuIsLost from now on."""
        self.gpus[index].lost = True

    def add_sample(self, index: int, pid: int, sm_util: int, mem_util: int = 0) -> FakeSample:
        """A process-utilization sample on GPU `index`, stamped with the fake clock."""
        sample = FakeSample(pid, int(self.now() * 1e6), sm_util, mem_util)
        self.gpus[index].process_samples.append(sample)
        return sample

    def inject_xid(
        self,
        index: int,
        xid: int,
        gpu_instance_id: int | None = None,
        compute_instance_id: int | None = None,
    ) -> int:
        """XID `xid` happens on GPU `index` now: every event set registered for its XIDs gets
        the event (how many did). A set registered later never sees it, as with NVML."""
        not_available = real.NVML_VALUE_NOT_AVAILABLE_uint.value
        delivered = 0
        for event_set in self._event_sets.values():
            if event_set.registered.get(index, 0) & real.nvmlEventTypeXidCriticalError:
                data = real.c_nvmlEventData_t()
                data.device = self._handle(index)
                data.eventType = real.nvmlEventTypeXidCriticalError
                data.eventData = xid
                data.gpuInstanceId = not_available if gpu_instance_id is None else gpu_instance_id
                data.computeInstanceId = (
                    not_available if compute_instance_id is None else compute_instance_id
                )
                event_set.waiting.append(data)
                delivered += 1
        return delivered

    def count(self, function: str, gpu: int | None = None) -> int:
        return self.calls[function] if gpu is None else self.device_calls[(function, gpu)]

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the fake pynvml has no {name}; add it to {__file__}")

    # -- plumbing ---------------------------------------------------------------------------

    def _enter(
        self,
        function: str,
        handle: Any = None,
        *,
        index: int | None = None,
        args: tuple[Any, ...] = (),
    ) -> _Target:
        """Count the call and raise what the scenario says; the device it is about."""
        self.calls[function] += 1
        self.last_args[function] = args
        if not self.initialized:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)
        if self.library_error is not None:
            raise nvml_error(self.library_error)
        mig_slot = None
        if handle is not None:
            address = _address(handle)
            if address not in self._handle_targets:
                raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
            index, mig_slot = self._handle_targets[address]
        if index is None:
            return _Target(-1, FakeGpu(), None)
        if not 0 <= index < len(self.gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        self.device_calls[(function, index)] += 1
        gpu = self.gpus[index]
        if gpu.lost:
            raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
        if mig_slot is not None:
            mig = gpu.mig_devices[mig_slot] if mig_slot < len(gpu.mig_devices) else None
            if mig is None or not gpu.mig_enabled:
                raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
            return _Target(index, gpu, mig)
        outcome = gpu.errors.get(function)
        if isinstance(outcome, list):
            outcome = outcome.pop(0) if outcome else None
        if outcome is not None:
            raise nvml_error(outcome)
        if function in gpu.unsupported:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return _Target(index, gpu, None)

    def _pointer(self, pointer_type: Any) -> Any:
        buffer = ctypes.create_string_buffer(8)
        self._buffers.append(buffer)
        return ctypes.cast(buffer, pointer_type)

    def _handle(self, index: int, mig_slot: int | None = None) -> Any:
        key = (index, mig_slot)
        if key not in self._handles:
            handle = self._pointer(real.c_nvmlDevice_t)
            self._handles[key] = handle
            self._handle_targets[_address(handle)] = key
        return self._handles[key]

    @staticmethod
    def _bytes(mib: float) -> int:
        return int(mib * MIB)

    # -- the pynvml surface -----------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.initialized += 1

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        if not self.initialized:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex", index=index, args=(index,))
        return self._handle(index)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        target = self._enter("nvmlDeviceGetName", handle)
        return target.mig.name if target.mig else target.gpu.name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        target = self._enter("nvmlDeviceGetUUID", handle)
        return target.mig.uuid if target.mig else target.gpu.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        function = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        gpu, mig = self._enter(function, handle)[1:]
        if mig is not None:
            total, used, reserved = mig.memory_total_mib, mig.memory_used_mib, 0.0
        else:
            total, used, reserved = (
                gpu.memory_total_mib,
                gpu.memory_used_mib,
                gpu.memory_reserved_mib,
            )
        free = self._bytes(total - used - reserved)
        if not version:
            memory = real.c_nvmlMemory_t()
            memory.total, memory.used, memory.free = (
                self._bytes(total),
                self._bytes(used + reserved),
                free,
            )
            return memory
        if version != real.nvmlMemory_v2:
            raise real.NVMLError(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        memory = real.c_nvmlMemory_v2_t()
        memory.version = version
        memory.total, memory.reserved, memory.used, memory.free = (
            self._bytes(total),
            self._bytes(reserved),
            self._bytes(used),
            free,
        )
        return memory

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle).gpu
        utilization = real.c_nvmlUtilization_t()
        utilization.gpu, utilization.memory = gpu.utilization_gpu, gpu.utilization_memory
        return utilization

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return round(self._enter("nvmlDeviceGetPowerUsage", handle).gpu.power_w * 1000)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEccErrors", handle, args=(errorType,)).gpu
        if counterType != real.NVML_VOLATILE_ECC:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)  # the fake keeps volatile only
        if errorType == real.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return gpu.ecc_corrected
        if errorType == real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return gpu.ecc_uncorrected
        raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        gpu = self._enter("nvmlDeviceGetRemappedRows", device).gpu
        return tuple(int(v) for v in gpu.remapped_rows)  # type: ignore[return-value]

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        gpu = self._enter("nvmlDeviceGetRetiredPages", device, args=(sourceFilter,)).gpu
        if sourceFilter == real.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
            return list(gpu.retired_sbe)
        if sourceFilter == real.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            return list(gpu.retired_dbe)
        raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        index, gpu, _ = self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        now = self.now()
        gpu.energy_mj += gpu.power_w * 1000 * (now - self._energy_at[index]) + gpu.energy_step_mj
        self._energy_at[index] = now
        return int(gpu.energy_mj)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._enter("nvmlDeviceGetTemperature", handle, args=(sensor,)).gpu
        if sensor != real.NVML_TEMPERATURE_GPU:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._enter("nvmlDeviceGetClockInfo", handle, args=(type,)).gpu
        if type in (real.NVML_CLOCK_SM, real.NVML_CLOCK_GRAPHICS):
            return gpu.sm_clock_mhz
        if type == real.NVML_CLOCK_MEM:
            return gpu.memory_clock_mhz
        raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return round(
            self._enter("nvmlDeviceGetEnforcedPowerLimit", handle).gpu.power_limit_w * 1000
        )

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._enter("nvmlDeviceGetMigMode", handle).gpu
        if gpu.mig_enabled is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        mode = real.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else real.NVML_DEVICE_MIG_DISABLE
        pending = gpu.mig_enabled if gpu.mig_pending is None else gpu.mig_pending
        return [mode, real.NVML_DEVICE_MIG_ENABLE if pending else real.NVML_DEVICE_MIG_DISABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetMaxMigDeviceCount", handle).gpu
        if gpu.mig_enabled is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return len(gpu.mig_devices) if gpu.mig_enabled else 0  # the H200, MIG disabled: 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        target = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle, args=(index,))
        if not target.gpu.mig_enabled:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)  # the H200, MIG disabled
        if not 0 <= index < len(target.gpu.mig_devices):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        if target.gpu.mig_devices[index] is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return self._handle(target.index, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        mig = self._enter("nvmlDeviceGetGpuInstanceId", handle).mig
        if mig is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        mig = self._enter("nvmlDeviceGetComputeInstanceId", handle).mig
        if mig is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance_id

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        mig = self._enter("nvmlDeviceGetAttributes", handle).mig
        if mig is None:  # a full GPU: NotSupported (the H200, MIG disabled)
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        attributes = real.c_nvmlDeviceAttributes()
        attributes.multiprocessorCount = mig.sm_count
        attributes.memorySizeMB = int(mig.memory_total_mib)
        return attributes

    @real.throwOnVersionMismatch  # as the binding: FunctionNotFound -> NVMLLibraryMismatchError
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        """Every compute process: an MPS server and its clients included."""
        return self._process_list("nvmlDeviceGetComputeRunningProcesses", handle, mps=False)

    def _process_list(self, function: str, handle: Any, *, mps: bool) -> list[Any]:
        _, gpu, mig = self._enter(function, handle)
        if mig is not None:
            listed = [(p, mig) for p in mig.processes]
        else:  # the parent of MIG devices lists every instance's processes
            listed = [(p, None) for p in gpu.processes] + [
                (p, m) for m in gpu.mig_devices if m and gpu.mig_enabled for p in m.processes
            ]
        if mps:
            listed = [(p, on) for p, on in listed if p.mps == "client"]
        not_available = real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        processes = []
        for process, on in listed:
            info = real.c_nvmlProcessInfo_t()
            info.pid = process.pid
            info.usedGpuMemory = (
                not_available
                if process.used_memory_mib is None
                else self._bytes(process.used_memory_mib)
            )
            no_instance = real.NVML_VALUE_NOT_AVAILABLE_uint.value
            info.gpuInstanceId = on.gpu_instance_id if on else no_instance
            info.computeInstanceId = on.compute_instance_id if on else no_instance
            friendly = real.nvmlStructToFriendlyObject(info)
            if friendly.usedGpuMemory == not_available:
                friendly.usedGpuMemory = None
            processes.append(friendly)
        return processes

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[Any]:
        """The MPS clients alone (nvidia-smi's "M+C"), not the server."""
        return self._process_list("nvmlDeviceGetMPSComputeRunningProcesses", handle, mps=True)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        self._enter("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return []  # a compute GPU runs no graphics context

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        """The name of a process a GPU lists; that GPU's `errors` and `unsupported` for this
        function apply to it (NoPermission, say)."""
        listed = [
            (index, process)
            for index, gpu in enumerate(self.gpus)
            for process in [*gpu.processes, *(p for m in gpu.mig_devices if m for p in m.processes)]
            if process.pid == pid
        ]
        index = listed[0][0] if listed else None
        self._enter("nvmlSystemGetProcessName", index=index, args=(pid,))
        if not listed:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return listed[0][1].name

    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        return self._enter("nvmlDeviceGetComputeMode", handle).gpu.compute_mode

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        return self._enter("nvmlDeviceGetPersistenceMode", handle).gpu.persistence_mode

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return self._enter("nvmlDeviceGetSerial", handle).gpu.serial

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return DRIVER_VERSION

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return NVML_VERSION

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return CUDA_DRIVER_VERSION

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return CUDA_DRIVER_VERSION

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        target = self._enter("nvmlDeviceGetProcessUtilization", handle, args=(timeStamp,))
        if target.mig is not None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        now_us = int(self.now() * 1e6)
        steady = [
            FakeSample(p.pid, now_us, p.sm_util)
            for p in target.gpu.processes
            if p.sm_util is not None
        ]
        taken = _mps_folded(target.gpu, [*target.gpu.process_samples, *steady])
        fresh = [s for s in taken if s.timestamp_us > timeStamp]
        if not fresh:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        samples = (real.c_nvmlProcessUtilizationSample_t * len(fresh))()
        for slot, sample in zip(samples, fresh, strict=True):
            slot.pid, slot.timeStamp = sample.pid, sample.timestamp_us
            slot.smUtil, slot.memUtil = sample.sm_util, sample.mem_util
        return samples[0 : len(fresh)]

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        gpu = self._enter("nvmlGpmQueryDeviceSupport", handle).gpu
        support = real.c_nvmlGpmSupport_t()
        support.version = real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu.gpm_supported)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        sample = self._pointer(real.c_nvmlGpmSample_t)
        self._gpm[_address(sample)] = _GpmSample()
        self.gpm_allocated += 1
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        if self._gpm.pop(_address(sample), None) is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        self.gpm_freed += 1

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        target = self._enter("nvmlGpmSampleGet", handle)
        state = self._gpm.get(_address(sample))
        if state is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        state.gpu, state.sm_util = target.index, target.gpu.sm_util_pct
        state.dram_bw_util = target.gpu.dram_bw_util_pct
        state.graphics_util, state.tensor_util = (
            target.gpu.graphics_util_pct,
            target.gpu.tensor_util_pct,
        )
        state.unsupported = frozenset(getattr(real, n) for n in target.gpu.gpm_unsupported)
        return sample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        first = self._gpm.get(_address(metricsGet.sample1))
        second = self._gpm.get(_address(metricsGet.sample2))
        self._enter("nvmlGpmMetricsGet", index=second.gpu if second else None)
        if first is None or second is None or first.gpu is None or first.gpu != second.gpu:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        if metricsGet.version != real.NVML_GPM_METRICS_GET_VERSION:
            raise real.NVMLError(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        values = {
            real.NVML_GPM_METRIC_SM_UTIL: second.sm_util,
            real.NVML_GPM_METRIC_DRAM_BW_UTIL: second.dram_bw_util,
            real.NVML_GPM_METRIC_GRAPHICS_UTIL: second.graphics_util,
            real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: second.tensor_util,
        }
        for slot in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[slot]
            if metric.metricId in values and metric.metricId not in second.unsupported:
                metric.value, metric.nvmlReturn = values[metric.metricId], real.NVML_SUCCESS
                info = metric.metricInfo
                known = GPM_METRIC_INFO.get(metric.metricId)
                if known is not None:
                    info.shortName, info.longName, info.unit = known
            else:
                metric.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return metricsGet

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        target = self._enter("nvmlDeviceGetSupportedEventTypes", handle)
        return 0 if target.mig is not None else target.gpu.event_types

    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate")
        event_set = self._pointer(real.c_nvmlEventSet_t)
        self._event_sets[_address(event_set)] = _EventSet()
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        target = self._enter("nvmlDeviceRegisterEvents", handle, args=(eventTypes,))
        event_set = self._event_sets.get(_address(eventSet))
        if event_set is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        if target.mig is not None or eventTypes & ~target.gpu.event_types:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        registered = event_set.registered.get(target.index, 0)
        event_set.registered[target.index] = registered | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        self._enter("nvmlEventSetWait_v2", args=(timeoutms,))
        event_set = self._event_sets.get(_address(eventSet))
        if event_set is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        if event_set.waiting:
            return event_set.waiting.popleft()
        if any(self.gpus[index].lost for index in event_set.registered):
            raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
        time.sleep(timeoutms / 1000.0)  # NVML sleeps until an event or the timeout
        raise real.NVMLError(real.NVML_ERROR_TIMEOUT)

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._enter("nvmlEventSetFree")
        if self._event_sets.pop(_address(eventSet), None) is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        self.event_sets_freed += 1


def _exported(name: str, value: Any) -> bool:
    return (
        name.startswith(("NVML_", "NVMLError", "c_nvml", "struct_c_nvml"))
        or (name.startswith("nvml") and isinstance(value, int))  # nvmlMemory_v2 and the like
        or name
        in (
            "NVMLLibraryMismatchError",
            "nvmlStructToFriendlyObject",
            "nvmlFriendlyObject",
            "nvmlExceptionClass",
        )
    )


# The real module's constants, structures and error classes, copied rather than retyped.
for _name, _value in vars(real).items():
    if _exported(_name, _value) and _name not in vars(FakeNvml):
        setattr(
            FakeNvml, _name, staticmethod(_value) if isinstance(_value, FunctionType) else _value
        )
del _name, _value
