"""Outcome records survive a full disk: a job that fills the disk holding GPUDESK_HOME and exits 0
is recorded succeeded, once; the engine keeps running through it and catches up when space comes
back; an engine started on a full disk says so in one paragraph and loses nothing.

Real: a small tmpfs mounted as GPUDESK_HOME (root only), filled by the job itself or by the test.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import EngineHandle, mounted_tmpfs, wait_for

from gpudesk.cli import emissions
from gpudesk.cli.emissions import EmissionsRow
from gpudesk.hw import runner
from gpudesk.paths import Home

TMPFS_SIZE = "24m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A freshly mounted 24 MiB tmpfs; unmounted after the test whatever happened."""
    with mounted_tmpfs(tmp_path / "disk", f"size={TMPFS_SIZE}") as mnt:
        yield mnt


@pytest.fixture
def disk_engine(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineHandle]:
    """An engine whose GPUDESK_HOME is on the small disk; stopped, its jobs killed, after."""
    root = small_disk / "home"
    monkeypatch.setenv("GPUDESK_HOME", str(root))
    monkeypatch.delenv("GPUDESK_BACKEND", raising=False)
    engine = EngineHandle(Home(root))
    engine.start()
    try:
        yield engine
    finally:
        (small_disk / "filler").unlink(missing_ok=True)
        try:
            engine.stop()
        finally:
            engine.client.close()
            engine.cleanup_jobs()


def fill(path: Path) -> None:
    """Fill the disk holding `path` up to its last byte."""
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=64k"], capture_output=True, check=False)
    assert os.statvfs(path.parent).f_bavail == 0


def fill_beside_the_store(disk: Path, home: Home, name: str) -> None:
    """Fill the disk holding a running engine's store so that nothing the store holds can make
    room. The engine's first write after a checkpoint truncates its WAL (journal_size_limit =
    0), freeing what the WAL held when the disk was filled: an action then finds room (seen in
    whole runs under load). So the WAL is emptied first, as that write would empty it (a
    TRUNCATE checkpoint of the test's own), and the disk filled after; should the engine write
    between the two, both are done again."""
    wal = Path(f"{home.db}-wal")
    for attempt in range(5):
        db = sqlite3.connect(home.db, timeout=10.0)
        try:
            (busy, _, _) = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            db.close()
        filler = disk / f"{name}-{attempt}"
        fill(filler)
        if not busy and wal.stat().st_size == 0:
            return
        filler.unlink()
    raise AssertionError("the engine's WAL was never empty with the disk full")


def runs(marker: Path) -> int:
    return len(marker.read_text().split()) if marker.exists() else 0


def attempt_rows(home: Home, job_id: int) -> list[tuple[int, str, int | None]]:
    db = sqlite3.connect(home.db)
    try:
        rows = db.execute(
            "SELECT number, state, exit_code FROM attempts WHERE job_id = ? ORDER BY number",
            (job_id,),
        )
        return [(int(n), str(s), c) for n, s, c in rows]
    finally:
        db.close()


def wrapper_ended(engine: EngineHandle, job_id: int) -> bool:
    pid = runner.read_wrapper_pid(engine.home.attempt_dir(job_id, 1))
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def test_a_job_that_fills_the_disk_is_recorded_succeeded_and_runs_once(
    disk_engine: EngineHandle, small_disk: Path, tmp_path: Path
) -> None:
    engine = disk_engine
    marker = tmp_path / "runs"  # off the small disk, so counting never fails
    filler = small_disk / "filler"
    script = f"echo run >> {marker}; dd if=/dev/zero of={filler} bs=64k 2>/dev/null; exit 0"
    (job_id,) = engine.submit({"name": "fills", "command": ["sh", "-c", script], "max_attempts": 2})
    wait_for(lambda: wrapper_ended(engine, job_id), 20.0, what="the job to end")
    assert os.statvfs(small_disk).f_bavail == 0, "the job should have filled the disk"
    time.sleep(2.5)  # the engine tries to settle it on the full disk, more than once
    engine_pid = engine.pid
    assert engine_pid is not None, "the engine died on the full disk"
    assert engine.job(job_id).state in {"running", "succeeded"}
    assert runs(marker) == 1
    # said once, as a full disk; never taken for a fault of the attempt's
    said = engine.home.engine_log.read_text(errors="replace")
    assert said.count("job outcomes cannot be recorded in the database now") <= 1
    assert "could not record how attempt" not in said

    filler.unlink()
    wait_for(
        lambda: attempt_rows(engine.home, job_id)[0][1] not in {"launching", "running"},
        what="the attempt to settle once there is space",
    )
    time.sleep(0.5)  # a second attempt, had one been started, would have counted by now
    assert runs(marker) == 1, "the job ran twice"
    job = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"})
    assert (job.state, job.exit_code, job.attempts) == ("succeeded", 0, 1)
    assert engine.pid == engine_pid
    assert attempt_rows(engine.home, job_id) == [(1, "exited", 0)]
    leftovers = sorted(p.name for p in engine.home.attempt_dir(job_id, 1).iterdir())
    assert leftovers == ["exit.json", "launch.lock", "output.log", "wrapper.json"]

    # and the engine carries on as before
    (next_id,) = engine.submit({"name": "after", "command": ["sh", "-c", "exit 3"]})
    assert engine.wait_state(next_id, "failed").exit_code == 3


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`gpudesk ARGS`, run (GPUDESK_HOME: the small disk's, from the fixture)."""
    return subprocess.run(
        [sys.executable, "-m", "gpudesk", *args], capture_output=True, text=True, timeout=60
    )


def gpudesk(*args: str) -> str:
    """What `gpudesk ARGS` prints, succeeding."""
    done = cli(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("leftover", [False, True], ids=["plain", "leaves-a-process"])
def test_a_job_that_ended_on_a_full_disk_is_shown_ended_not_running(
    disk_engine: EngineHandle, small_disk: Path, tmp_path: Path, leftover: bool
) -> None:
    """Its end cannot be stored while the disk is full: every view shows how it ended, marked
    not yet saved and why (never `running`), `engine status` says the store cannot be written;
    it is saved once, as shown, when there is room, and it ran once. A job that leaves a
    process behind has it killed and said as an event: that event, refused too, once came
    before its end was worked out, and the job was shown `running` until the next try."""
    engine = disk_engine
    marker, filler = tmp_path / "runs", small_disk / "filler"
    # The store's WAL emptied just before the disk fills (fill_beside_the_store says why): else
    # the engine's first write after a checkpoint frees what it held, and its retry (every
    # SETTLE_RETRY_S) saved the end while the views below were read (seen in a run under load)
    empty_wal = (
        f"import sqlite3; sqlite3.connect({str(engine.home.db)!r}, timeout=10)"
        '.execute("PRAGMA wal_checkpoint(TRUNCATE)")'
    )
    script = (
        f"echo run >> {marker}; {shlex.quote(sys.executable)} -c {shlex.quote(empty_wal)}; "
        f"dd if=/dev/zero of={filler} bs=64k 2>/dev/null; exit 0"
    )
    if leftover:
        script = f"sleep 300 & {script}"
    (job_id,) = engine.submit({"name": "fills", "command": ["sh", "-c", script], "max_attempts": 2})
    wait_for(lambda: wrapper_ended(engine, job_id), 20.0, what="the job to end")
    job = wait_for(lambda: (j := engine.job(job_id)).unsaved and j, 10.0, what="the view")
    assert (job.state, job.exit_code, job.slot) == ("succeeded", 0, None)
    assert job.unsaved is not None and "is full" in job.unsaved
    assert str(engine.home.root) in job.unsaved
    assert attempt_rows(engine.home, job_id) == [(1, "running", None)]  # as stored: unsaved

    queue = gpudesk("queue")
    assert "succeeded*" in queue and "running" not in queue, queue
    assert "* not yet saved: the disk holding gpudesk's state folder" in queue
    shown = gpudesk("show", str(job_id))
    assert "state      succeeded" in shown and "[not yet saved: " in shown, shown
    status = gpudesk("engine", "status")
    assert "store:   cannot be written: the disk holding gpudesk's state folder" in status, status
    assert "1 ended job(s) not yet saved" in status and "0 running" in status
    assert "1 succeeded" in status
    # not acted on, as any job that cannot be (tests/faults/test_full_disk_ended.py: each action,
    # its engine's retry held back). Here the retry may find room first (a WAL emptied, under
    # load), and the end is saved: then the cancel finds it ended in the store (exit 0).
    done = cli("cancel", str(job_id))
    said = done.stdout + done.stderr
    if "not yet saved" in said:
        assert done.returncode == 1, said
        ended = f"job {job_id} (fills): already succeeded (exit 0); its end is not yet saved: "
        assert ended in said
    else:
        assert (done.returncode, said) == (0, f"job {job_id} (fills): already succeeded\n")

    filler.unlink()
    wait_for(
        lambda: attempt_rows(engine.home, job_id) == [(1, "exited", 0)],
        what="the end to be saved once there is room",
    )
    job = engine.job(job_id)
    assert (job.state, job.exit_code, job.attempts, job.unsaved) == ("succeeded", 0, 1, None)
    assert "store:" not in gpudesk("engine", "status")
    cleanups = [e.message for e in engine.show(job_id).events if e.kind == "cleanup"]
    assert cleanups == (["killed 1 leftover process(es) of attempt 1"] if leftover else [])
    time.sleep(0.5)  # a second attempt, had one been started, would have counted by now
    assert runs(marker) == 1, "the job ran twice"


def test_an_engine_started_on_a_full_disk_says_so_and_loses_nothing(
    disk_engine: EngineHandle, small_disk: Path, tmp_path: Path
) -> None:
    engine = disk_engine
    marker, gate = tmp_path / "runs", tmp_path / "gate"
    script = f"echo run >> {marker}; while [ ! -e {gate} ]; do sleep 0.02; done; exit 0"
    (job_id,) = engine.submit(
        {"name": "outlives", "command": ["sh", "-c", script], "max_attempts": 2}
    )
    engine.wait_state(job_id, "running")
    # "running" is said once the wrapper is spawned; the test finds the wrapper through the
    # wrapper.json it writes before the command starts, which a disk filled before then would
    # never hold (the engine keeps the pid in its store): wait for the command itself.
    wait_for(lambda: runs(marker) == 1, 10.0, what="the command to start")
    engine.stop()  # its job keeps running
    fill(small_disk / "filler")
    gate.touch()
    wait_for(lambda: wrapper_ended(engine, job_id), 10.0, what="the job to end")
    assert (engine.home.attempt_dir(job_id, 1) / "exit.json").exists()

    done = subprocess.run(
        [sys.executable, "-m", "gpudesk", "engine", "start"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Traceback" not in said
    assert "is full" in said
    assert str(engine.home.root) in said
    assert "free some space" in said.lower()
    assert engine.pid is None

    (small_disk / "filler").unlink()
    engine.start()
    job = engine.wait_state(job_id, {"succeeded", "failed", "cancelled"})
    assert (job.state, job.exit_code, job.attempts) == ("succeeded", 0, 1)
    assert runs(marker) == 1


def test_no_attempt_starts_without_room_for_its_outcome(small_disk: Path) -> None:
    fill(small_disk / "filler")
    with pytest.raises(runner.LaunchError) as failed:
        runner.prepare(small_disk / "jobs" / "1" / "1")
    assert failed.value.no_space


@pytest.mark.parametrize("code", [0, 7])
def test_the_wrapper_exits_with_the_command_code_when_no_record_can_be_written(
    small_disk: Path, tmp_path: Path, code: int
) -> None:
    attempt_dir = small_disk / "attempt"  # no reserve: nowhere to write a record
    attempt_dir.mkdir()
    fill(small_disk / "filler")
    wrapper = [sys.executable, "-I", "-S", str(runner.WRAPPER_PATH)]
    args = [str(attempt_dir), str(tmp_path), "0", "-", "no cgroup in this test", "--"]
    done = subprocess.run(
        [*wrapper, *args, "sh", "-c", f"exit {code}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in attempt_dir.iterdir()) == []  # no record, no .tmp left
    # what the engine makes of it: the command's own outcome, and why there is no record
    record = runner.describe_returncode(done.returncode)
    assert record.exit_code == code
    assert "could not write exit.json" in record.description


def refused(*args: str) -> str:
    """What `gpudesk ARGS` says when it fails with exit 1 (a job's outcome on stdout, an
    error on stderr)."""
    done = cli(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout + done.stderr


def refused_on_full_disk(disk: Path, home: Home, action: list[str], undo: list[str] | None) -> str:
    """`gpudesk ACTION` on a disk filled just before (`fill_beside_the_store`), refused
    (`refused`). Should the action still find room (before the WAL was emptied first,
    `suspend`, `edit` and a submit each did, in whole runs under load), that is no fault: it
    is undone with room made (`undo`) and tried again, three times at most; an action that
    cannot be undone (`cancel`) gets one try."""
    for attempt in range(3 if undo is not None else 1):
        fill_beside_the_store(disk, home, f"filler-{action[0]}-{attempt}")
        done = cli(*action)
        assert "Traceback" not in done.stderr
        if done.returncode == 1:
            return done.stdout + done.stderr
        assert done.returncode == 0 and undo is not None, done.stdout + done.stderr
        for filler in disk.glob("filler*"):  # room for the undo
            filler.unlink()
        gpudesk(*undo)
    raise AssertionError(f"`gpudesk {' '.join(action)}` found room on a full disk every time")


def job_names(home: Home, *, cancelled: bool = True) -> list[str]:
    """The names of the jobs in the store, in order; without the cancelled ones if asked."""
    where = "" if cancelled else " WHERE state != 'cancelled'"
    db = sqlite3.connect(home.db)
    try:
        return [str(name) for (name,) in db.execute(f"SELECT name FROM jobs{where} ORDER BY id")]
    finally:
        db.close()


def test_a_submit_on_a_full_disk_says_so_and_queues_nothing(
    disk_engine: EngineHandle, small_disk: Path
) -> None:
    """One paragraph naming the disk, exit 1; an array (one request) is queued whole or not
    at all; once there is room the same submit queues it.

    Held, so that a submit that found room all the same (`refused_on_full_disk`) is cancelled
    before its jobs run; such a submit still queued all of its jobs or none."""
    engine = disk_engine
    (first,) = engine.submit({"name": "before", "command": ["true"]})
    engine.wait_state(first, "succeeded")
    for name, more, tasks in (("one", [], 1), ("sweep", ["--array", "0-49"], 50)):
        said = refused_on_full_disk(
            small_disk,
            engine.home,
            ["submit", "--hold", "--name", name, *more, "--", "true"],
            ["cancel", "--name", f"{name}*"],
        )
        assert said.startswith("error: the store could not be written: the disk holding "), said
        assert f"gpudesk's state folder ({engine.home.root}" in said and "is full" in said
        assert "nothing was queued" in said and "free some space" in said.lower()
        assert len(said.strip().splitlines()) == 1, said
        queued_then_cancelled = [n for n in job_names(engine.home) if n.startswith(name)]
        assert len(queued_then_cancelled) % tasks == 0, "an array was queued in part"
    assert engine.pid is not None
    assert job_names(engine.home, cancelled=False) == ["before"]

    for filler in small_disk.glob("filler*"):
        filler.unlink()
    assert "submitted array job" in gpudesk("submit", "--name", "sweep", "--array", "0-2", "true")
    assert job_names(engine.home, cancelled=False) == ["before", "sweep_0", "sweep_1", "sweep_2"]


def test_job_control_on_a_full_disk_changes_nothing(
    disk_engine: EngineHandle, small_disk: Path, tmp_path: Path
) -> None:
    """cancel, hold, suspend and edit the store cannot save are each refused, saying why,
    exit 1, and leave the job as it was, in the engine as in its store: the queued job still
    starts when its turn comes, the running one was never stopped."""
    engine = disk_engine
    gate, marker = tmp_path / "gate", tmp_path / "runs"
    script = f"while [ ! -e {gate} ]; do sleep 0.02; done"
    (first,) = engine.submit({"name": "gated", "command": ["sh", "-c", script]})
    (second,) = engine.submit(
        {"name": "waits", "command": ["sh", "-c", f"echo run >> {marker}"], "after": [first]}
    )
    engine.wait_state(first, "running")
    wait_for(lambda: runner.read_wrapper_pid(engine.home.attempt_dir(first, 1)), 10.0)
    fill(small_disk / "filler")

    for action, undo in (
        (["cancel", "waits"], None),
        (["hold", "waits"], ["release", "waits"]),
        (["suspend", "gated"], ["resume", "gated"]),
    ):
        said = refused_on_full_disk(small_disk, engine.home, action, undo)
        assert "nothing changed: the store could not be written: the disk holding " in said
        assert str(engine.home.root) in said, said
    said = refused_on_full_disk(
        small_disk,
        engine.home,
        ["edit", "waits", "--name", "renamed"],
        ["edit", "renamed", "--name", "waits"],
    )
    assert "the store could not be written" in said and "nothing was changed" in said
    wrapper = runner.read_wrapper_pid(engine.home.attempt_dir(first, 1))
    assert wrapper is not None
    assert psutil.Process(wrapper).status() != psutil.STATUS_STOPPED
    assert (engine.job(first).state, engine.job(first).suspended_at) == ("running", None)
    assert (engine.job(second).state, engine.job(second).held) == ("queued", False)

    for filler in small_disk.glob("filler*"):
        filler.unlink()
    gate.touch()
    assert engine.wait_state(second, {"succeeded", "failed", "cancelled"}).state == "succeeded"
    assert runs(marker) == 1
    assert job_names(engine.home) == ["gated", "waits"]


def stored_states(home: Home, ids: list[int]) -> dict[int, str]:
    db = sqlite3.connect(home.db)
    try:
        marks = ",".join("?" * len(ids))
        rows = db.execute(f"SELECT id, state FROM jobs WHERE id IN ({marks})", ids)
        return {int(job_id): str(state) for job_id, state in rows}
    finally:
        db.close()


def test_a_cancel_of_many_jobs_on_a_full_disk_leaves_each_as_the_store_has_it(
    disk_engine: EngineHandle, small_disk: Path, tmp_path: Path
) -> None:
    """One request naming 30 queued jobs, their changes in one transaction, on a full disk:
    each job's outcome is what the store holds and what the engine holds (refused: still
    queued in both; cancelled: in both), whatever write or commit the disk refused; each
    refused one still runs once when its turn comes, a cancelled one never.

    The disk is filled with a plain `fill`, so that the refusal may come at any write of the
    transaction. Should every cancel find room (what the store's WAL held, freed under load),
    nothing was refused to check: 30 more jobs are submitted and the disk filled again, three
    tries at most; the jobs of such a try must be cancelled in both and never run."""
    engine = disk_engine
    gate, marker = tmp_path / "gate", tmp_path / "runs"
    engine.occupy_the_only_slot(gate)
    ids: list[int] = []
    all_cancelled: list[int] = []
    for attempt in range(3):
        all_cancelled += ids
        ids = engine.submit(
            *(
                {"name": f"w{i}", "command": ["sh", "-c", f"echo {i} >> {marker}"]}
                for i in range(30)
            )
        )
        fill(small_disk / f"filler-{attempt}")
        done = cli("cancel", *map(str, ids))
        assert "Traceback" not in done.stderr
        said = done.stdout + done.stderr
        if done.returncode == 1:
            break
        assert done.returncode == 0, said
        for filler in small_disk.glob("filler*"):
            filler.unlink()
    else:
        raise AssertionError("every cancel found room on a full disk, three times")
    if all_cancelled:
        assert set(stored_states(engine.home, all_cancelled).values()) == {"cancelled"}

    kept = [i for i in ids if f"job {i} (w{ids.index(i)}): nothing changed" in said]
    gone = [i for i in ids if f"job {i} (w{ids.index(i)}): cancelled" in said]
    assert kept and len(kept) + len(gone) == len(ids), said
    assert "the disk holding gpudesk's state folder" in said
    shown = {job.id: job.state for job in engine.api.jobs(ids=ids)}
    assert shown == stored_states(engine.home, ids)
    assert shown == {i: "queued" if i in kept else "cancelled" for i in ids}

    for filler in small_disk.glob("filler*"):
        filler.unlink()
    gate.touch()
    engine.wait_all_done(kept, timeout=60)
    assert sorted(int(n) for n in marker.read_text().split()) == [ids.index(i) for i in kept]


def _emissions_row(run_id: str) -> EmissionsRow:
    """A row with every cell filled (about 400 bytes), as `history --format codecarbon` makes."""
    values = {
        f.name: (f"{f.name}-{run_id}" if f.type == "str" else 1)
        for f in dataclasses.fields(EmissionsRow)
    }
    return EmissionsRow(**{**values, "run_id": run_id})


def test_an_emissions_file_on_a_full_disk_keeps_only_whole_rows(small_disk: Path) -> None:
    """A disk that fills part-way through an append used to leave the file ending in a row cut
    short; once there was room, the next export added rows after it: a short row among full
    ones, which codecarbon's dashboard cannot read. The append is now whole or not at all."""
    out = small_disk / "emissions.csv"
    first = emissions.append(out, [_emissions_row(f"a{i}") for i in range(5)])
    assert len(first.rows) == 5
    kept = out.read_bytes()
    fill(small_disk / "filler")  # the disk now full, all but a few bytes
    with pytest.raises(emissions.EmissionsFileError, match="No space left"):
        emissions.append(out, [_emissions_row(f"b{i}") for i in range(200)])
    assert out.read_bytes() == kept  # not one byte of a row cut short
    (small_disk / "filler").unlink()
    again = emissions.append(out, [_emissions_row(f"b{i}") for i in range(200)])
    assert len(again.rows) == 200
    lines = list(csv.reader(io.StringIO(out.read_text())))
    assert len(lines) == 1 + 5 + 200 and {len(line) for line in lines} == {len(lines[0])}
    # a new file the disk cannot take is not left behind, headed but empty
    fill(small_disk / "filler")
    new = small_disk / "new.csv"
    with pytest.raises(emissions.EmissionsFileError):
        emissions.append(new, [_emissions_row(f"c{i}") for i in range(200)])
    assert not new.exists()
