"""A one-GPU job that must run alone (after an out-of-memory death, or under `exclusive`) on a GPU
in MIG mode: the slice that holds all of the GPU's compute (a 7g profile) is a GPU to itself
in all but memory's last few hundred MiB, and nothing shares it. On a station whose GPUs are
all in MIG mode it is the only way such a job runs (gpudesk never takes a GPU out of MIG mode);
under `[station] mig_repartition` the engine carves one for it where the queue's replay says the
change pays (mig_planner: `QueuedDemand.alone`). Without this the job waited for ever."""

from __future__ import annotations

from collections.abc import Sequence

from gpudesk.policy.filled_station import Choice
from gpudesk.policy.policy import GpuState
from gpudesk.units import gib


def full_slice_choice(need_mib: float, gpus: Sequence[GpuState], why: str) -> Choice | None:
    """The first free full-compute MIG slice that holds `need_mib`, or None. `why`: why the job
    runs alone, for its reason."""
    for gpu in gpus:
        if not gpu.mig_enabled or gpu.lost:
            continue
        for mig in gpu.mig_slices:
            if not mig.busy and mig.holds_all_compute and mig.memory_mib >= need_mib:
                return Choice(
                    (gpu.index,),
                    "mig",
                    f"MIG {mig.profile} on GPU {gpu.index}: all of the GPU's compute in one "
                    f"slice, {gib(mig.memory_mib)} for {gib(need_mib)}; {why}",
                    mig,
                    alone=True,
                    free_mib=mig.memory_mib,
                )
    return None
