"""A running job's remaining time in the live engine (from its progress lines, else its command
family's history, else unknown), shown by `gpudesk show`; and history by command family: a
sweep's second member starts with what the first measured while the first still runs."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, processes_in_group, wait_for

from gpudesk.core.jobs import JobSpec
from gpudesk.engine.job_demand import JobDemand
from gpudesk.engine.live_attempt import LiveAttempt
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import MIGRATIONS, SCHEMA_VERSION
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.paths import Home
from gpudesk.policy.command_family import family, owner_key
from gpudesk.policy.demand import signature

# 1000 steps at about 100 per second, each line DONE/TOTAL
COUNTING = (
    "import time\n"
    "for step in range(0, 1001, 10):\n"
    "    print(f'progress {step}/1000', flush=True)\n"
    "    time.sleep(0.1)\n"
)


def family_rows(home: Home) -> dict[str, tuple[float | None, int, float | None, int]]:
    conn = sqlite3.connect(f"file:{home.db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT family, memory_mib, runs, run_s, finished FROM family_history")
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}
    finally:
        conn.close()


def test_a_sweeps_second_member_starts_with_what_the_first_measured_while_it_runs(
    fast_engine: EngineHandle, home: Home
) -> None:
    member = [sys.executable, "-c", "import time; time.sleep(12)", "--lr"]
    (first,) = fast_engine.submit({"name": "lr-0.1", "command": [*member, "0.1"], "gpus": 1})
    fast_engine.wait_state(first, "running")
    key = owner_key(os.getuid(), family(tuple([*member, "0.1"]), str(home.root)))
    # the simulator gives a hint-less job 4 GiB plus a 512 MiB context, filled in 3 s
    wait_for(lambda: family_rows(home).get(key, (None,))[0] == 4608, 10.0, what="the peak")
    (second,) = fast_engine.submit({"name": "lr-0.01", "command": [*member, "0.01"], "gpus": 1})
    fast_engine.wait_state(second, "running")
    assert fast_engine.job(first).state == "running"  # the first still runs
    demand = fast_engine.show(second).attempts[0].placement.demand
    assert (demand.source, demand.memory_mib) == ("family history", 4608)
    # the first member's own demand was the default: nothing had measured its family yet
    shown = fast_engine.show(first)
    assert shown.attempts[0].placement.demand.source == "default"
    assert any("settled at 4.5 GiB: kept for its command family" in e.message for e in shown.events)
    fast_engine.client.request("cancel", jobs=[first, second], grace=0)


def test_show_gives_the_remaining_time_from_progress(engine: EngineHandle, gpudesk: Run) -> None:
    (job,) = engine.submit({"name": "counting", "command": [sys.executable, "-c", COUNTING]})
    engine.wait_state(job, "running")
    shown = wait_for(
        lambda: (d := engine.show(job)).remaining and d.remaining.source == "progress" and d,
        10.0,
        what="a remaining time from progress",
    )
    remaining = shown.remaining
    assert remaining.total == 1000 and 0 < remaining.done < 1000
    # about 100 steps a second (less: printing and reading take their time)
    assert 20 < remaining.rate_per_s < 150
    # what is left at that rate, less the time since the engine last read the log (a tick)
    at_read = (1000 - remaining.done) / remaining.rate_per_s
    assert at_read - 2.0 <= remaining.seconds <= at_read
    code, out, _ = gpudesk("show", str(job))
    assert code == 0
    assert "remaining  ~" in out and "(from its progress: " in out and "/1000 at " in out
    # the listing carries it too (`show`'s is the same), and `queue --long` shows it as LEFT
    (listed,) = engine.api.jobs(ids=[job])
    assert listed.remaining is not None and listed.remaining.source == "progress"
    code, out, _ = gpudesk("queue", "--long")
    header, row = out.splitlines()[-2:]
    assert "LEFT" in header.split() and f" {job} " in f" {row}"
    left = row.split()[header.split().index("LEFT")]
    assert left.startswith("~") and left.endswith("s"), out
    engine.client.request("cancel", jobs=[job], grace=0)


def test_show_gives_the_remaining_time_from_the_familys_history_else_unknown(
    engine: EngineHandle, gpudesk: Run
) -> None:
    member = [sys.executable, "-c", "import time; time.sleep(3)", "--seed"]
    (first,) = engine.submit({"name": "seed-1", "command": [*member, "1"]})
    wait_for(lambda: engine.job(first).state == "running", 10.0, what="the first to run")
    unknown = engine.show(first).remaining
    assert unknown is not None and (unknown.source, unknown.seconds) == ("unknown", None)
    code, out, _ = gpudesk("show", str(first))
    assert "remaining  unknown (no progress DONE/TOTAL lines, and no finished run" in out
    code, out, _ = gpudesk("queue", "--long")
    header, row = out.splitlines()[-2:]
    assert row.split()[header.split().index("LEFT")] == "?", out
    assert engine.wait_all_done([first])[0].state == "succeeded"
    assert engine.show(first).remaining is None  # only a running job has one
    (second,) = engine.submit({"name": "seed-2", "command": [*member, "2"]})
    engine.wait_state(second, "running")
    remaining = engine.show(second).remaining
    assert remaining is not None and remaining.source == "history"
    assert 2.5 < remaining.typical_s < 5  # the first's 3 s, and starting and ending it
    assert remaining.seconds == pytest.approx(remaining.typical_s - remaining.elapsed_s, abs=0.5)
    code, out, _ = gpudesk("show", str(second))
    assert code == 0 and "(from its command family's history: its owner's runs take 3 s" in out
    engine.wait_all_done([second])


def test_an_older_store_keeps_its_history_by_family(tmp_path: Path) -> None:
    """A version-12 store's measured demand (by exact command) and its jobs' run times fill
    the family history when it migrates; a row no stored job matches stays for its command."""
    conn = sqlite3.connect(tmp_path / "db")
    for script in MIGRATIONS[:12]:
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 12")
    for lr, memory, runs, ran in (("0.1", 4000.0, 1, 100.0), ("0.01", 6000.0, 3, 200.0)):
        spec = JobSpec(name="s", command=("python", "t.py", "--lr", lr), workdir="/w")
        conn.execute(
            "INSERT INTO jobs (name, spec, state, priority, submitted_at, attempts) "
            "VALUES ('s', ?, 'succeeded', 0, 1.0, 1)",
            (json.dumps(spec.to_dict()),),
        )
        job_id = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        conn.execute(
            "INSERT INTO attempts (job_id, number, state, placement, dir, started_at, ended_at)"
            " VALUES (?, 1, 'exited', '{}', '/tmp/x', 10.0, ?)",
            (job_id, 10.0 + ran),
        )
        conn.execute(
            "INSERT INTO demand_history VALUES (?, ?, 40.0, ?, 1.0)",
            (signature(spec.command, spec.workdir), memory, runs),
        )
    conn.execute("INSERT INTO demand_history VALUES ('gone', 100.0, 10.0, 1, 1.0)")
    conn.commit()
    conn.close()
    store = Store.open(tmp_path / "db")
    try:
        assert store.schema_version == SCHEMA_VERSION >= 13
        # a personal engine's store: every row is its user's (schema 17)
        record = store.family_history()[
            owner_key(os.getuid(), family(("python", "t.py", "--lr", "1"), "/w"))
        ]
        assert (record.memory_mib, record.runs, record.finished) == (6000.0, 4, 2)
        assert record.run_s == pytest.approx(150.0) and record.sm_pct == pytest.approx(40.0)
        gone = owner_key(os.getuid(), "gone")
        assert store.demand_history()[gone] == (100.0, 10.0, 1)  # still read for its command
    finally:
        store.close()


def test_a_settled_peak_is_counted_once_across_an_engine_restart(tmp_path: Path) -> None:
    """Recorded when it settled; an engine restarted while the attempt runs sees the event of
    the same transaction and neither counts it again nor counts its end as a new run."""
    store = Store.open(tmp_path / "db")
    try:
        command = ("python", "train.py", "--lr", "0.1")
        (job,) = store.submit([JobSpec(name="s", command=command, workdir="/w")])
        attempt = store.start_attempt(job.id, {"slot": "gpu:0"}, tmp_path)
        live = LiveAttempt(attempt, pid=0, start_time=None, slot="gpu:0", gpus=(0,))
        usage = {
            attempt.id: AttemptUsage(
                attempt.id, job.id, gpu_memory_peak_mib=4608.0, gpu_memory_peak_at=0.0
            )
        }
        key = owner_key(os.getuid(), family(command, "/w"))
        JobDemand(store).watch([live], usage, now=1.0)  # not settled yet (60 s)
        assert key not in store.family_history()
        JobDemand(store).watch([live], usage, now=61.0)
        assert store.family_history()[key].runs == 1
        restarted = JobDemand(store)
        restarted.watch([live], usage, now=200.0)
        assert store.family_history()[key].runs == 1
        restarted.ended(store.job(job.id), attempt, usage[attempt.id], 300.0, succeeded=True)
        record = store.family_history()[key]
        assert (record.runs, record.finished, record.run_s) == (1, 1, 300.0)
        assert [e.kind for e in store.events(job.id)].count("history") == 1
    finally:
        store.close()


def test_a_runs_time_suspended_is_not_learned_when_it_ends_while_no_engine_runs(
    engine: EngineHandle, home: Home, tmp_path: Path
) -> None:
    """Its command family learns how long it ran less its suspension, as its time limit counts
    it: here it ends while the engine is down, and the next engine settles it by the wall
    clock (before, that counted the 2 s it spent suspended as running)."""
    gate = tmp_path / "gate"
    waits = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)"
    command = [sys.executable, "-c", waits, str(gate)]
    (job,) = engine.submit({"name": "paused", "command": command})
    pgid = engine.wait_state(job, "running").pgid
    assert pgid and engine.api.suspend([job])[0].outcome == "suspended"
    suspended = time.time()
    wait_for(lambda: time.time() > suspended + 2.0, 10.0, what="2 s suspended")
    assert engine.api.resume([job])[0].outcome == "resumed"
    engine.stop()
    gate.touch()  # it ends while no engine runs
    wait_for(lambda: not processes_in_group(pgid), 10.0, what="the job to end")
    engine.start()
    assert engine.wait_state(job, {"succeeded", "failed"}).state == "succeeded"
    conn = sqlite3.connect(f"file:{home.db}?mode=ro", uri=True)
    try:
        started, ended, paused = conn.execute(
            "SELECT started_at, ended_at, suspended_s FROM attempts WHERE job_id = ?", (job,)
        ).fetchone()
    finally:
        conn.close()
    assert paused >= 2.0
    run_s = family_rows(home)[owner_key(os.getuid(), family(tuple(command), str(home.root)))][2]
    assert run_s == pytest.approx(ended - started - paused, abs=0.01)
