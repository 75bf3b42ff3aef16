"""What one member may do to the shared queue: how many jobs she may have waiting, and how far
she may move her own jobs' priority. Each rule is a function that returns the refusal (one
paragraph naming the rule and what to do) or None, so every path that could break it asks the
same question.

Queued jobs (`[station] max_queued_per_user`): every job of hers in the queue counts, held ones
and ones waiting on an `after` dependency included, as Slurm's MaxSubmitJobs counts every
pending job whatever its reason. A job enters the queue by a submit (a dependent `after` child
included: it is queued, waiting, from its submit on), by a requeue, or by an automatic retry of
a job already running; a release moves a job that was counted already. Submit and requeue are
refused past the limit; a retry is the same job carrying on within its `max_attempts` (it left
the queue to run, so it held a place there) and is never refused.

Priority: a member may lower her jobs' priority, and raise it back up to 0, the default; only
an admin may make one higher than 0. That is Slurm's rule: a user may only add a positive
`nice` (sbatch --nice, scontrol update job nice=), which lowers the priority, and only an
operator or administrator may give a negative nice or set a job's priority. Without it any
member could put her jobs ahead of everyone's, whatever fair share says, since priority is
compared before fair share.

Running GPUs (`[station] max_running_gpus_per_user`): the GPUs her running jobs hold (a MIG slice
or a shared GPU counts as one) and the job's own may not go past the limit; the scheduler asks
before it places a job and when it says why one waits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.requests import PartOf
from gpudesk.policy.queue import JobQueue
from gpudesk.text import safe_text

DEFAULT_PRIORITY = 0  # JobSpec's default: the highest a member may give her own jobs


def queued_count(queue: JobQueue, uid: int) -> int:
    """How many of `uid`'s jobs are in the queue now, held and waiting ones included."""
    return queue.owned_by(uid)


_DOING = {"submit": "submitting", "requeue": "requeueing"}


def queued_refusal(
    limit: int | None,
    owner: str,
    queued: int,
    adding: int,
    verb: str,
    undone: str,
    whole: PartOf | None = None,
) -> str | None:
    """Why putting `adding` more of `owner`'s jobs in the queue (by `verb`: "submit",
    "requeue") would break `[station] max_queued_per_user`, or None while it would not.
    `undone`: what was not done, for the message ("Nothing was submitted"). `whole`: the
    submission these `adding` are a part of (sent in parts): counted whole, its earlier parts
    taken off `queued`, so the first part of one too large is refused saying what she asked for
    (never less strict than the part alone: the whole holds this part and those before it)."""
    if whole is not None and whole.sent <= queued and whole.sent + adding <= whole.jobs:
        queued, adding = queued - whole.sent, whole.jobs
    if limit is None or queued + adding <= limit:
        return None
    plural = "s" if queued != 1 else ""
    return (
        f"{owner} has {queued} job{plural} queued (held and waiting ones count) and the station "
        f"allows {limit} per user ([station] max_queued_per_user); {_DOING[verb]} {adding} "
        f"more would make {queued + adding}. {undone}: wait for some to start, or cancel some "
        f"(gpudesk queue --user {owner}), then {verb} again."
    )


def priority_refusal(old: int, new: int, admins: str) -> str | None:
    """Why a member who is no admin may not move a job's priority from `old` to `new`, or None
    when she may: lowering is always allowed, raising only up to the default (0)."""
    if new <= max(old, DEFAULT_PRIORITY):
        return None
    return (
        f"refused: only {admins} may raise a job's priority above {DEFAULT_PRIORITY} "
        f"(asked {old} -> {new}); you may lower your jobs' priority, or raise it back to "
        f"{DEFAULT_PRIORITY}. Fair share orders jobs of equal priority by each member's recent "
        "usage; ask an admin if one of yours must go first."
    )


def submit_priority_refusal(specs: Sequence[JobSpec], admins: str) -> str | None:
    """Why a member who is no admin may not submit these jobs, whole: one asks a priority above
    the default (`priority_refusal`); None when none does."""
    for index, spec in enumerate(specs):
        refusal = priority_refusal(DEFAULT_PRIORITY, spec.priority, admins)
        if refusal:
            name = safe_text(spec.name)
            return f"jobs[{index}] ({name!r}).priority: {refusal} Nothing was submitted."
    return None


def gpu_limit_refusal(job: JobRecord, held: Mapping[int, int], limit: int | None) -> str:
    """Why the job may not start under `[station] max_running_gpus_per_user` (`limit`), with
    `held` the GPUs each user's running jobs hold, or ""."""
    if limit is None or not job.spec.gpus:
        return ""
    holding = held.get(job.owner.uid, 0)
    if holding + job.spec.gpus <= limit:
        return ""
    return (
        f"{job.user}'s running jobs hold {holding} GPU{'s' if holding != 1 else ''} and this "
        f"one asks for {job.spec.gpus}; the station allows {limit} per user "
        "([station] max_running_gpus_per_user)"
    )
