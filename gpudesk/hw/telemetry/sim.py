"""Simulated stations: GPUs whose load follows the jobs the engine places on them.

A product feature for demos, planning and the simulator, never a stand-in for real readings: every
view labels it SIMULATED. Each job's hints (`memory_gb`, `sm_pct`) become its memory and SM demand
on each GPU it holds; memory fills over the first seconds as a framework would allocate it, SM
activity wobbles a little around the demand, and power follows SM activity between the model's
idle and busy draw. The energy counter integrates that power, like NVML's total-energy counter.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence

import msgspec

from gpudesk.core.gpu_models import STATIONS, mig_memory_mib
from gpudesk.core.mig_profiles import (
    COMPUTE_SLICES,
    compute_slices,
)
from gpudesk.hw.telemetry.model import (
    BackendReading,
    GpuHealth,
    GpuInfo,
    GpuProcess,
    GpuReading,
    JobLoad,
    MigDevice,
)
from gpudesk.units import MIB_PER_GB

DEFAULT_MEMORY_GB = 4.0  # a job that gives no hint
DEFAULT_SM_PCT = 50.0
CONTEXT_MIB = 512.0  # what a CUDA context costs before the job allocates anything
ALLOCATION_S = 3.0  # time for a job's memory to reach its demand
# The share of a simulated GPU's SM activity spent in tensor instructions (what GPM's
# ANY_TENSOR_UTIL reads on a real one): a model's number for a mixed-precision training step,
# SIMULATED like every reading here, never measured.
TENSOR_SHARE = 0.5
# A simulated GPU's memory health: no error ever, rows remapped as Ampere and newer do (no
# retired pages). SIMULATED, like every reading here.
SIM_HEALTH = GpuHealth(0, 0, 0, 0, False)


class _SimGpu(msgspec.Struct):
    index: int
    uuid: str
    energy_j: float = 0.0
    last_power_w: float | None = None
    last_t: float | None = None


class SimBackend:
    simulated = True

    def __init__(
        self,
        station: str,
        *,
        count: int | None = None,
        name: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        mig: dict[int, list[str]] | None = None,
    ) -> None:
        self.model, default_count = STATIONS[station]
        self.count = count or default_count
        self.mig = {i: profiles for i, profiles in (mig or {}).items() if 0 <= i < self.count}
        self.name = name or f"sim:{station}"
        self.clock = clock
        self.gpus = [_SimGpu(i, _sim_uuid(station, i)) for i in range(self.count)]
        self._loads: tuple[JobLoad, ...] = ()
        self._placed_at: dict[int, float] = {}  # job id -> when it first appeared
        self._lock = threading.Lock()  # set_load comes from the engine's thread

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def inventory(self) -> list[GpuInfo]:
        return [
            GpuInfo(
                g.index,
                g.uuid,
                self.model.name,
                self.model.memory_total_mib,
                self.model.mig_capable,
            )
            for g in self.gpus
        ]

    def set_load(self, loads: Sequence[JobLoad]) -> None:
        now = self.clock()
        with self._lock:
            self._loads = tuple(loads)
            current = {load.job_id for load in loads}
            self._placed_at = {job: t for job, t in self._placed_at.items() if job in current}
            for job in current:
                self._placed_at.setdefault(job, now)

    def read(self) -> BackendReading:
        now = self.clock()
        with self._lock:
            loads, placed_at = self._loads, dict(self._placed_at)
        readings = tuple(
            self._read_gpu(gpu, [ld for ld in loads if gpu.index in ld.gpus], placed_at, now)
            for gpu in self.gpus
        )
        readings = tuple(
            self._with_mig(r, [ld for ld in loads if r.index in ld.gpus])
            if r.index in self.mig
            else r
            for r in readings
        )
        return BackendReading(time.time(), now, readings)

    def _read_gpu(
        self, gpu: _SimGpu, loads: list[JobLoad], placed_at: dict[int, float], now: float
    ) -> GpuReading:
        model = self.model
        demands = []
        for load in loads:
            age = now - placed_at.get(load.job_id, now)
            fill = min(1.0, max(0.0, age / ALLOCATION_S))
            memory_gb = load.memory_gb if load.memory_gb is not None else DEFAULT_MEMORY_GB
            memory = CONTEXT_MIB + fill * memory_gb * MIB_PER_GB
            wobble = 1.0 + 0.04 * math.sin(now * 0.9 + load.job_id * 1.7)
            sm = (load.sm_pct if load.sm_pct is not None else DEFAULT_SM_PCT) * wobble * fill
            demands.append((load, memory, sm))
        total_sm = sum(sm for _, _, sm in demands)
        scale = 100.0 / total_sm if total_sm > 100.0 else 1.0  # time-sliced past saturation
        sm_activity = min(100.0, total_sm * scale)
        memory_used = min(model.memory_total_mib, sum((m for _, m, _ in demands), 0.0))
        # Kernel-active time runs ahead of SM activity: a GPU with a kernel on a few SMs counts
        # as 100% "utilized" by NVML.
        idle_share = 1.0
        for _, _, sm in demands:
            idle_share *= 1.0 - min(1.0, 0.25 + 1.2 * sm / 100.0)
        kernel_active = 100.0 * (1.0 - idle_share) if demands else 0.0
        busy = sm_activity / 100.0
        power = model.idle_w + (model.busy_w - model.idle_w) * busy**0.9
        if demands:
            power += 0.03 * (model.busy_w - model.idle_w)  # contexts and memory traffic
        if gpu.last_t is not None and gpu.last_power_w is not None and now > gpu.last_t:
            gpu.energy_j += (gpu.last_power_w + power) / 2.0 * (now - gpu.last_t)
        gpu.last_t, gpu.last_power_w = now, power
        processes = tuple(
            GpuProcess(pid=load.pid, used_memory_mib=round(memory, 1), sm_pct=round(sm * scale, 1))
            for load, memory, sm in demands
        )
        idle_clock, busy_clock = model.sm_clock_mhz
        return GpuReading(
            index=gpu.index,
            uuid=gpu.uuid,
            name=model.name,
            memory_used_mib=round(memory_used, 1),
            memory_total_mib=model.memory_total_mib,
            memory_free_mib=round(model.memory_total_mib - memory_used, 1),
            kernel_active_pct=round(kernel_active, 1),
            sm_activity_pct=round(sm_activity, 1),
            # as GPM would read them: the engine busy whenever a kernel runs, tensor cores a
            # share of the SM activity (both the model's, SIMULATED)
            graphics_active_pct=round(kernel_active, 1),
            tensor_active_pct=round(sm_activity * TENSOR_SHARE, 1),
            power_w=round(power, 1),
            energy_counter_j=gpu.energy_j,
            temperature_c=round(31.0 + 45.0 * power / model.power_limit_w, 0),
            sm_clock_mhz=busy_clock if demands else idle_clock,
            memory_clock_mhz=model.memory_clock_mhz,
            power_limit_w=model.power_limit_w,
            mig_enabled=False if model.mig_capable else None,
            processes=processes,
            health=SIM_HEALTH,
            last_xid=0,  # a simulated GPU never has an XID error
        )

    @property
    def idle_power_w(self) -> float:
        return self.model.idle_w

    def mig_uuid(self, gpu: int, slot: int) -> str:
        return f"MIG-SIM{self.gpus[gpu].uuid[7:15]}-{gpu:02d}{slot:02d}-0000-000000000000"

    def _with_mig(self, reading: GpuReading, loads: list[JobLoad]) -> GpuReading:
        """The GPU's MIG devices, with the processes of the jobs placed on each."""
        slot_of = {}  # pid -> MIG device index
        for slot in range(len(self.mig[reading.index])):
            uuid = self.mig_uuid(reading.index, slot)
            slot_of.update({ld.pid: slot for ld in loads if ld.mig_slice == uuid})
        processes = tuple(
            msgspec.structs.replace(p, mig_device=slot_of.get(p.pid)) for p in reading.processes
        )
        devices = []
        for slot, profile in enumerate(self.mig[reading.index]):
            on_slice = tuple(p for p in processes if p.mig_device == slot)
            used = sum((p.used_memory_mib or 0.0) for p in on_slice)
            total = mig_memory_mib(profile, self.model)
            devices.append(
                MigDevice(
                    index=slot,
                    uuid=self.mig_uuid(reading.index, slot),
                    name=f"{self.model.name} MIG {profile}",
                    gpu_instance_id=slot + 1,
                    compute_instance_id=0,
                    memory_used_mib=used,
                    memory_total_mib=total,
                    sm_count=self.model.sm_count * compute_slices(profile) // COMPUTE_SLICES,
                    processes=on_slice,
                    memory_free_mib=max(0.0, total - used),
                )
            )
        return msgspec.structs.replace(
            reading, mig_enabled=True, mig_devices=tuple(devices), processes=processes
        )


def _sim_uuid(station: str, index: int) -> str:
    """Stable, recognisably fake UUIDs (the 'SIM' prefix never occurs on real devices)."""
    digest = sum((i + 1) * ord(c) for i, c in enumerate(station)) & 0xFFFFFFFF
    return f"GPU-SIM{digest:08x}-{index:04d}-0000-0000-000000000000"
