"""What an ended attempt does to its job: succeeded, cancelled, timed out, back in the queue
(after an out-of-memory death, with a raised demand on a GPU of its own; after another failure,
while `max_attempts` allows), or failed. A rule of the scheduling brain, pure: the engine reads
the exit record and the log and stores the outcome (`gpudesk.engine.attempts`); the simulator
could ask the same.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gpudesk.core.jobs import JobState
from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import Demand, beyond_every_gpu
from gpudesk.units import MIB_PER_GIB

OOM_RETRIES = 2  # attempts an out-of-memory death adds to a job's max_attempts


class Ending(msgspec.Struct, frozen=True):
    """How a settled attempt moves its job on."""

    state: JobState
    message: str
    raised_demand: Demand | None = None  # after an out-of-memory death
    preempted: bool = False  # it gave way to another job: back in the queue, not a failure


def ending(
    job: JobRecord,
    attempt_number: int,
    exit_code: int | None,
    outcome: str,
    *,
    timed_out: bool,
    oom: str | None,
    after_oom: Callable[[], Demand],
    usable_mib: float | None = None,
    preempted_for: int | None = None,
    ran: bool = True,
) -> Ending:
    """Attempt `attempt_number` of `job` ended with `exit_code` (None: unknown), described by
    `outcome`; `timed_out` when it ran past its time limit, `oom` the log's out-of-memory line
    (None: none). `after_oom` gives the raised demand, asked only when an OOM is retried;
    `usable_mib` is what the largest GPU offers a job alone: a need measured beyond it fails the
    job at once, saying so (a hint never does: demand.hint_unknown). `preempted_for`: the
    waiting job the engine asked it to give way to (docs/preemption.md): unless it exited 0
    (its work was done) it goes back to the queue to resume, whatever max_attempts says, as no
    failure. Not `ran`: its owner was refused as it started (hw/wrapper.py owner_refused), which
    no retry changes."""
    if job.cancel_requested and exit_code != 0:
        return Ending(JobState.CANCELLED, f"cancelled ({outcome})")
    if not ran:
        return Ending(JobState.FAILED, outcome)
    if exit_code == 0:
        return Ending(JobState.SUCCEEDED, outcome)
    if preempted_for is not None:
        return Ending(
            JobState.QUEUED,
            f"attempt {attempt_number} preempted for job {preempted_for} ({outcome}); back in "
            "the queue to resume",
            preempted=True,
        )
    limit = job.spec.time_limit_s
    if limit is not None and timed_out:
        return Ending(
            JobState.FAILED,
            f"timed out: ran past its time limit of {limit:g} s ({outcome})",
        )
    if oom and job.attempts_since_requeue < job.spec.max_attempts + OOM_RETRIES:
        # An out-of-memory death is retried whatever max_attempts says: with more memory
        # and a GPU to itself, so the next attempt cannot die the same way or hurt others.
        demand = after_oom()
        if beyond_every_gpu(demand, usable_mib):
            return Ending(JobState.FAILED, beyond_message(attempt_number, oom, usable_mib))
        return Ending(
            JobState.QUEUED,
            f"attempt {attempt_number} ran out of GPU memory ({oom}); back in the "
            f"queue needing {demand.memory_mib / MIB_PER_GIB:.1f} GiB on a GPU of its own",
            demand,
        )
    if job.attempts_since_requeue < job.spec.max_attempts:
        left = job.spec.max_attempts - job.attempts_since_requeue
        return Ending(
            JobState.QUEUED,
            f"attempt {attempt_number} failed ({outcome}); retrying, {left} left",
        )
    return Ending(JobState.FAILED, outcome)


def beyond_message(attempt_number: int, oom: str, usable_mib: float | None) -> str:
    """Why a job that ran out of memory with all a GPU offers is failed, not retried."""
    offered = f" ({usable_mib / MIB_PER_GIB:.1f} GiB)" if usable_mib is not None else ""
    return (
        f"attempt {attempt_number} ran out of GPU memory ({oom}) holding all the largest GPU "
        f"here offers a job{offered}: its need, measured, is beyond every GPU of this "
        "station, so it is not retried. Run it where a GPU has more memory, or make it need less "
        "(a smaller batch, mixed precision, activation checkpointing)"
    )
