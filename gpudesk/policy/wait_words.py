"""Why a queued GPU job waits under `SharingPolicy`, in words (`gpudesk show`): what it needs,
where the GPUs stand (and, where every tenant's remaining time is estimated, when each drains),
which of them the last placement pass held and for which job (for that job: when it should
start, once they have drained), and how many GPU jobs are ahead of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import Demand, margin_mib
from gpudesk.policy.placement_reasons import mps_serves_other, unknown_wait
from gpudesk.policy.policy import GpuState, StationView, queued_before
from gpudesk.render import duration
from gpudesk.units import gib


def waiting_text(
    job: JobRecord,
    queue: Sequence[JobRecord],
    station: StationView,
    demand: Demand,
    robust: bool,
    held: Mapping[int, int],
) -> str:
    """`demand`: the job's, as placement takes it; `robust`: sharing judged with its costs at
    the top of their range; `held`: GPU index -> the waiting job the last pass held it for
    (`Decision.held`, `StationView.held`: no new job starts there until that one has)."""
    need = (
        f"needs {job.spec.gpus} idle GPUs"
        if job.spec.gpus > 1 or demand.exclusive
        else f"needs {gib(demand.admit_mib)} + {gib(margin_mib(demand))} margin and "
        f"{demand.sm_text}, and a GPU where sharing is predicted to gain"
        + (" even with its costs at the top of their range" if robust else "")
    )
    parts = [f"waiting ({demand.source} demand: {need})"]
    if demand.unknown:
        parts.append(unknown_wait(demand, job.spec.gpus > 1 or demand.exclusive))
    for gpu in station.gpu_states:
        holder = held.get(gpu.index)
        hold = (
            ""
            if holder is None
            else ", held for it until it starts"
            if holder == job.id
            else f", held for job {holder} (waiting ahead of it) until that one starts"
        )
        if gpu.lost:
            parts.append(f"GPU {gpu.index} lost")
        elif gpu.exclusive:
            parts.append(f"GPU {gpu.index} held exclusively{hold}")
        elif not gpu.idle:
            other_user = mps_serves_other(gpu, job.owner.uid)
            parts.append(
                f"GPU {gpu.index}: {gib(max(0.0, gpu.free_mib))} free, SM "
                f"demand {gpu.sm_demand_pct:.0f}%"
                + (f" ({other_user})" if other_user else "")
                + _drains(gpu)
                + hold
            )
        elif hold:
            parts.append(f"GPU {gpu.index} idle{hold}")
    start = expected_start_s(job, station, held)
    if start is not None:
        parts.append(
            f"expected to start in ~{duration(start)}, once the GPUs held for it have drained "
            "(by their tenants' remaining times)"
        )
    ahead = sum(1 for o in queue if o.id != job.id and queued_before(o, job) and o.spec.gpus)
    if ahead:
        parts.append(f"{ahead} GPU job(s) ahead")
    return "; ".join(parts)


def _drains(gpu: GpuState) -> str:
    """When the GPU's last tenant is expected to end, where every tenant's remaining time is
    estimated (`GpuState.drains_in_s`: progress lines, else the command family's history)."""
    drains = gpu.drains_in_s
    return "" if drains is None else f", drains in ~{duration(drains)}"


def expected_start_s(job: JobRecord, station: StationView, held: Mapping[int, int]) -> float | None:
    """In how many seconds the job should start, where the last pass held GPUs for it and every
    tenant of theirs has a remaining time: when the last of them drains (nothing new starts on
    a held GPU until the job has). None otherwise: which GPU frees first, and whether a later
    job takes it, is not known ahead."""
    mine = [g for g in station.gpu_states if held.get(g.index) == job.id]
    if not mine:
        return None
    drains = [g.drains_in_s for g in mine]
    if any(d is None for d in drains):
        return None
    return max(d for d in drains if d is not None)
