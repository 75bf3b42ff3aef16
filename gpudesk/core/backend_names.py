"""The names of the telemetry backends a station may run on (`GPUDESK_BACKEND`, `[station]
backend`): their grammar and checks. The backends themselves are gpudesk.hw.telemetry's; the
simulated GPU models are gpudesk.core.gpu_models.

    nvml                     the real GPUs, through nvidia-ml-py
    sim:dgx-station-a100     4 x A100-SXM4-40GB, simulated
    sim:a100-40gb, sim:a100-80gb, sim:h100, sim:h200
                             one A100 40GB / A100 80GB / H100 / H200, simulated
    sim:MODELxN              N of a simulated model (sim:h100x8), for planning and benchmarks
    none                     no GPUs: host readings only
    auto                     nvml when a driver answers, else none
"""

from __future__ import annotations

import re

from gpudesk.core.gpu_models import STATIONS
from gpudesk.text import quoted

SIM_PREFIX = "sim:"
# The simulated stations a user can name: the catalogue's (gpudesk.core.gpu_models).
SIM_STATIONS = tuple(STATIONS)
MAX_SIM_GPUS = 64
BACKEND_NAMES = ("auto", "nvml", "none", *(SIM_PREFIX + s for s in SIM_STATIONS))
_SIM_COUNT = re.compile(r"^sim:(?P<model>[a-z0-9-]+?)x(?P<count>[0-9]+)$")


def is_simulated(name: str) -> bool:
    return name.startswith(SIM_PREFIX)


def parse_sim_name(name: str) -> tuple[str, int | None]:
    """("h100", 8) for sim:h100x8; ("dgx-station-a100", None) for the station's own count.
    Raises ValueError for a name that is not a simulated station."""
    match = _SIM_COUNT.match(name)
    if match and match["model"] in SIM_STATIONS:
        digits = match["count"]
        # (a count of any length gets the sentence; int() is not asked for thousands of digits)
        count = int(digits) if len(digits) <= 3 else MAX_SIM_GPUS + 1
        if not 1 <= count <= MAX_SIM_GPUS:
            shown = digits if len(digits) <= 12 else f"{digits[:12]}... ({len(digits)} digits)"
            raise ValueError(f"a simulated station has 1 to {MAX_SIM_GPUS} GPUs, found {shown}")
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
    shown = quoted(value) if isinstance(value, str) else f"a {type(value).__name__}"
    raise ValueError(
        f"expected one of {', '.join(BACKEND_NAMES)} (or sim:MODELxN), found {shown}{why}"
    )
