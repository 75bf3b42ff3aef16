"""Fair share: waiting jobs of equal priority ordered by their owners' recent use of the station.

Slurm's classic fair share is the anchor: each user's usage decays with a half-life
(`PriorityDecayHalfLife`, 7 days by default there and here) and the user who used less recently
goes first. A user's usage is, in GPU-hour equivalents (Slurm's TRESBillingWeights with the GPU
at 1):

    usage = sum over their attempts of  (GPUs held + CPU core-hours / wall hours x cpu_weight)
                                         x the decayed length of the attempt

where an hour that ended `a` hours ago counts 2^(-a / half_life). The decay is integrated over
each attempt's run (a running attempt accrues up to now), so an attempt of one GPU for one hour
that ended just now counts a little under 1 GPU-h, and one a half-life ago counts half of that.
An attempt's CPU time is taken as spread evenly over its run (the store keeps its total).

Where in the order: priority first (a user's explicit priority still wins), then the owner's
decayed usage, lightest first, then submission. A queue with one user's jobs only keeps exactly
its usual order (priority, then submission): the simulator and a personal engine never see it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from gpudesk.core.records import JobRecord, UsageSpan

SECONDS_PER_HOUR = 3600.0
# Usage older than this many half-lives weighs under a millionth: the store is not asked for it.
HORIZON_HALF_LIVES = 20


class FairShare(msgspec.Struct, frozen=True):
    """How usage is weighed: the station's `fairshare_half_life_h` and `fairshare_cpu_weight`."""

    half_life_h: float
    cpu_weight: float  # GPU-hours one CPU core-hour counts as

    @property
    def horizon_s(self) -> float:
        return self.half_life_h * SECONDS_PER_HOUR * HORIZON_HALF_LIVES


def decayed_hours(start: float, end: float, now: float, half_life_h: float) -> float:
    """The hours of [start, end] (seconds since the epoch), each weighed by 2^(-age / half-life):
    the integral of the decay over the span, in closed form."""
    if end <= start:
        return 0.0
    rate = math.log(2.0) / (half_life_h * SECONDS_PER_HOUR)  # per second
    newest = math.exp(-rate * max(0.0, now - end))
    oldest = math.exp(-rate * max(0.0, now - start))
    return (newest - oldest) / rate / SECONDS_PER_HOUR


def span_usage(span: UsageSpan, now: float, share: FairShare) -> float | None:
    """One attempt's decayed usage at `now` in GPU-hour equivalents; None when it has not run
    for any time by then (it then names no user)."""
    end = now if span.ended_at is None else min(span.ended_at, now)
    wall_h = max(0.0, end - span.started_at) / SECONDS_PER_HOUR
    if wall_h <= 0.0:
        return None
    cores = span.cpu_s / SECONDS_PER_HOUR / wall_h  # mean cores busy over its run
    weight = span.gpus + cores * share.cpu_weight
    return weight * decayed_hours(span.started_at, end, now, share.half_life_h)


def usage_by_user(spans: Iterable[UsageSpan], now: float, share: FairShare) -> dict[int, float]:
    """Each uid's decayed usage in GPU-hour equivalents: the definition. The engine keeps the
    same sums up to date instead (placement.usage_ledger) rather than reading every attempt."""
    usage: dict[int, float] = {}
    for span in spans:
        term = span_usage(span, now, share)
        if term is not None:
            usage[span.uid] = usage.get(span.uid, 0.0) + term
    return usage


def several_users(queue: Iterable[JobRecord]) -> bool:
    """Whether jobs of more than one user wait: only then does fair share reorder."""
    first: int | None = None
    for job in queue:
        if first is None:
            first = job.owner.uid
        elif job.owner.uid != first:
            return True
    return False


def fair_key(job: JobRecord, usage: Mapping[int, float]) -> tuple[int, float, int]:
    return (-job.spec.priority, usage.get(job.owner.uid, 0.0), job.id)


def fair_order(queue: Sequence[JobRecord], usage: Mapping[int, float]) -> list[JobRecord]:
    """The queue in fair-share order: priority, then the owner's usage (lightest first), then
    submission. One user's queue comes back in its own order, untouched."""
    if not several_users(queue):
        return list(queue)
    return sorted(queue, key=lambda job: fair_key(job, usage))


def ahead_by_fair_share(
    job: JobRecord, queue: Sequence[JobRecord], usage: Mapping[int, float]
) -> int:
    """How many jobs of other users fair share puts ahead of `job` that submission order would
    have put behind it (same priority, submitted later, their owner lighter)."""
    mine = fair_key(job, usage)
    return sum(
        1
        for other in queue
        if other.owner.uid != job.owner.uid
        and other.spec.priority == job.spec.priority
        and other.id > job.id
        and fair_key(other, usage) < mine
    )


def fair_share_wait(
    job: JobRecord,
    queue: Sequence[JobRecord],
    usage: Mapping[int, float],
    share: FairShare,
    text: str,
) -> str:
    """Why a queued job waits when several users' jobs do: where fair share put it (the jobs
    of users with less recent usage ahead of it, its owner's usage), then `text`, the
    policy's words."""
    ahead = ahead_by_fair_share(job, queue, usage)
    mine = (
        f"{job.user}'s usage {usage.get(job.owner.uid, 0.0):.1f} GPU-h (decayed, half-life "
        f"{share.half_life_h:g} h)"
    )
    where = (
        f"behind {ahead} job{'s' if ahead != 1 else ''} of users with less recent usage; "
        if ahead
        else ""
    )
    return f"fair share: {where}{mine}; {text}"


def pool_heads(
    ordered: Iterable[JobRecord],
    blocked: Callable[[JobRecord], bool],
    usage: Mapping[int, float],
    mixed: bool,
) -> dict[bool, int]:
    """The job at the head of each pool (True: GPU jobs, False: CPU jobs), by id: the next to
    start there when there is room. `ordered` is the queue in its order; a `blocked` job waits
    for something besides room and is passed over. In placement order: fair share's when
    several users' jobs wait (`mixed`: the lowest fair_key, each user's first job, weighed by
    `usage`), else the queue's own, whose first startable job of each pool ends the scan."""
    heads: dict[bool, tuple[tuple[int, float, int], int]] = {}
    firsts: set[tuple[bool, int]] = set()  # (pool, owner) whose first job was weighed
    for job in ordered:
        if len(heads) == 2 and -job.spec.priority > max(k[0] for k, _ in heads.values()):
            break  # the queue is in priority order: no job from here on comes first
        pool, uid = bool(job.spec.gpus), job.owner.uid
        if (pool, uid) in firsts or blocked(job):
            continue  # a user's later jobs never come before their first
        firsts.add((pool, uid))
        key = fair_key(job, usage)
        if pool not in heads or key < heads[pool][0]:
            heads[pool] = (key, job.id)
        if not mixed and len(heads) == 2:
            break
    return {pool: job_id for pool, (_, job_id) in heads.items()}
