"""How a Slurm job shows in the engine's replies: its `slurm` part (core.wire's SlurmJobView),
its slot label, and its run as the one attempt `show` lists (core.wire's AttemptView),
told in the station's placement words."""

from __future__ import annotations

from typing import cast

from gpudesk.core.jobs import JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.base import PlacementMode
from gpudesk.core.wire.jobs import AttemptView, PlacementView, SlurmJobView
from gpudesk.slurm.records import SlurmRow
from gpudesk.slurm.request import gres_mode


def slot(row: SlurmRow) -> str:
    """Where it runs or ran, as views label a slot: `slurm:NODE`."""
    return f"slurm:{row.node or '?'}"


def slurm_view(row: SlurmRow) -> SlurmJobView:
    """A Slurm job's `slurm` part: its id there and what Slurm last said of it."""
    return SlurmJobView(
        cluster=row.cluster,
        job_id=row.slurm_id,
        state=row.state,
        reason=row.reason,
        node=row.node,
        gres=row.gres,
        script=row.script,
    )


def attempt(job: JobRecord, row: SlurmRow) -> AttemptView:
    """Its run as an attempt: where Slurm placed it, in the station's words (a MIG slice, an
    MPS share, a time-sliced shard, whole GPUs)."""
    return AttemptView(
        number=1,
        state="running" if job.state is JobState.RUNNING else "exited",
        placement=PlacementView(
            slot=slot(row),
            mode=cast(PlacementMode, gres_mode(row.gres)),  # one of the station's modes
            reason=f"Slurm job {row.slurm_id} on cluster {row.cluster}"
            + (f", gres {row.gres}" if row.gres else ""),
            gpus=[],
            env={},
            env_defaults={},
        ),
        pid=None,
        started_at=job.started_at,
        ended_at=job.ended_at,
        exit_code=job.exit_code,
        signal=None,
        reason=job.reason if job.state.terminal else None,
        log=row.output,
    )


def wait_code(row: SlurmRow) -> str:
    """Why a queued Slurm job has not started, as squeue's short reason (Priority,
    Resources, ...), or Submitting while its sbatch has not answered."""
    if row.sending:
        return "Submitting"
    return row.reason if row.reason and row.reason != "None" else "Pending"


def explain_wait(row: SlurmRow) -> str:
    """Why a queued Slurm job has not started, as Slurm last said."""
    if row.sending:
        return f"being submitted to Slurm (cluster {row.cluster}; {row.script})"
    why = f": {row.reason}" if row.reason and row.reason != "None" else ""
    return f"pending in Slurm{why} (squeue -j {row.slurm_id}, cluster {row.cluster})"
