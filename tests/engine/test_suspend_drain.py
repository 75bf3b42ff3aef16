"""Suspend, resume, signal and drain on a real daemon with real job processes: a suspended job's
processes are stopped (/proc says `T`) and go on when resumed, its time limit does not count the
pause, a cancel reaches it, an engine restart keeps it suspended; a signal reaches a job that
goes on; a drained station starts nothing new until undrained, across a restart too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EngineHandle, processes_in_group, refuses, wait_for
from store_refusal import store_refusing

from gpudesk.api.errors import EngineError

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = None if columns is None else {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env)


def counting(tmp_path: Path, name: str = "counter", **extra: object) -> tuple[dict, Path]:
    """A job that counts into a file, and traps USR1 and TERM into a file of its own."""
    count, said = tmp_path / f"{name}.count", tmp_path / f"{name}.said"
    script = (
        f"trap 'echo usr1 >> {said}' USR1; trap 'echo term >> {said}; exit 7' TERM; "
        f"i=0; while true; do i=$((i+1)); echo $i > {count}; sleep 0.02; done"
    )
    return {"name": name, "command": ["sh", "-c", script], **extra}, count


def states(pgid: int) -> set[str]:
    """The /proc state letter of every process of the group (T: stopped). A shell that
    vforked waits for its child to exec (D, in kernel_clone: wait_for_vfork_done) and goes no
    further while that child is stopped: counted as the child is, T."""
    found = set()
    for proc in processes_in_group(pgid):
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            waits = Path(f"/proc/{proc.pid}/wchan").read_text()
        except OSError:
            continue
        vforked = fields[0] == "D" and ("vfork" in waits or waits == "kernel_clone")
        found.add("T" if vforked else fields[0])
    return found


def read_count(path: Path) -> int:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else 0


def running_job(engine: EngineHandle, job: dict, count: Path) -> tuple[int, int]:
    (job_id,) = engine.submit(job)
    view = engine.wait_state(job_id, "running")
    wait_for(lambda: read_count(count) > 0, what="the job to count")
    assert view.pgid
    return job_id, view.pgid


def test_a_suspended_job_is_stopped_keeps_its_slot_and_goes_on_when_resumed(
    engine: EngineHandle, tmp_path: Path
) -> None:
    job, count = counting(tmp_path)
    job_id, pgid = running_job(engine, job, count)
    assert engine.api.suspend([job_id])[0].outcome == "suspended"
    wait_for(lambda: states(pgid) == {"T"}, what="every process of the job to be stopped")
    view = engine.job(job_id)
    assert (view.state, view.pgid) == ("suspended", pgid)  # still placed: its slot is held
    assert view.suspended_at is not None
    stopped_at = read_count(count)
    assert engine.api.suspend([job_id])[0].outcome == "already suspended"
    assert engine.api.hold([job_id])[0].outcome == "suspended: only a queued job can be held"
    assert engine.api.requeue([job_id])[0].outcome == (
        "suspended: only a finished job can be requeued"
    )
    assert [j.id for j in engine.api.jobs(states=["suspended"])] == [job_id]
    assert [j.id for j in engine.api.jobs(states=["running"])] == [job_id]  # it still runs
    assert read_count(count) == stopped_at  # /proc said T: nothing counted since
    assert engine.api.resume([job_id])[0].outcome == "resumed"
    wait_for(lambda: "T" not in states(pgid), what="the job to continue")
    wait_for(lambda: read_count(count) > stopped_at, what="the job to count again")
    assert engine.job(job_id).state == "running"
    assert engine.api.resume([job_id])[0].outcome == "not suspended"
    kinds = [e.kind for e in engine.show(job_id).events]
    assert "suspend" in kinds and "resume" in kinds
    engine.api.cancel([job_id], grace=5)
    engine.wait_state(job_id, "cancelled")
    assert engine.api.suspend([job_id])[0].ok is False
    [resumed] = engine.api.resume([job_id])
    assert (resumed.outcome, resumed.ok) == (
        "already cancelled: only a suspended job can be resumed",
        False,
    )


def test_a_queued_job_cannot_be_suspended(engine: EngineHandle, tmp_path: Path) -> None:
    blocker = engine.occupy_the_only_slot(tmp_path / "gate")
    (queued,) = engine.submit({"name": "queued", "command": ["true"]})
    [outcome] = engine.api.suspend([queued])
    assert (outcome.outcome, outcome.ok) == ("queued: only a running job can be suspended", False)
    [outcome] = engine.api.resume([queued])
    assert (outcome.outcome, outcome.ok) == ("queued: only a suspended job can be resumed", False)
    (tmp_path / "gate").touch()
    engine.wait_all_done([blocker, queued])


def test_a_cancel_reaches_a_suspended_job(engine: EngineHandle, tmp_path: Path) -> None:
    job, count = counting(tmp_path)
    job_id, pgid = running_job(engine, job, count)
    engine.api.suspend([job_id])
    wait_for(lambda: states(pgid) == {"T"}, what="the job to be stopped")
    engine.api.cancel([job_id], grace=60)  # no SIGKILL within the test: SIGTERM must reach it
    ended = engine.wait_state(job_id, "cancelled")
    assert ended.exit_code == 7  # its TERM trap ran
    assert (tmp_path / "counter.said").read_text() == "term\n"


def test_a_cancel_the_store_refuses_leaves_a_suspended_job_as_it_was(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A cancel of a suspended job writes twice: the cancel, and the job's resume (it is
    continued to see its SIGTERM). Both go in one transaction, before any signal: where the
    store refuses the second (a real SQLite trigger refusing the resume, as a disk that fills
    between two writes would), nothing is stored and nothing sent, the job stays stopped and
    suspended, here as in the store; once the store takes it, the cancel goes through. (Before,
    the cancel was stored and SIGTERM and SIGCONT sent, and the engine went on thinking the
    job suspended, with no SIGKILL to follow.)"""
    job, count = counting(tmp_path)
    job_id, pgid = running_job(engine, job, count)
    engine.api.suspend([job_id])
    wait_for(lambda: states(pgid) == {"T"}, what="the job to be stopped")
    refused = "BEFORE UPDATE OF suspended_s ON attempts"
    with store_refusing(engine.home.db, refused, "the store refuses the resume"):
        with pytest.raises(EngineError):
            engine.api.cancel([job_id], grace=60)
        assert states(pgid) == {"T"}  # no SIGCONT reached it
        view = engine.job(job_id)
        assert (view.state, view.cancel_requested) == ("suspended", False), view
        assert "cancel" not in [e.kind for e in engine.show(job_id).events]
    engine.api.cancel([job_id], grace=60)  # no SIGKILL within the test: SIGTERM must reach it
    ended = engine.wait_state(job_id, "cancelled")
    assert ended.exit_code == 7  # its TERM trap ran, once
    assert (tmp_path / "counter.said").read_text() == "term\n"
    kinds = [e.kind for e in engine.show(job_id).events]
    assert kinds.count("cancel") == 1 and kinds.count("resume") == 1, kinds


def test_the_time_limit_does_not_count_suspended_time(engine: EngineHandle, tmp_path: Path) -> None:
    job, count = counting(tmp_path, time_limit_s=2)
    job_id, pgid = running_job(engine, job, count)
    engine.api.suspend([job_id])
    wait_for(lambda: states(pgid) == {"T"}, what="the job to be stopped")
    started = engine.job(job_id).started_at
    assert started is not None
    wait_for(lambda: time.time() > started + 3.0, timeout=10, what="its time limit to pass")
    assert engine.job(job_id).state == "suspended"  # 3 s since it started, 2 s allowed
    engine.api.resume([job_id])
    ended = engine.wait_state(job_id, "failed", timeout=30)
    assert "time limit" in (ended.reason or "")
    assert ended.ended_at is not None and ended.ended_at - started >= 3.0


def queue_time(job_id: int, *args: str) -> str:
    """`gpudesk queue`'s TIME for the job (no cell before it holds a space)."""
    header, *rows = gpudesk("queue", *args).stdout.splitlines()
    row = next(line.split() for line in rows if line.split()[:1] == [str(job_id)])
    return row[header.split().index("TIME")]


def show_time(job_id: int) -> str:
    """`gpudesk show`'s `time`."""
    words = gpudesk("show", str(job_id)).stdout.split()
    return words[words.index("time") + 1]


def test_time_is_the_run_time_without_the_suspended_spells(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """As squeue's TIME and the time limit count it: a job that ran about 1 s and then sat
    suspended 3 s shows what it ran, in `queue`, `show` and the desk's figure (JobView.run_s),
    not 4 s; resumed, it counts on; ended, its time leaves out every spell it was suspended."""
    from gpudesk.render import duration

    job, count = counting(tmp_path)
    job_id, pgid = running_job(engine, job, count)
    time.sleep(1.0)
    engine.api.suspend([job_id])
    wait_for(lambda: states(pgid) == {"T"}, what="the job to be stopped")
    view = engine.job(job_id)
    assert view.started_at is not None and view.suspended_at is not None
    ran = view.suspended_at - view.started_at
    time.sleep(3.0)
    assert view.run_s() == pytest.approx(ran) and ran < 3.0
    assert queue_time(job_id) == show_time(job_id) == duration(ran)

    engine.api.resume([job_id])
    wait_for(lambda: read_count(count) > 0 and states(pgid) != {"T"}, what="it to go on")
    resumed = engine.job(job_id)
    assert resumed.suspended_s >= 3.0  # the spell it was resumed from, kept for its time limit
    engine.api.cancel([job_id], grace=5)
    ended = engine.wait_state(job_id, "cancelled")
    assert ended.ended_at is not None and ended.suspended_s == resumed.suspended_s
    run = ended.ended_at - ended.started_at - ended.suspended_s
    assert ended.ended_at - ended.started_at >= 4.0 and run < 3.0
    assert queue_time(job_id, "--all") == show_time(job_id) == duration(run)
    listed = json.loads(gpudesk("queue", "--all", "--json").stdout)["jobs"]
    assert [j["suspended_s"] for j in listed if j["id"] == job_id] == [ended.suspended_s]
    (attempt,) = engine.show(job_id).attempts
    assert attempt.suspended_s == ended.suspended_s


def test_an_engine_restart_keeps_a_job_suspended(engine: EngineHandle, tmp_path: Path) -> None:
    job, count = counting(tmp_path)
    job_id, pgid = running_job(engine, job, count)
    engine.api.suspend([job_id])
    wait_for(lambda: states(pgid) == {"T"}, what="the job to be stopped")
    engine.stop()
    engine.start()
    assert engine.job(job_id).state == "suspended"
    assert states(pgid) == {"T"}
    stopped_at = read_count(count)
    assert engine.api.resume([job_id])[0].outcome == "resumed"
    wait_for(lambda: read_count(count) > stopped_at, what="the re-adopted job to count again")
    engine.api.cancel([job_id], grace=5)
    engine.wait_state(job_id, "cancelled")


def test_a_signal_reaches_the_job_which_goes_on(engine: EngineHandle, tmp_path: Path) -> None:
    job, count = counting(tmp_path)
    job_id, _ = running_job(engine, job, count)
    said = tmp_path / "counter.said"
    assert engine.api.signal([job_id], "USR1")[0].outcome == "sent SIGUSR1"
    wait_for(lambda: said.exists() and said.read_text() == "usr1\n", what="the trap to run")
    assert engine.job(job_id).state == "running"
    with pytest.raises(EngineError) as raised:
        engine.api.signal([job_id], "KILL")
    assert raised.value.code == "invalid_args" and "gpudesk cancel" in str(raised.value)
    # the CLI: by number, picked as cancel picks (--me --name), and a bad name refused
    done = gpudesk("cancel", "--signal", "10", "--me", "--name", "count*")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: said.read_text() == "usr1\nusr1\n", what="the second USR1")
    refuses(gpudesk("cancel", "--signal", "FOO", str(job_id)), "'FOO' cannot be sent")
    assert engine.job(job_id).state == "running"
    events = [e.message for e in engine.show(job_id).events if e.kind == "signal"]
    assert len(events) == 2 and all(m.startswith("SIGUSR1 sent by ") for m in events)
    engine.api.cancel([job_id], grace=5)
    engine.wait_state(job_id, "cancelled")


def test_a_drained_station_starts_nothing_new_until_undrained(
    engine: EngineHandle, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    (running,) = engine.submit(
        {"name": "running", "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done"]}
    )
    engine.wait_state(running, "running")
    drained = engine.api.drain("swap the PSU")
    assert drained.changed and drained.drain is not None and drained.drain.reason == "swap the PSU"
    assert engine.api.drain("again").changed is False  # the first drain is kept
    (waiting,) = engine.submit({"name": "waiting", "command": ["true"]})  # still accepted
    gate.touch()
    engine.wait_state(running, "succeeded")  # running jobs go on, and the loop turned
    view = engine.job(waiting)
    assert (view.state, view.wait_reason) == ("queued", "Drained")
    assert "drained by" in (engine.show(waiting).waiting or "")
    status = engine.api.status()
    assert status.drain is not None and status.drain.reason == "swap the PSU"
    assert "drained by" in status.station_changes[-1].message
    engine.stop()
    engine.start()
    assert engine.api.status().drain is not None  # kept across the restart
    (later,) = engine.submit({"name": "later", "command": ["true"]})
    assert engine.job(later).state == "queued"
    assert engine.api.status().drain is not None
    assert engine.job(waiting).state == "queued"
    undrained = engine.api.undrain()
    assert undrained.changed and undrained.ended is not None and undrained.drain is None
    engine.wait_all_done([waiting, later])
    assert engine.api.undrain().changed is False
    assert "undrained by" in engine.api.status().station_changes[-1].message


def test_the_commands_say_what_they_did_and_queue_and_top_show_it(
    engine: EngineHandle, tmp_path: Path
) -> None:
    job, count = counting(tmp_path)
    job_id, _ = running_job(engine, job, count)
    done = gpudesk("suspend", str(job_id))
    assert (done.returncode, done.stdout) == (0, f"job {job_id} (counter): suspended\n")
    listed = gpudesk("queue")
    assert f"{job_id}" in listed.stdout and "suspended" in listed.stdout, listed.stdout
    assert "state      suspended since " in gpudesk("show", str(job_id)).stdout
    # top's job lines and the GPU block say it, from a sample taken once it was stopped
    wait_for(
        lambda: (s := engine.api.telemetry().snapshot) and any(j.suspended for j in s.jobs),
        what="a sample of the suspended job",
    )
    row = next(line for line in gpudesk("top", "--once").stdout.splitlines() if "counter" in line)
    assert "SUSPENDED" in row, row
    assert [j["state"] for j in json.loads(gpudesk("queue", "--json").stdout)["jobs"]] == [
        "suspended"
    ]
    done = gpudesk("resume", str(job_id), "--json")
    assert json.loads(done.stdout)["results"][0]["outcome"] == "resumed"
    refuses(gpudesk("suspend", "nosuchjob"), "nosuchjob")
    drained = gpudesk("drain", "--reason", "new disk")
    assert drained.returncode == 0 and drained.stdout.startswith("drained by "), drained
    assert "(new disk)" in drained.stdout
    assert "DRAINED: the station is drained by" in gpudesk("queue").stdout
    assert "DRAINED: the station is drained by" in gpudesk("top", "--once").stdout
    assert "DRAINED: the station is drained by" in gpudesk("engine", "status").stdout
    undrained = gpudesk("undrain")
    assert undrained.stdout.startswith("undrained (it was drained by "), undrained
    again = gpudesk("undrain")
    assert (again.returncode, again.stderr) == (0, "not drained\n")
    assert "DRAINED" not in gpudesk("queue").stdout + gpudesk("engine", "status").stdout
    engine.api.cancel([job_id], grace=5)
    engine.wait_state(job_id, "cancelled")


def test_a_drain_reason_with_a_newline_or_an_escape_stays_on_its_one_line(
    engine: EngineHandle,
) -> None:
    """An admin's reason is shown on one line by `drain`, `queue`, `top` and `engine status`:
    a newline in it would split the DRAINED line (top's layout with it), an escape would
    reach the terminal. Both are spelled out."""
    drained = gpudesk("drain", "--reason", "swap the PSU\nthen \x1b[2Jreboot")
    assert drained.returncode == 0, drained
    said = {
        "drain": drained.stdout,
        # wide: a line folded at the terminal's width is not the reason's newline
        "queue": gpudesk("queue", columns=300).stdout,
        "top": gpudesk("top", "--once").stdout,
        "status": gpudesk("engine", "status").stdout,
    }
    for command, out in said.items():
        line = next(line for line in out.splitlines() if "drained by" in line)
        # top cuts its lines at the terminal's width: the rest of the reason is past it
        whole = "(swap the PSU\\x0athen \\x1b[2Jreboot)"
        assert whole in line if command != "top" else "(swap the PSU\\x0" in line, (command, out)
        assert not any(line.startswith("then") for line in out.splitlines()), (command, out)
        assert "\x1b" not in out, (command, out)
    assert gpudesk("undrain").returncode == 0
