"""Telemetry views built by hand, as the monitor makes them (gpudesk.core.wire.telemetry): each
field not given is unknown (None), so a test names only what it reads."""

from __future__ import annotations

from typing import Any

from gpudesk.core.wire.jobs import AttemptUsageFigures
from gpudesk.core.wire.telemetry import (
    GpuView,
    HostView,
    JobTelemetry,
    MigDeviceView,
    ProcessView,
    Snapshot,
)


def process_view(pid: int, job_id: int | None = None, mps: str | None = None) -> ProcessView:
    return ProcessView(
        pid=pid, used_memory_mib=None, sm_pct=None, mig_device=None, job_id=job_id, mps=mps
    )


def mig_view(index: int, uuid: str | None, name: str | None) -> MigDeviceView:
    unknown = dict.fromkeys(MigDeviceView.__struct_fields__)
    known = {**unknown, "index": index, "uuid": uuid, "name": name, "processes": []}
    return MigDeviceView(**known)


def gpu_view(index: int, **fields: Any) -> GpuView:
    known: dict[str, Any] = {
        "uuid": None,
        "name": None,
        "lost": False,
        "memory_used_mib": None,
        "memory_total_mib": None,
        "kernel_active_pct": None,
        "sm_activity_pct": None,
        "power_w": None,
        "power_limit_w": None,
        "energy_j": None,
        "energy_source": None,
        "idle_power_w": None,
        "temperature_c": None,
        "sm_clock_mhz": None,
        "memory_clock_mhz": None,
        "mig_enabled": None,
        "mig_devices": [],
        "processes": [],
        "jobs": [],
        "unavailable": [],
    }
    return GpuView(index=index, **{**known, **fields})


def snapshot(taken_at: float, gpus: list[GpuView]) -> Snapshot:
    host = HostView(
        cpu_pct=None,
        cores=1,
        memory_used_mib=0,
        memory_total_mib=0,
        load_avg=[0.0, 0.0, 0.0],
        cpu_energy_j=None,
        cpu_energy_note=None,
        grid_g_per_kwh=0.0,
        gpu_energy_carbon_g=None,
    )
    return Snapshot(
        taken_at=taken_at,
        backend="sim:test",
        simulated=True,
        banner=None,
        sampling_since=taken_at,
        interval_s=1.0,
        host=host,
        gpus=gpus,
        jobs=[],
    )


def usage_figures(**fields: Any) -> AttemptUsageFigures:
    known = dict.fromkeys(AttemptUsageFigures.__struct_fields__)
    return AttemptUsageFigures(**{**known, "estimate": False, **fields})


def job_telemetry(job_id: int, **fields: Any) -> JobTelemetry:
    known = dict.fromkeys(JobTelemetry.__struct_fields__)
    defaults = {"attempt_id": job_id, "name": f"job{job_id}", "user": "", "slot": "", "gpus": []}
    known.update(defaults, processes=0, energy=usage_figures())
    del known["id"]
    return JobTelemetry(id=job_id, **{**known, **fields})
