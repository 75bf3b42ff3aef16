"""One interface over the GPU backends, chosen by name (`GPUDESK_BACKEND` or the station config).

    nvml                     the real GPUs, through nvidia-ml-py
    sim:dgx-station-a100     4 x A100-SXM4-40GB, simulated
    sim:a100-40gb, sim:a100-80gb, sim:h100, sim:h200
                             one A100 40GB / A100 80GB / H100 / H200, simulated
    sim:MODELxN              N of a simulated model (sim:h100x8), for planning and benchmarks
    none                     no GPUs: host readings only
    auto                     nvml when a driver answers, else none

A backend never raises from `read()` because one metric or one device failed: what it cannot read
is None (and listed in `unavailable`), a lost device is marked lost. Only `open()` raises, with
`BackendUnavailable`, when there is no way to read the station at all.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from gpudesk.engine.telemetry.model import BackendReading, GpuInfo, JobLoad

SIM_PREFIX = "sim:"
# The simulated stations a user can name; the models themselves live in telemetry.sim.
SIM_STATIONS = ("dgx-station-a100", "a100-40gb", "a100-80gb", "h100", "h200")
MAX_SIM_GPUS = 64
BACKEND_NAMES = ("auto", "nvml", "none", *(SIM_PREFIX + s for s in SIM_STATIONS))
_SIM_COUNT = re.compile(r"^sim:(?P<model>[a-z0-9-]+?)x(?P<count>[0-9]{1,2})$")


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


def is_simulated(name: str) -> bool:
    return name.startswith(SIM_PREFIX)


def parse_sim_name(name: str) -> tuple[str, int | None]:
    """("h100", 8) for sim:h100x8; ("dgx-station-a100", None) for the station's own count.
    Raises ValueError for a name that is not a simulated station."""
    match = _SIM_COUNT.match(name)
    if match and match["model"] in SIM_STATIONS:
        count = int(match["count"])
        if not 1 <= count <= MAX_SIM_GPUS:
            raise ValueError(f"a simulated station has 1 to {MAX_SIM_GPUS} GPUs, found {count}")
        return match["model"], count
    model = name.removeprefix(SIM_PREFIX)
    if name.startswith(SIM_PREFIX) and model in SIM_STATIONS:
        return model, None
    raise ValueError(f"unknown simulated station {name!r}")


def check_backend_name(value: object) -> str:
    """Validate a backend name from a profile, the environment or a client."""
    why = ""
    if isinstance(value, str):
        if value in BACKEND_NAMES:
            return value
        if value.startswith(SIM_PREFIX):
            try:
                parse_sim_name(value)
                return value
            except ValueError as exc:
                why = f" ({exc})"
    shown = repr(value) if isinstance(value, str) else f"a {type(value).__name__}"
    raise ValueError(
        f"expected one of {', '.join(BACKEND_NAMES)} (or sim:MODELxN), found {shown}{why}"
    )


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
    from gpudesk.engine.telemetry.nvml import probe_nvml

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
        from gpudesk.engine.telemetry.nvml import NvmlBackend

        return NvmlBackend()
    from gpudesk.engine.telemetry.sim import SimBackend

    model, count = parse_sim_name(name)
    layout = {int(k): [p.strip() for p in v.split(",")] for k, v in (mig or {}).items()}
    return SimBackend(model, count=count, name=name, mig=layout)
