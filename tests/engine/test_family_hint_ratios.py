"""A memory hint corrected by how far its command family's hints were off, in the engine: the
ratio is learned when a hinted run's memory settles, kept in the store (schema 16) across a
restart, and a later member's placement shows the corrected figure and where it came from.
Only hints that were too large are corrected (gpudesk/policy/hint_correction.py)."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import msgspec
import pytest
from conftest import EngineHandle, wait_for

from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.engine.job_demand import JobDemand
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.engine.store.database import Store
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.paths import Home
from gpudesk.policy.command_family import family
from gpudesk.policy.hint_correction import CORRECTED_SOURCE
from gpudesk.units import MIB_PER_GB


def settle(
    store: Store, demands: JobDemand, spec: JobSpec, peak_mib: float
) -> tuple[JobRecord, AttemptRecord]:
    """A run of `spec` whose memory settled at `peak_mib` (seen 61 s after its peak)."""
    (job,) = store.submit([spec])
    attempt = store.start_attempt(job.id, {"slot": "gpu:0"}, Path("/nonexistent"))
    live = LiveAttempt(attempt, pid=0, start_time=None, slot="gpu:0", gpus=(0,))
    usage = AttemptUsage(attempt.id, job.id, gpu_memory_peak_mib=peak_mib, gpu_memory_peak_at=0.0)
    demands.watch([live], {attempt.id: usage}, now=61.0)
    return job, attempt


def test_a_runs_ratio_is_raised_to_the_peak_it_held_by_its_end(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    try:
        demands = JobDemand(store)
        hint = 8.0 * MIB_PER_GB
        job, attempt = settle(store, demands, member("0.1", 8.0), 0.4 * hint)
        assert [r[2] for r in store.family_hint_ratios()] == [pytest.approx(0.4)]
        grown = AttemptUsage(attempt.id, job.id, gpu_memory_peak_mib=0.5 * hint)
        demands.ended(store.job(job.id), attempt, grown, 100.0, succeeded=True)
        assert [r[2] for r in store.family_hint_ratios()] == [pytest.approx(0.5)]
    finally:
        store.close()


def member(lr: str, memory_gb: float | None, sm_pct: float | None = None) -> JobSpec:
    command = ("python", "train.py", "--lr", lr)
    return JobSpec(name=lr, command=command, workdir="/w", memory_gb=memory_gb, sm_pct=sm_pct)


def test_two_sizes_settled_correct_the_next_members_hint_across_a_restart(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    try:
        demands = JobDemand(store)
        settle(store, demands, member("0.1", 8.0), 0.5 * 8.0 * MIB_PER_GB)
        (third,) = store.submit([member("0.3", 28.0)])
        assert demands.of(third).source == "hint"  # one size says nothing of the next
        assert not demands.corrects(third)
        settle(store, demands, member("0.2", 16.0), 0.45 * 16.0 * MIB_PER_GB)
        key = f"{os.getuid()}:{family(('python', 'train.py', '--lr', '0.1'), '/w')}"
        assert sorted(store.family_hint_ratios()) == [
            (key, round(8.0 * MIB_PER_GB), pytest.approx(0.5)),
            (key, round(16.0 * MIB_PER_GB), pytest.approx(0.45)),
        ]
        for engine in (demands, JobDemand(store)):  # the second: an engine restarted
            demand = engine.of(third)
            assert engine.corrects(third)
            assert demand.source == CORRECTED_SOURCE
            assert demand.memory_mib == pytest.approx(0.5 * 28.0 * MIB_PER_GB)
        # another user's member of the same family (a shared folder) is not corrected by these
        # runs: hers never shrink the room another member's jobs are placed for
        other = Identity.of(os.getuid() + 1, os.getgid(), ())
        (theirs,) = store.submit([member("0.3", 28.0)], owner=other)
        assert demands.of(theirs).source == "hint" and not demands.corrects(theirs)
        # an SM hint alone is not a memory hint: the family's measured peak is used as before
        (sm_only,) = store.submit([member("0.4", None, sm_pct=30.0)])
        assert demands.of(sm_only).source == "hint"
        assert demands.of(sm_only).memory_mib == pytest.approx(0.45 * 16.0 * MIB_PER_GB)
    finally:
        store.close()


def ratio_rows(home: Home) -> dict[int, float]:
    conn = sqlite3.connect(f"file:{home.db}?mode=ro", uri=True)
    try:
        return {
            int(r[0]): float(r[1])
            for r in conn.execute("SELECT hint_mib, ratio FROM family_hint_ratios")
        }
    finally:
        conn.close()


SWEEP = [sys.executable, "-c", "import time; time.sleep(30)", "--lr"]


def test_a_live_engine_learns_each_sizes_ratio_and_does_not_raise_a_hint_too_small(
    fast_engine: EngineHandle, home: Home
) -> None:
    """The simulated GPU gives a job its memory hint plus a 512 MiB context: a 2 GB member
    peaks 1.27 x its hint, an 8 GB one 1.07 x. Both ratios are kept; a hint too small is not
    raised (the job's own measurement and its MPS limit take care of it)."""
    first = fast_engine.submit(
        {"name": "a", "command": [*SWEEP, "0.1"], "gpus": 1, "memory_gb": 2.0},
        {"name": "b", "command": [*SWEEP, "0.2"], "gpus": 1, "memory_gb": 8.0},
    )
    for job in first:
        fast_engine.wait_state(job, "running")
    wait_for(lambda: len(ratio_rows(home)) == 2, 15.0, what="both members' ratios")
    small, large = round(2.0 * MIB_PER_GB), round(8.0 * MIB_PER_GB)
    assert ratio_rows(home) == {
        small: pytest.approx((small + 512) / small, rel=0.01),
        large: pytest.approx((large + 512) / large, rel=0.01),
    }
    (third,) = fast_engine.submit(
        {"name": "c", "command": [*SWEEP, "0.3"], "gpus": 1, "memory_gb": 4.0}
    )
    fast_engine.wait_state(third, "running")
    demand = fast_engine.show(third).attempts[0].placement.demand
    assert (demand.source, demand.memory_mib) == ("hint", round(4.0 * MIB_PER_GB))
    fast_engine.client.request("cancel", jobs=[*first, third], grace=0)


def test_an_engine_places_a_member_on_its_familys_corrected_hint(home: Home) -> None:
    """What an earlier engine kept (two sizes whose hints were twice their peaks) is read by
    the next one: a member hinted at 16 GB is placed for 8 GB, and `show` says why."""
    key = f"{os.getuid()}:{family(tuple([*SWEEP, '0.1']), str(home.root))}"
    home.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = Store.open(home.db)
    try:
        store.record_hint_ratio(key, round(2.0 * MIB_PER_GB), 0.5)
        store.record_hint_ratio(key, round(8.0 * MIB_PER_GB), 0.45)
    finally:
        store.close()
    engine = EngineHandle(home)
    engine.start(backend="sim:dgx-station-a100", sample_interval=0.2)
    try:
        (job,) = engine.submit(
            {"name": "c", "command": [*SWEEP, "0.3"], "gpus": 1, "memory_gb": 16.0}
        )
        engine.wait_state(job, "running")
        demand = engine.show(job).attempts[0].placement.demand
        assert demand.source == CORRECTED_SOURCE
        assert demand.memory_mib == round(0.5 * 16.0 * MIB_PER_GB)
        engine.client.request("cancel", jobs=[job], grace=0)
    finally:
        engine.client.close()


def test_an_edited_job_is_judged_by_its_new_command(tmp_path: Path) -> None:
    """A queued job's hint is corrected by the key of its command as it is now: once `gpudesk
    edit` gives it another command, the family of the new one decides."""
    store = Store.open(tmp_path / "db")
    try:
        demands = JobDemand(store)
        settle(store, demands, member("0.1", 8.0), 0.5 * 8.0 * MIB_PER_GB)
        settle(store, demands, member("0.2", 16.0), 0.45 * 16.0 * MIB_PER_GB)
        (job,) = store.submit([member("0.3", 28.0)])
        assert demands.corrects(job) and demands.corrects(job)
        other = JobSpec(name="c", command=("python", "eval.py", "--lr", "0.3"), memory_gb=28.0)
        edited = msgspec.structs.replace(job, spec=other)
        assert not demands.corrects(edited)
        assert demands.of(edited).source == "hint"
    finally:
        store.close()
