"""The queue as it is, as a trace the simulator can replay: each queued single-GPU job arriving
now, with the memory and SM demand placement assumes for it and its expected run time alone (its
command family's mean run time, where the station has one), on a one-GPU simulated station of the
GPU's model. `mig_queue_time` replays it to say how long the queue takes to drain with a MIG
layout and with the whole GPU; the MIG planner's payoff uses that to keep a layout that would
make the queue slower from being applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudesk.core.gpu_models import STATIONS, GpuModel
from gpudesk.core.mig_profiles import table_for_gpu
from gpudesk.policy.mig_planner import QueuedDemand
from gpudesk.policy.trace import Trace, TraceJob

# ASSUMPTION, for a queued job whose run time alone nobody knows (no family history): the median
# run time alone of the Philly trace's jobs (24 min; 3.4 to 112 min, the figure mig_payoff's
# HORIZON_S cites). Every prediction says how many of its jobs carry it.
UNKNOWN_RUN_S = 24 * 60.0
# A prediction replays at most this many queued jobs (the first, in placement order), so that a
# long queue costs the engine a bounded time (the three replays of a plan, 64 jobs: ~0.1 s on
# the 2-core VM, measured); the rest are counted as left out.
MAX_JOBS = 64


@dataclass(frozen=True)
class QueueTrace:
    trace: Trace
    station: str  # the one-GPU simulated station of the GPU's model ("sim:h100x1")
    left_out: int  # queued jobs beyond MAX_JOBS, not replayed
    unknown: int  # replayed jobs whose run time was unknown: UNKNOWN_RUN_S each
    assumed_run_s: float = UNKNOWN_RUN_S


def model_station(gpu_name: str) -> tuple[str, GpuModel] | None:
    """The simulator's station key and model of a GPU: its own where the simulator knows the
    name, else the known model with the same MIG profile table ("NVIDIA H100 PCIe": the H100's);
    None for a GPU the simulator has no model of."""
    table = table_for_gpu(gpu_name)
    for key, (model, _count) in STATIONS.items():
        if model.name == gpu_name:
            return key, model
    for key, (model, _count) in STATIONS.items():
        if table and table_for_gpu(model.name) is table:
            return key, model
    return None


def sim_station_for(gpu_name: str) -> str | None:
    """The one-GPU simulated station of a GPU's model (`model_station`)."""
    found = model_station(gpu_name)
    return None if found is None else f"sim:{found[0]}x1"


def queue_trace(gpu_name: str, queue: Sequence[QueuedDemand]) -> QueueTrace | None:
    """The queue's held jobs are left out (they cannot start); None where the simulator has no
    model of the GPU, or nothing is queued."""
    station = sim_station_for(gpu_name)
    ready = [job for job in queue if not job.held]
    if station is None or not ready:
        return None
    replayed = ready[:MAX_JOBS]
    jobs = tuple(
        TraceJob(
            id=job.job_id,
            name=job.name,
            arrival_s=0.0,
            gpus=1,
            exclusive_s=UNKNOWN_RUN_S if job.run_s is None else max(1.0, job.run_s),
            peak_memory_mib=job.memory_mib,
            sm_pct=job.sm_pct,
            job_class="queued",
            estimates={},
            membw_pct=job.membw_pct,
        )
        for job in replayed
    )
    unknown = sum(1 for job in replayed if job.run_s is None)
    return QueueTrace(
        Trace("the queue as it is", station, jobs), station, len(ready) - len(replayed), unknown
    )
