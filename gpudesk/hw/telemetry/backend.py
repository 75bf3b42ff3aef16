"""One interface over the GPU backends, chosen by name (`GPUDESK_BACKEND` or the station config;
the names and what each means: gpudesk.core.backend_names).

A backend never raises from `read()` because one metric or one device failed: what it cannot read
is None (and listed in `unavailable`), a lost device is marked lost. Only `open()` raises, with
`BackendUnavailable`, when there is no way to read the station at all.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from gpudesk.core.backend_names import check_backend_name, parse_sim_name
from gpudesk.hw.telemetry.model import BackendReading, GpuInfo, JobLoad


class TelemetryBackend(Protocol):
    name: str  # as configured after resolving auto: "nvml", "sim:h100", "none"
    simulated: bool

    def open(self) -> None: ...

    def inventory(self) -> list[GpuInfo]: ...

    def read(self) -> BackendReading: ...

    def set_load(self, loads: Sequence[JobLoad]) -> None:
        """The jobs now placed on the GPUs (the simulated backend follows them)."""
        ...

    def close(self) -> None: ...


class NoGpuBackend:
    """A station without GPUs: every reading is empty."""

    name = "none"
    simulated = False

    def open(self) -> None:
        pass

    def inventory(self) -> list[GpuInfo]:
        return []

    def read(self) -> BackendReading:
        return BackendReading(time.time(), time.monotonic())

    def set_load(self, loads: Sequence[JobLoad]) -> None:
        pass

    def close(self) -> None:
        pass


def nvml_answers() -> bool:
    """Whether an NVIDIA driver answers (for `auto`): nvmlInit succeeds and sees a GPU."""
    from gpudesk.hw.telemetry.nvml import probe_nvml

    return probe_nvml()


def resolve_name(name: str) -> str:
    if name == "auto":
        return "nvml" if nvml_answers() else "none"
    return name


def make_backend(name: str, mig: Mapping[str, str] | None = None) -> TelemetryBackend:
    """The backend for a (validated) name; `auto` is resolved here. Not yet opened. `mig`
    gives simulated GPUs a MIG layout (GPU index -> "3g.20gb,2g.10gb,..."); real GPUs are
    partitioned with `gpudesk mig apply`."""
    name = resolve_name(check_backend_name(name))
    if name == "none":
        return NoGpuBackend()
    if name == "nvml":
        from gpudesk.hw.telemetry.nvml import NvmlBackend

        return NvmlBackend()
    from gpudesk.hw.telemetry.sim import SimBackend

    model, count = parse_sim_name(name)
    layout = {int(k): [p.strip() for p in v.split(",")] for k, v in (mig or {}).items()}
    return SimBackend(model, count=count, name=name, mig=layout)
