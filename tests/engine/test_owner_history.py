"""What earlier runs measured is kept per owner (schema 17): on a system engine one member's
runs of a command in a shared folder never set the memory another member's hint-less job is
placed with, nor her remaining-time estimate; her own later runs are given them. A version-16
store's history is re-keyed to the owners whose jobs it holds when it migrates. The members are
uids in the job records (no real users needed), as a system engine stores them."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec
from gpudesk.engine.job_demand import JobDemand
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import MIGRATIONS, SCHEMA_VERSION
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.policy.command_family import family, owner_key
from gpudesk.policy.demand import signature
from gpudesk.policy.demand_history import FAMILY_SOURCE

ADA = Identity.of(os.getuid() + 1, os.getgid(), ())
BOB = Identity.of(os.getuid() + 2, os.getgid(), ())
SHARED = "/srv/project"  # a folder both members run from


def command(lr: str) -> tuple[str, ...]:
    return ("python", "train.py", "--lr", lr)


def spec(lr: str) -> JobSpec:
    return JobSpec(name=lr, command=command(lr), workdir=SHARED)  # no hints


def succeed(
    store: Store, demands: JobDemand, owner: Identity, lr: str, peak: float, run_s: float
) -> None:
    """A run of `owner`'s whose memory settled at `peak` MiB and that succeeded after `run_s`."""
    (job,) = store.submit([spec(lr)], owner=owner)
    attempt = store.start_attempt(job.id, {"slot": "gpu:0"}, Path("/nonexistent"))
    live = LiveAttempt(attempt, pid=0, start_time=None, slot="gpu:0", gpus=(0,))
    usage = AttemptUsage(
        attempt.id,
        job.id,
        gpu_memory_peak_mib=peak,
        gpu_memory_peak_at=0.0,
        gpu_sm_total=30.0,
        gpu_sm_samples=1,
    )
    demands.watch([live], {attempt.id: usage}, now=61.0)
    demands.ended(store.job(job.id), attempt, usage, run_s, succeeded=True)


def test_one_members_runs_never_set_anothers_demand_or_remaining_time(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    try:
        demands = JobDemand(store)
        succeed(store, demands, ADA, "0.1", 6000.0, 300.0)
        for engine in (demands, JobDemand(store)):  # the second: an engine restarted
            # bob's hint-less run of the very command ada ran, and of a member of its family
            (same, member) = store.submit([spec("0.1"), spec("0.2")], owner=BOB)
            assert engine.of(same).source == "default"
            assert engine.of(member).source == "default"
            assert engine.typical_run_s(same) is None  # her run time is not his estimate
            # ada's own later runs are given what hers measured
            (again, sibling) = store.submit([spec("0.1"), spec("0.2")], owner=ADA)
            assert (engine.of(again).source, engine.of(again).memory_mib) == ("history", 6000.0)
            assert (engine.of(sibling).source, engine.of(sibling).memory_mib) == (
                FAMILY_SOURCE,
                6000.0,
            )
            assert engine.typical_run_s(again) == pytest.approx(300.0)
        # bob's own run is his history, beside hers: neither raises the other's figure
        succeed(store, demands, BOB, "0.1", 9000.0, 100.0)
        (his,) = store.submit([spec("0.1")], owner=BOB)
        (hers,) = store.submit([spec("0.1")], owner=ADA)
        assert demands.of(his).memory_mib == 9000.0 and demands.of(hers).memory_mib == 6000.0
        assert demands.typical_run_s(his) == pytest.approx(100.0)
        assert demands.typical_run_s(hers) == pytest.approx(300.0)
    finally:
        store.close()


def version_16_store(path: Path) -> None:
    """A store as schema 16 left it: histories keyed by command and family alone, filled by
    ada's and bob's runs in a shared folder and by a job stored before owners (schema 7)."""
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:16]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 16")
    jobs = (  # owner, lr, its run time (succeeded), whether its peak settled
        (ADA.uid, "0.1", 100.0, True),
        (BOB.uid, "0.2", 300.0, True),
        (BOB.uid, "0.3", None, False),  # failed before it settled: measured nothing
        (None, "7", 50.0, False),  # the engine's own user's (no owner stored)
    )
    for uid, lr, ran, settled in jobs:
        conn.execute(
            "INSERT INTO jobs (name, spec, state, priority, submitted_at, attempts, owner_uid) "
            "VALUES ('s', ?, ?, 0, 1.0, 1, ?)",
            (json.dumps(spec(lr).to_dict()), "failed" if ran is None else "succeeded", uid),
        )
        job_id = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        conn.execute(
            "INSERT INTO attempts (job_id, number, state, placement, dir, started_at, ended_at)"
            " VALUES (?, 1, 'exited', '{}', '/tmp/x', 10.0, ?)",
            (job_id, 10.0 + (ran or 1.0)),
        )
        if settled:
            conn.execute(
                "INSERT INTO events (ts, job_id, attempt, kind) VALUES (1.0, ?, 1, 'history')",
                (job_id,),
            )
    for lr, memory in (("0.1", 4000.0), ("0.2", 8000.0), ("7", 2000.0)):
        conn.execute(
            "INSERT INTO demand_history VALUES (?, ?, 40.0, 1, 1.0)",
            (signature(command(lr), SHARED), memory),
        )
    conn.execute("INSERT INTO demand_history VALUES ('gone', 100.0, 10.0, 1, 1.0)")
    # the family both ran: the larger peak, and the mean of all three run times
    conn.execute(
        "INSERT INTO family_history VALUES (?, 8000.0, 40.0, 3, 150.0, 3, 1.0)",
        (family(command("0.1"), SHARED),),
    )
    conn.commit()
    conn.close()


def test_a_version_16_stores_history_is_kept_for_its_owners(tmp_path: Path) -> None:
    version_16_store(tmp_path / "db")
    store = Store.open(tmp_path / "db")
    try:
        assert store.schema_version == SCHEMA_VERSION >= 17
        own = os.getuid()
        assert store.demand_history() == {
            owner_key(ADA.uid, signature(command("0.1"), SHARED)): (4000.0, 40.0, 1),
            owner_key(BOB.uid, signature(command("0.2"), SHARED)): (8000.0, 40.0, 1),
            owner_key(own, signature(command("7"), SHARED)): (2000.0, 40.0, 1),
            owner_key(own, "gone"): (100.0, 10.0, 1),  # no job: the engine's own user's
        }
        kin = family(command("0.1"), SHARED)
        rows = store.family_history()
        assert set(rows) == {owner_key(uid, kin) for uid in (ADA.uid, BOB.uid, own)}
        # the peaks cannot be split: each keeps the largest; the run times are each one's own
        assert all((r.memory_mib, r.runs) == (8000.0, 3) for r in rows.values())
        assert [
            (rows[owner_key(u, kin)].run_s, rows[owner_key(u, kin)].finished)
            for u in (
                ADA.uid,
                BOB.uid,
                own,
            )
        ] == [(100.0, 1), (300.0, 1), (50.0, 1)]
        demands = JobDemand(store)
        (ada_again, bob_same) = store.submit([spec("0.1")], owner=ADA) + store.submit(
            [spec("0.1")], owner=BOB
        )
        assert (demands.of(ada_again).source, demands.of(ada_again).memory_mib) == (
            "history",
            4000.0,
        )
        assert demands.of(bob_same).source == FAMILY_SOURCE  # his own family's, not her command
        assert demands.typical_run_s(bob_same) == pytest.approx(300.0)
        # and the store goes on learning into the re-keyed rows
        succeed(store, demands, ADA, "0.1", 5000.0, 200.0)
        assert store.demand_history()[owner_key(ADA.uid, signature(command("0.1"), SHARED))] == (
            5000.0,
            pytest.approx(35.0),
            2,
        )
        assert store.family_history()[owner_key(ADA.uid, kin)].run_s == pytest.approx(150.0)
    finally:
        store.close()


def test_a_version_18_stores_rates_alone_go_to_the_owners_who_ran_the_command(
    tmp_path: Path,
) -> None:
    # schema 19: a rate alone is read against by its owner's later runs only; a store of 18
    # kept them by command, and gives each to the owners of the jobs that ran it
    conn = sqlite3.connect(tmp_path / "db")
    for script in MIGRATIONS[:18]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 18")
    conn.execute(
        "INSERT INTO jobs (name, spec, state, priority, submitted_at, attempts, owner_uid) "
        "VALUES ('s', ?, 'queued', 0, 1.0, 0, ?)",
        (json.dumps(spec("0.1").to_dict()), ADA.uid),
    )
    theirs, nobodys = signature(command("0.1"), SHARED), signature(("other",), None)
    conn.executemany(
        "INSERT INTO alone_rates (signature, rate, runs, updated_at) VALUES (?, ?, ?, ?)",
        [(theirs, 12.5, 2, 1.0), (nobodys, 3.0, 1, 1.0)],
    )
    conn.commit()
    conn.close()
    store = Store.open(tmp_path / "db")
    assert store.schema_version == SCHEMA_VERSION >= 19
    rates = store.alone_rates()
    assert set(rates) == {owner_key(ADA.uid, theirs), owner_key(os.getuid(), nobodys)}
    assert (rates[owner_key(ADA.uid, theirs)].rate, rates[owner_key(ADA.uid, theirs)].runs) == (
        12.5,
        2,
    )
    (hers,) = store.jobs()
    assert hers.owner.uid == ADA.uid
    store.close()
