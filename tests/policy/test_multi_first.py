"""A multi-GPU job that could start now is not kept waiting by a one-GPU job just ahead of it
(gpudesk/policy/multi_first.py): under `auto`, where exactly as many whole GPUs as it needs are
idle, a one-GPU job ahead of it that is not yet due leaves them to it."""

from __future__ import annotations

from dataclasses import replace

import msgspec
from test_collocation import gpu, job, station, tenant  # same folder: on sys.path under pytest

from gpudesk.core.records import JobRecord
from gpudesk.policy.collocation import MAX_OVERTAKES, SharingPolicy
from gpudesk.policy.policy import Decision, MigSlice, StationView
from gpudesk.policy.simulator import Simulation
from gpudesk.policy.trace import Trace, TraceJob

HEAVY, TWO_GPU = 1, 2  # job ids: a compute-heavy one-GPU job, then a two-GPU job behind it


def queue() -> list[JobRecord]:
    return [job(HEAVY, 10, 90), job(TWO_GPU, 10, 90, gpus=2)]


def four_gpus_two_idle() -> StationView:
    return station(gpu(0, tenant(10, 10, 90)), gpu(1, tenant(11, 10, 90)), gpu(2), gpu(3))


def placed(decision: Decision) -> dict[int, tuple[int, ...]]:
    return {p.job_id: p.gpus for p in decision.placements}


def test_the_two_gpu_job_takes_the_two_idle_gpus_and_the_one_gpu_job_waits() -> None:
    decision = SharingPolicy("auto").place(queue(), four_gpus_two_idle())
    assert placed(decision) == {TWO_GPU: (2, 3)}
    assert decision.overtaken == {HEAVY: 1}  # counted: it goes first once due


def test_a_due_one_gpu_job_goes_first() -> None:
    view = msgspec.structs.replace(four_gpus_two_idle(), overtaken={HEAVY: MAX_OVERTAKES})
    assert placed(SharingPolicy("auto").place(queue(), view)) == {HEAVY: (2,)}


def test_with_more_idle_gpus_than_it_needs_both_start() -> None:
    view = station(gpu(0, tenant(10, 10, 90)), gpu(1), gpu(2), gpu(3))
    assert placed(SharingPolicy("auto").place(queue(), view)) == {HEAVY: (1,), TWO_GPU: (2, 3)}


def test_without_a_multi_gpu_job_behind_the_one_gpu_job_starts() -> None:
    view = four_gpus_two_idle()
    assert placed(SharingPolicy("auto").place(queue()[:1], view)) == {HEAVY: (2,)}


def test_not_where_the_multi_gpu_job_could_not_use_them() -> None:
    # one of the idle GPUs is too small for the two-GPU job: nothing is kept for it
    small = replace(gpu(3), memory_total_mib=16 * 1024.0)
    view = station(gpu(0, tenant(10, 10, 90)), gpu(1, tenant(11, 10, 90)), gpu(2), small)
    two_gpu = job(TWO_GPU, 20, 90, gpus=2)
    assert list(placed(SharingPolicy("auto").place([job(HEAVY, 10, 90), two_gpu], view))) == [HEAVY]


def test_not_where_it_needs_more_than_half_the_whole_gpus() -> None:
    # three whole GPUs and one in MIG mode: a two-GPU job takes more than half of them, and the
    # rule raised idle time there (docs/benchmarks.md), so the one-GPU job goes first
    mig = replace(
        gpu(3),
        mig_enabled=True,
        mig_slices=(MigSlice("MIG-3-0", "3g.20gb", 20 * 1024.0, 3, busy=True),),
    )
    view = station(gpu(0, tenant(10, 10, 90)), gpu(1), gpu(2), mig)
    assert placed(SharingPolicy("auto").place(queue(), view)) == {HEAVY: (1,)}


def test_forced_modes_keep_queue_order() -> None:
    assert placed(SharingPolicy("mps").place(queue(), four_gpus_two_idle())) == {HEAVY: (2,)}


def _heavy(job_id: int, minutes: float, at_s: float = 0.0, gpus: int = 1) -> TraceJob:
    return TraceJob(job_id, f"j{job_id}", at_s, gpus, minutes * 60, 20 * 1024.0, 90.0, "heavy", {})


def test_simulated_no_gpu_stands_held_and_the_day_ends_sooner() -> None:
    """Four A100s: two 100-minute jobs and two 30-minute ones start at once; two 60-minute
    one-GPU jobs and a 60-minute two-GPU job arrive behind them (one-GPU, two-GPU, one-GPU).
    At 30 minutes two GPUs free: under `auto` the two-GPU job starts on them (30-90) and the
    one-GPU jobs take them after it (90-150). In queue order (forced MPS) the first one-GPU job
    takes one at 30 and the other stands idle, held for the two-GPU job, until 90 (90-150); the
    last job waits for a 100-minute one to end (100-160)."""
    trace = Trace(
        "multi-first",
        "sim:dgx-station-a100",
        (
            _heavy(1, 100),
            _heavy(2, 100),
            _heavy(3, 30),
            _heavy(4, 30),
            _heavy(5, 60, at_s=60),
            _heavy(6, 60, at_s=120, gpus=2),
            _heavy(7, 60, at_s=180),
        ),
    )
    starts: dict[str, dict[int, int]] = {}
    makespans: dict[str, int] = {}
    for policy in ("auto", "mps"):
        sim = Simulation(trace, policy=policy)
        makespans[policy] = round(sim.run().makespan_s / 60)
        starts[policy] = {o.job_id: round(o.start_s / 60) for o in sim.occupancies}
    assert [starts["auto"][i] for i in (6, 5, 7)] == [30, 90, 90]
    assert [starts["mps"][i] for i in (5, 6, 7)] == [30, 90, 100]
    assert makespans == {"auto": 150, "mps": 160}
