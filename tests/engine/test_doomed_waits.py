"""Queued jobs that can never start, ended a slice a turn (the rest on the next turns): those
placement fails (`queue.failing`) and those a failed dependency dooms (`queue.doomed`). While
they wait for their slice they wait for nothing: no running preemptible job gives way to one,
none stands at the head of the queue, and each says why it will end, not that it waits for a
GPU. An engine built in this process on a simulated A100 40GB, its loop's turns run here, with
a real preemptible job on its GPU."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineInProcess, wait_for

from gpudesk.core.jobs import JobSpec, JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.engine.offloop import SLICE_JOBS
from gpudesk.paths import Home
from gpudesk.policy.preemption import MAX_ASKERS

HEAVY = {"gpus": 1, "memory_gb": 35, "sm_pct": 95}  # fills the A100 40GB alone
GRACE_S = 0.1  # protected for its first 2 x (grace + restart) = 0.4 s of running


@pytest.fixture
def in_process(home: Home) -> Iterator[EngineInProcess]:
    engine = EngineInProcess(
        home, StationConfig(backend="sim:a100-40gb", slots=1, policy="auto", sample_interval=0.2)
    )
    try:
        engine.engine.telemetry.start()  # the GPU read: GPU jobs wait for a first sample
        yield engine
    finally:
        engine.close()


def running_preemptible(engine: EngineInProcess, workdir: Path) -> int:
    """A low-priority preemptible job filling the GPU, run past its protection, so preempting it
    pays a waiting job of higher priority (its remaining time unknown, taken as its run)."""
    spec = JobSpec(
        name="low",
        command=("sleep", "600"),
        workdir=str(workdir),
        priority=-10,
        preemptible=True,
        preempt_grace_s=GRACE_S,
        **HEAVY,
    )
    (low,) = engine.store.submit([spec])
    engine.engine.recover()

    def started() -> bool:
        engine.engine.due.mark()
        engine.step()
        return engine.store.job(low.id).state is JobState.RUNNING

    wait_for(started, timeout=20.0)
    time.sleep(1.0)
    return low.id


def queue(engine: EngineInProcess, specs: list[JobSpec]) -> list[JobRecord]:
    """Jobs queued as the store had them (impossible ones too: queued before the station
    changed), placement due."""
    jobs = engine.store.submit(specs)
    for job in jobs:
        engine.engine.queue.add(job)
    engine.engine.due.mark()
    return jobs


def preempted_for(engine: EngineInProcess) -> list[int | None]:
    return [live.preempted_for for live in engine.engine.attempts]


def test_jobs_placement_fails_on_a_later_turn_do_not_hold_back_a_preemption_nor_wait(
    in_process: EngineInProcess, tmp_path: Path
) -> None:
    """SLICE_JOBS + MAX_ASKERS jobs of priority 10 asking for 2 GPUs (one here), and one of
    priority 5 that fits where the preemptible job runs: the turn fails SLICE_JOBS of them and
    the low job is preempted for the priority-5 job at once. The failures left for the next turn
    are said as such (BadConstraints, "being failed: ..."), and the priority-5 job is the head
    of the queue. Before, the jobs left to fail filled the rule's MAX_ASKERS and no preemption
    came that turn; each said it waited for a change to the station, code Priority, and the
    priority-5 job too, "8 GPU job(s) ahead" of it."""
    engine = in_process
    low = running_preemptible(engine, tmp_path)
    two = [
        JobSpec(name=f"two{k}", command=("true",), workdir=str(tmp_path), priority=10, gpus=2)
        for k in range(SLICE_JOBS + MAX_ASKERS)
    ]
    *impossible, high = queue(
        engine,
        [*two, JobSpec(name="high", command=("true",), workdir=str(tmp_path), priority=5, **HEAVY)],
    )
    engine.step()
    left = [job for job in impossible if job.id in engine.engine.queue]
    assert len(left) == MAX_ASKERS
    assert preempted_for(engine) == [high.id], f"job {low} not preempted for {high.id}"
    scheduler = engine.engine.scheduler
    assert scheduler.wait_codes([left[0].id, high.id]) == {
        left[0].id: "BadConstraints",
        high.id: "Resources",
    }
    assert scheduler.explain_wait(left[0]).startswith(
        "being failed: the job asks for 2 GPUs but this station has only 1"
    )
    assert "ahead" not in scheduler.explain_wait(high)
    engine.step()  # the rest failed, as before
    assert not any(job.id in engine.engine.queue for job in impossible)
    assert {j.state for j in engine.store.jobs(ids=[j.id for j in impossible])} == {JobState.FAILED}


def test_a_job_whose_dependency_failed_never_preempts_and_waits_on_its_dependency(
    in_process: EngineInProcess, tmp_path: Path
) -> None:
    """A priority-10 GPU job that fits where the preemptible job runs, queued after a job that
    failed, its cancel left for the next turn (SLICE_JOBS jobs of higher priority after the same
    job are cancelled first): no preemption for it, its wait the dependency's ("being
    cancelled", Dependency), never a GPU's; then it is cancelled and the low job runs on."""
    engine = in_process
    low = running_preemptible(engine, tmp_path)
    workdir = str(tmp_path)
    (prep,) = engine.store.submit([JobSpec(name="prep", command=("false",), workdir=workdir)])
    engine.store.finish_queued([(prep.id, "it could never run here")], JobState.FAILED)
    after = [
        JobSpec(name=f"a{k}", command=("true",), workdir=workdir, priority=20, after=(prep.id,))
        for k in range(SLICE_JOBS)
    ]
    spec = JobSpec(
        name="high", command=("true",), workdir=workdir, priority=10, after=(prep.id,), **HEAVY
    )
    *_, high = queue(engine, [*after, spec])
    engine.step()
    assert high.id in engine.engine.queue  # its cancel waits for the next turn's slice
    scheduler = engine.engine.scheduler
    assert scheduler.wait_codes([high.id]) == {high.id: "Dependency"}
    assert scheduler.explain_wait(high) == (
        f"being cancelled: job {prep.id} (prep), which it runs after, failed; it will not run"
    )
    assert preempted_for(engine) == [None]
    engine.step()
    assert engine.store.job(high.id).state is JobState.CANCELLED
    assert preempted_for(engine) == [None]
    assert engine.store.job(low).preemptions == 0
