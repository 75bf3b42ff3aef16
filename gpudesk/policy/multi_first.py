"""A multi-GPU job that could start now is not kept waiting by a one-GPU job just ahead of it.

A multi-GPU job needs whole idle GPUs together, so from the first time it waits the GPUs that
drain first are held for it (`SharingPolicy.overtake_budget`, as Slurm's backfill holds them for
its top job). When exactly as many whole GPUs as it needs are idle and a one-GPU job ahead of it
in the queue takes one of them, the others stand idle, held, until one more drains: the station
loses that idle time outright. If the one-GPU job waits instead, the multi-GPU job starts now and
the one-GPU job takes the next GPU that drains, the same wait with no GPU idle. So `auto` keeps
those idle GPUs from the one-GPU jobs ahead of such a job (they may still share a GPU, or take
a slice), unless the one-GPU job has itself been overtaken as often as the policy allows (then it
is due and goes first: no job starves).

Only where the multi-GPU job takes at most half of the whole GPUs the station has: else the
one-GPU jobs that yielded have fewer GPUs to run on while it runs than it holds, turn due before
it ends, and take one of its GPUs as they free, which the next multi-GPU job then waits for with
the rest held idle. Measured (`docs/benchmarks.md`, "A multi-GPU job that could start now"): on
the bundled t1 trace with GPU 3 in MIG mode (three whole GPUs, two-GPU jobs) applying it there
raised the whole GPUs' idle time while jobs waited from 0.71 to 1.17 h and the makespan from
5.36 to 5.63 h. On four whole GPUs the published replay is unchanged with the model's defaults
as the truth (of twenty jittered replays one gained, 4.95 → 4.53 h, and one lost, 4.59 → 4.70
h), and with a tenant cost 50 % above the prior's its makespan went from 5.55 to 4.60 h.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpudesk.core.records import JobRecord
from gpudesk.policy.placement_pass import Pass
from gpudesk.policy.policy import RESERVE_MIB, GpuState
from gpudesk.policy.station_fit import Ask


def held_behind(run: Pass, position: int, ask_of: Callable[[JobRecord], Ask]) -> frozenset[int]:
    """The idle GPUs (not held already) the job at `position` leaves to the first multi-GPU job
    in the look-ahead window behind it, which needs `ask_of` it (`held_for_multi`)."""
    idle = run.plan.idle_indices()
    if not idle:  # most of a long queue's jobs meet the station with no idle GPU
        return frozenset()
    free = idle - run.reserved
    if not free:
        return frozenset()
    multi = run.lookahead.multi_behind(position)
    if multi is None:
        return frozenset()
    ask = ask_of(multi)
    whole = sum(g.whole_once_idle for g in run.station.gpu_states)
    return held_for_multi([run.plan.gpus[i] for i in free], ask.gpus, ask.memory_mib, whole)


def held_for_multi(
    idle: Iterable[GpuState], gpus: int, memory_mib: float, whole: int
) -> frozenset[int]:
    """Of the `idle` GPUs, those kept from a one-GPU job for a multi-GPU job behind it that
    needs `gpus` of them with `memory_mib` each: the ones it could start on now, where they
    are exactly as many as it needs (taking one would hold the rest idle) and it needs at
    most half of the station's `whole` GPUs (those that may run a job needing whole GPUs)."""
    if 2 * gpus > whole:
        return frozenset()
    usable = [
        g.index
        for g in idle
        if g.whole_once_idle and g.memory_total_mib - RESERVE_MIB >= memory_mib
    ]
    return frozenset(usable) if len(usable) == gpus else frozenset()
