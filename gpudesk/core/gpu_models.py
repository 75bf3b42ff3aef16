"""The GPU models gpudesk knows by their figures — memory, SMs, power, clocks, MIG — and the
simulated stations built of them (`sim:NAME` backends, the simulator, the MIG planner's
simulated GPUs). Figures are the datasheets' where one is published; the others are labelled
assumptions beside them. A simulated GPU's load is gpudesk.hw.telemetry.sim's."""

from __future__ import annotations

import msgspec

from gpudesk.core.mig_profiles import find_profile, nominal_memory_mib, table_for_gpu


class GpuModel(msgspec.Struct, frozen=True):
    name: str
    memory_total_mib: float
    sm_count: int
    idle_w: float
    busy_w: float  # sustained draw at full SM activity (below the power limit)
    power_limit_w: float
    sm_clock_mhz: tuple[float, float]  # idle, busy
    memory_clock_mhz: float
    mig_capable: bool = True


A100_SXM4_40GB = GpuModel(
    "NVIDIA A100-SXM4-40GB", 40536.0, 108, 52.0, 330.0, 400.0, (210.0, 1410.0), 1215.0
)
# The A100 80GB: memory as the real card reports it (~81920 MiB class), 108 SMs and a 400 W limit
# from the datasheet; idle ~60 W and ~350 W busy are assumptions (no published sustained figure),
# as are the clocks, taken as the 40GB's with its faster HBM2e memory clock.
A100_SXM4_80GB = GpuModel(
    "NVIDIA A100-SXM4-80GB", 81920.0, 108, 60.0, 350.0, 400.0, (210.0, 1410.0), 1593.0
)
H100_SXM5_80GB = GpuModel(
    "NVIDIA H100 80GB HBM3", 81559.0, 132, 70.0, 620.0, 700.0, (345.0, 1980.0), 2619.0
)
H200_SXM_141GB = GpuModel("NVIDIA H200", 143771.0, 132, 75.0, 630.0, 700.0, (345.0, 1980.0), 3201.0)

# station -> (model, number of GPUs)
STATIONS: dict[str, tuple[GpuModel, int]] = {
    "dgx-station-a100": (A100_SXM4_40GB, 4),
    "a100-40gb": (A100_SXM4_40GB, 1),
    "a100-80gb": (A100_SXM4_80GB, 1),
    "h100": (H100_SXM5_80GB, 1),
    "h200": (H200_SXM_141GB, 1),
}


def mig_memory_mib(profile: str, model: GpuModel) -> float:
    """A simulated MIG device's memory: its model's profile table's figure, else its name's."""
    known = find_profile(profile, table_for_gpu(model.name))
    return known.memory_mib if known is not None else nominal_memory_mib(profile)
