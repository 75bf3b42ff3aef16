"""`SharingPolicy.place` decides exactly what a straightforward pass over the queue decides.

`place()` takes shortcuts to stay fast over a long queue (no demand object until a job may fit,
the no-room frontier, whatever else `collocation.py` does to skip jobs that cannot start). The
reference below takes none: every GPU job gets its full demand, its impossibility check and a
full `choose()`. Both run on the inputs `bench/policy.py` times (its seeded generator), and on
those inputs varied to reach the branches the bench does not (CPU jobs, hints taken as unknown,
measured demands with and without a bandwidth figure, another user's MPS server, a GPU in MIG
mode, a lost GPU, jobs overtaken past their budget). Every placement (slot, mode, reason,
limits, alternatives), every rejection and every overtaken count must be equal.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
from conftest import load_module

from gpudesk.core.identity import Identity
from gpudesk.core.records import JobRecord
from gpudesk.policy.collocation import (
    SharingPolicy,
    demand_of,
    given_room,
)
from gpudesk.policy.demand import Demand
from gpudesk.policy.filled_station import FilledStation
from gpudesk.policy.multi_first import held_for_multi
from gpudesk.policy.placement_pass import LOOKAHEAD_PER_GPU, Lookahead
from gpudesk.policy.policy import (
    RESERVE_MIB,
    Decision,
    MigSlice,
    Rejection,
    StationView,
    cpu_placement,
    gpu_job_impossible,
)
from gpudesk.policy.station_fit import AsIs

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024.0


BENCH = load_module("bench_policy", ROOT / "bench" / "policy.py")


def reference_place(
    policy: SharingPolicy, queue: Sequence[JobRecord], station: StationView
) -> Decision:
    """`SharingPolicy.place` without a shortcut: each job judged in full, in queue order."""
    plan = FilledStation({g.index: g for g in station.gpu_states})
    cpu_slots = station.free_slots
    rejections: list[Rejection] = []
    overtaken: dict[int, int] = {}
    waiting: JobRecord | None = None
    reserved: set[int] = set()
    reserved_for: int | None = None
    lookahead = Lookahead(queue, station)
    as_is = AsIs(policy.rules, station)
    for position, job in enumerate(queue):
        gpus = job.spec.gpus
        if not gpus:
            if cpu_slots:
                plan.placements.append(cpu_placement(job, cpu_slots.pop(0), station))
            continue
        demand = demand_of(job, station)
        measured = demand.source == "after OOM"
        impossible = gpu_job_impossible(gpus, demand.memory_mib, station, RESERVE_MIB, measured)
        if impossible:
            rejections.append(Rejection(job.id, f"the job {impossible}"))
            continue
        if (
            waiting is not None
            and not reserved
            and station.overtaken.get(waiting.id, 0) + overtaken.get(waiting.id, 0)
            >= policy.overtake_budget(waiting)
        ):
            reserved = policy.reserve(waiting, station, plan.gpus.values())
            reserved_for = waiting.id
        held = held_for_multi_here(policy, job, position, queue, station, plan, reserved, overtaken)
        choice = policy.choose(
            job,
            demand,
            plan,
            station,
            exclude=reserved | held,
            behind=functools.partial(lookahead.behind, position),
        )
        if choice is None:
            whole = policy._whole(gpus, demand.exclusive)
            if waiting is None and as_is(gpus, whole, demand.admit_mib):
                waiting = job
            continue
        plan.take(job, given_room(demand, choice), choice, station)
        if waiting is not None:
            overtaken[waiting.id] = overtaken.get(waiting.id, 0) + 1
    held = dict.fromkeys(reserved, reserved_for) if reserved_for is not None else {}
    return Decision(plan.placements, rejections, overtaken, held)


def held_for_multi_here(
    policy: SharingPolicy,
    job: JobRecord,
    position: int,
    queue: Sequence[JobRecord],
    station: StationView,
    plan: FilledStation,
    reserved: set[int],
    overtaken: dict[int, int],
) -> frozenset[int]:
    """multi_first, written out: under `auto`, the idle GPUs a one-GPU job that is not yet due
    leaves to the first multi-GPU job within the look-ahead window behind it."""
    due = station.overtaken.get(job.id, 0) + overtaken.get(job.id, 0) >= policy.overtake_budget(job)
    if policy.name != "auto" or job.spec.gpus != 1 or due:
        return frozenset()
    window = queue[position + 1 : position + 1 + LOOKAHEAD_PER_GPU * len(station.gpu_states)]
    multi = next((j for j in window if j.spec.gpus > 1), None)
    if multi is None:
        return frozenset()
    ask = policy.ask(multi, demand_of(multi, station))
    idle = [g for g in plan.gpus.values() if g.idle and g.index not in reserved]
    return held_for_multi(
        idle, ask.gpus, ask.memory_mib, sum(g.whole_once_idle for g in station.gpu_states)
    )


def varied(
    rng: random.Random, queue: list[JobRecord], view: StationView
) -> tuple[list[JobRecord], StationView]:
    """The bench's inputs with what it leaves out: CPU jobs, hints at or above the share taken
    as unknown (and above a GPU), measured demands (some with a bandwidth figure), a second
    user, another user's MPS server, a GPU in MIG mode (fixed or carvable), a lost GPU, and
    jobs overtaken up to and past their budget."""
    other = Identity.of(4242, 4242, [4242])
    jobs = []
    demands: dict[int, Demand] = dict(view.demands)
    for job in queue:
        spec, owner = job.spec, job.owner
        draw = rng.random()
        if draw < 0.05:
            spec = msgspec.structs.replace(spec, gpus=0)
        elif draw < 0.10:
            spec = msgspec.structs.replace(
                spec, memory_gb=rng.uniform(37.0, 60.0)
            )  # taken as unknown
        elif draw < 0.15:
            spec = msgspec.structs.replace(spec, memory_gb=None, sm_pct=None)  # the defaults
        elif draw < 0.22:
            membw = rng.choice((None, 20.0, 60.0))
            demands[job.id] = Demand(
                rng.uniform(1, 42) * GIB, spec.sm_pct or 50.0, "history", membw_pct=membw
            )
        if rng.random() < 0.2:
            owner = other
        jobs.append(msgspec.structs.replace(job, spec=spec, owner=owner))
    gpus = list(view.gpu_states)
    last = gpus[-1]
    if rng.random() < 0.5:
        slices = (
            MigSlice("MIG-a", "3g.20gb", 20096, 3, busy=rng.random() < 0.5),
            MigSlice("MIG-b", "1g.5gb", 4864, 1),
        )
        gpus[-1] = replace(
            last, tenants=(), mig_enabled=True, mig_slices=slices, mig_dynamic=rng.random() < 0.5
        )
    if rng.random() < 0.3:
        gpus[0] = replace(gpus[0], lost=True)
    if rng.random() < 0.5:
        # another user's MPS clients on a shared GPU
        for i, gpu in enumerate(gpus):
            if gpu.tenants and not gpu.lost and not gpu.mig_enabled:
                tenants = tuple(replace(t, uid=other.uid + 1) for t in gpu.tenants)
                gpus[i] = replace(gpu, tenants=tenants)
                break
    overtaken = {j.id: rng.choice((0, 3, 7, 8, 12)) for j in rng.sample(jobs, min(5, len(jobs)))}
    return jobs, msgspec.structs.replace(
        view, gpu_states=tuple(gpus), demands=demands, overtaken=overtaken
    )


@pytest.mark.parametrize(("jobs", "rounds"), [(12, 60), (120, 25), (1000, 4)])
def test_place_decides_what_the_straightforward_pass_decides(jobs: int, rounds: int) -> None:
    rng = random.Random(jobs)
    policies = [SharingPolicy("auto"), SharingPolicy("mps"), SharingPolicy("naive")]
    for index in range(rounds):
        queue = BENCH.queue(rng, jobs)
        view = BENCH.station(rng, 8, queue)
        if index % 2:
            queue, view = varied(rng, queue, view)
        for policy in policies:
            assert policy.place(queue, view) == reference_place(policy, queue, view), (
                f"{policy.name}, round {index}"
            )
