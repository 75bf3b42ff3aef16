"""At the queue's tail, finishing beats throughput: a job the robust rule leaves waiting may join
tenants where it finishes sooner than by waiting.

`auto` shares a GPU only where the station gains work per second even with the sharing
mechanism's costs at the top of their range (the robust rule, `FilledStation.score`). That is
right while jobs queue behind: a job that waits now runs later on capacity another job would
otherwise use, so the station loses nothing by its wait. At the tail it is wrong. When no more
jobs wait than there are GPUs, the capacity a job waits for would otherwise stand idle: a
sweep's last two members waiting for GPUs to drain, then running alone on two of them while
the others idle, end the day later than if each had joined three tenants at once (the bundled
sweep day with one GPU in MIG mode: 7.12 h under `auto` against 6.80 h under forced MPS).

So, where the robust rule leaves a job waiting and the tail holds, the job joins a GPU's shared
tenants if, with the costs at the top of their range,

- it finishes there before it would by waiting for the first whole GPU to drain and then
  running alone (`drain + W`, the most waiting can give it), and
- every tenant it slows still finishes before then,

and the model at its own values still says the station gains there. `W` is the job's expected
run time, measured by the engine for its command family (`StationView.run_time_of`), never what
the job says; the tenants' remaining times and the drains are the engine's own measurements
too (their families' run times: `Remaining.measured_s`, kept for a job that prints progress
lines as for one that does not), never a job's progress lines,
which its owner writes: on a system engine root decides for one member, and another's word
must not move it. Where any of these is unknown the job waits, as before.
Of the GPUs that qualify it takes the one where it finishes first.

Judged by `bench/trace_jitter.py`'s replays (docs/benchmarks.md): the sweep day with a MIG GPU
1.064 → 1.047 × the lower bound (median), losing to forced MPS in 12 of 12 replays → 0; the
rest unchanged or within a replay's noise.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import msgspec

from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import Demand, margin_mib
from gpudesk.policy.filled_station import SHARED, Choice, FilledStation, Host
from gpudesk.policy.interference import workload
from gpudesk.policy.placement_reasons import collocated_reason, foreign_reason
from gpudesk.policy.policy import StationView
from gpudesk.policy.rates import Prediction
from gpudesk.policy.remaining import trusted_drain_s
from gpudesk.render import duration


class TailJoin(msgspec.Struct, frozen=True):
    """Why a tail join pays: the job's finish there and waiting's, and its tenants' latest."""

    gpu: int
    finish_s: float  # the job's, joining now (the costs at the top of their range)
    tenants_s: float  # the latest of its tenants' ends, slowed by it (0: none known to end)
    wait_s: float  # waiting for the first whole GPU to drain, then running alone
    drains: int  # the GPU that drains first


def at_tail(queued_after: int, station: StationView) -> bool:
    """No more jobs wait (this one and those behind it) than there are whole GPUs: what a job
    waits for would stand idle rather than serve another job."""
    if queued_after >= len(station.gpu_states):
        return False  # (a long queue's jobs: no count of the GPUs on the placement hot path)
    return queued_after + 1 <= sum(1 for g in station.gpu_states if g.runs_whole)


def first_drain(station: StationView) -> tuple[float, int] | None:
    """When the first whole GPU is expected to drain by the engine's own measurements, and
    which (None: no GPU's end known so)."""
    known = [
        (drain, g.index)
        for g in station.gpu_states
        if g.runs_whole and (drain := trusted_drain_s(g.tenants)) is not None
    ]
    return min(known) if known else None


def tail_join(
    job: JobRecord,
    demand: Demand,
    plan: FilledStation,
    station: StationView,
    hosts: Sequence[Host],
) -> Choice | None:
    """The shared GPU where the job, joining now, finishes first and before waiting would
    give it (module doc), or None: it waits."""
    if demand.unknown or demand.exclusive or job.spec.gpus != 1:
        return None
    expected = station.run_time_of(job)
    drain = first_drain(station)
    if expected is None or drain is None:
        return None
    wait_s = drain[0] + expected
    margin = margin_mib(demand)
    best: tuple[TailJoin, Host, Prediction] | None = None
    for host in hosts:
        if host.kind != SHARED or not host.worst_params:
            continue
        if demand.memory_mib + margin > host.room_mib or (demand.heavy and host.heavy_tenant):
            continue
        nominal = plan.joining(host)(workload(demand.sm_pct, demand.membw_pct, host.params))
        if nominal.gain <= 0.0:
            continue  # even at the model's values the station loses
        params = host.worst_params[host.share]
        worst = plan.worst(host)(workload(demand.sm_pct, demand.membw_pct, params))
        finish = expected / max(worst.rate, 1e-9)
        tenants = slowed_ends(host, worst)
        if finish >= wait_s or tenants is None or tenants >= wait_s:
            continue
        if best is None or finish < best[0].finish_s:
            best = (TailJoin(host.gpu.index, finish, tenants, wait_s, drain[1]), host, nominal)
    if best is None:
        return None
    why, host, nominal = best
    return Choice(
        (host.gpu.index,),
        host.share,
        "",
        why=functools.partial(tail_reason, host, demand, nominal, margin, why, job.owner.uid),
        free_mib=host.room_mib,
        rate=nominal.rate,
        value=nominal.gain,
        rank=(1.0, -host.room_mib, host.gpu.index),
    )


def slowed_ends(host: Host, worst: Prediction) -> float | None:
    """The latest end of the host's shared tenants, each slowed from its rate before to its
    rate beside the job (the costs at the top of their range); None where a tenant's remaining
    time is unknown or only its own word."""
    shared = [t for t in host.gpu.tenants if t.mode in ("mps", "naive")]
    latest = 0.0
    for tenant, before, after in zip(
        shared, worst.tenants_before, worst.tenants_after, strict=True
    ):
        remaining = tenant.measured_remaining_s
        if remaining is None:
            return None
        latest = max(latest, remaining * before / max(after, 1e-9))
    return latest


def tail_reason(
    host: Host,
    demand: Demand,
    nominal: Prediction,
    margin: float,
    why: TailJoin,
    uid: int | None,
) -> str:
    """The placement's reason: the model's view (time-sliced where another user's MPS server
    holds the GPU), then why it joins though the robust rule would have it wait."""
    shared = collocated_reason(host.gpu, host.share, demand, nominal, margin)
    if host.mps_user is not None and uid is not None:
        shared = foreign_reason(host.gpu, uid, shared)
    tenants = f", its tenants by {duration(why.tenants_s)}" if why.tenants_s else ""
    return (
        f"{shared}; at the queue's tail: with sharing's costs at the top of their range it "
        f"finishes in {duration(why.finish_s)}{tenants}, before waiting for GPU {why.drains} "
        f"to drain and running alone ({duration(why.wait_s)})"
    )
