"""A damaged, lost, replaced or foreign home: the engine says what it found and what to do, in one
paragraph with a non-zero exit, from `gpudesk engine start`, from a command that starts it on
its own (`gpudesk queue`) and from the daemon itself; it never starts afresh over earlier jobs'
folders, never reuses a job id whose folder exists, and never mixes a new log into an old one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import local_users
import pytest
from conftest import EngineHandle, refuses, wait_for
from local_users import LocalUser

from gpudesk.paths import Home

other_user = local_users.other_user  # the fixture (tests/local_users.py)

GPUDESK = [sys.executable, "-m", "gpudesk"]


def cli(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, *GPUDESK, *args], capture_output=True, text=True, timeout=60, check=False
    )


def finished_job(engine: EngineHandle, text: str) -> int:
    (job_id,) = engine.submit({"name": text, "command": ["echo", text]})
    assert engine.wait_state(job_id, {"succeeded", "failed"}).state == "succeeded"
    return job_id


def remove_database(home: Home) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{home.db}{suffix}")


# ------------------------------------------------------------------ a lost database
@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_lost_database_over_earlier_jobs_refuses_to_start(engine: EngineHandle, how: str) -> None:
    job_id = finished_job(engine, "before")
    old_log = engine.home.attempt_dir(job_id, 1) / "output.log"
    engine.stop()
    remove_database(engine.home)
    if how == "truncated":
        engine.home.db.write_bytes(b"")
    state = "missing" if how == "deleted" else "empty"

    for command in (("engine", "start"), ("submit", "--", "true")):
        refuses(
            cli(*command),
            f"the gpudesk database {engine.home.db} is {state}",
            "holds the folders of 1 earlier job(s)",
            f"mv {engine.home.jobs_dir} {engine.home.jobs_dir}.old",
        )
    assert engine.pid is None
    assert old_log.read_text() == "before\n"
    # a command that only asks a running engine says that one would not start, and why, not
    # "`gpudesk engine start` starts it (its jobs are kept)"
    for command in (("queue",), ("show", str(job_id))):
        asked = cli(*command)
        assert asked.returncode == 3, asked
        said = " ".join(asked.stderr.split())
        # the home as the command was given it (GPUDESK_HOME): a bare `gpudesk engine start`
        # would start another home's engine
        start = f"`GPUDESK_HOME={engine.home.root} gpudesk engine start` would not start one"
        assert start in said, said
        assert f"the gpudesk database {engine.home.db} is {state}" in said, said

    # doing what it says starts afresh, the old folders kept aside
    engine.home.jobs_dir.rename(f"{engine.home.jobs_dir}.old")
    assert cli("engine", "start").returncode == 0
    (new_id,) = engine.submit({"name": "after", "command": ["true"]})
    engine.wait_state(new_id, "succeeded")
    assert Path(f"{engine.home.jobs_dir}.old/{job_id}/1/output.log").read_text() == "before\n"


def test_a_database_restored_from_an_older_backup_never_reuses_a_job_id(
    engine: EngineHandle, tmp_path: Path
) -> None:
    finished_job(engine, "first")
    backup = tmp_path / "backup.db"
    with sqlite3.connect(engine.home.db) as live, sqlite3.connect(backup) as copy:
        live.backup(copy)
    second = finished_job(engine, "second")  # after the backup: the backup does not know it
    engine.stop()
    remove_database(engine.home)
    shutil.copy(backup, engine.home.db)

    engine.start()
    (third,) = engine.submit({"name": "third", "command": ["echo", "third"]})
    assert third > second
    engine.wait_state(third, "succeeded")
    assert (engine.home.attempt_dir(second, 1) / "output.log").read_text() == "second\n"


def test_an_attempt_folder_that_exists_is_never_appended_to(engine: EngineHandle) -> None:
    first = finished_job(engine, "first")
    stray = engine.home.attempt_dir(first + 1, 1)
    stray.mkdir(parents=True)
    (stray / "output.log").write_text("not yours\n")

    (job_id,) = engine.submit({"name": "next", "command": ["echo", "next"]})
    assert job_id == first + 1
    job = engine.wait_state(job_id, {"succeeded", "failed"})
    assert job.state == "failed"
    assert f"the attempt folder {stray} already exists" in job.reason
    assert (stray / "output.log").read_text() == "not yours\n"


# ------------------------------------------ the database under a running engine
def job_names(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [name for (name,) in conn.execute("SELECT name FROM jobs ORDER BY id")]


@pytest.mark.parametrize("what", ["the file", "with its WAL"])
def test_a_database_removed_under_the_engine_is_written_back_and_loses_nothing(
    engine: EngineHandle, what: str
) -> None:
    finished_job(engine, "before")
    pid = engine.pid
    if what == "the file":
        engine.home.db.unlink()
    else:
        remove_database(engine.home)
    finished_job(engine, "during")  # most likely before the engine looks: into its open copy
    wait_for(engine.home.db.exists, 10.0, what="the database written back")
    finished_job(engine, "after")  # into the file written back
    said = " ".join(engine.home.engine_log.read_text().split())
    assert f"the gpudesk database {engine.home.db} was removed while the engine ran" in said
    assert "written back from the engine's open copy: nothing is lost" in said
    assert engine.pid == pid  # it carried on

    # the next engine reads every job, from the file at the path
    engine.stop()
    assert job_names(engine.home.db) == ["before", "during", "after"]
    engine.start()
    assert [job.name for job in engine.api.jobs()] == ["before", "during", "after"]
    assert not list(engine.home.root.glob("gpudesk.db.*")), "no copy or partial file left"


def test_a_database_replaced_under_the_engine_stops_it_and_keeps_its_copy(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A backup moved into the database's place while the engine runs: the engine saves what
    it holds beside it and stops with a failure (systemd's Restart=on-failure then starts the
    next engine, on the file put back), without the old WAL SQLite would replay into it."""
    engine.stop()  # run the daemon here instead, to see how it exits
    daemon = subprocess.Popen(
        [sys.executable, "-m", "gpudesk.engine.daemon", "--home", str(engine.home.root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def listening() -> bool:  # its pid is written as it locks, before it listens
            with contextlib.suppress(Exception):
                return bool(engine.client.request("ping")["pid"] == daemon.pid)
            return False

        wait_for(listening, 30.0, what="the engine to listen")
        finished_job(engine, "first")
        backup = tmp_path / "backup.db"
        with (
            contextlib.closing(sqlite3.connect(engine.home.db)) as live,
            contextlib.closing(sqlite3.connect(backup)) as copy,
        ):
            live.backup(copy)
        finished_job(engine, "second")  # after the backup: the backup does not know it
        os.replace(backup, engine.home.db)  # put back as a user would, the engine running
        _, err = daemon.communicate(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert daemon.returncode == 1, err  # a failure: a service manager starts the next one
    (copy,) = engine.home.root.glob(f"{engine.home.db.name}.engine-*")
    assert job_names(copy) == ["first", "second"]  # what the engine held is not lost
    said = " ".join(err.split())
    assert f"the gpudesk database {engine.home.db} was replaced while the engine ran" in said
    assert f"the engine stops, leaving it to the next; its copy: {copy}" in said
    assert "Traceback" not in err, err
    # the next engine runs on the file put back (its stale WAL went with the old engine)
    assert job_names(engine.home.db) == ["first"]
    engine.start()
    assert [job.name for job in engine.api.jobs()] == ["first"]
    (third,) = engine.submit({"name": "third", "command": ["true"]})
    assert engine.wait_state(third, "succeeded").id > 2  # never job 2's id again


# ------------------------------------------------- a damaged or newer database
def test_a_damaged_database_is_one_paragraph_not_a_traceback(home: Home) -> None:
    home.ensure()
    home.db.write_bytes(b"this is not an SQLite database, whatever its name says. " * 100)
    for command in (("engine", "start"), ("submit", "--", "true")):
        refuses(
            cli(*command),
            f"cannot open the gpudesk database {home.db}: file is not a database",
            "restore gpudesk.db from a backup",
            f"mv {home.root} {home.root}.damaged",
        )
    daemon = subprocess.run(
        [sys.executable, "-m", "gpudesk.engine.daemon", "--home", str(home.root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert daemon.returncode == 4
    assert "Traceback" not in daemon.stderr and "file is not a database" in daemon.stderr


def test_a_database_from_a_newer_gpudesk_is_one_paragraph(engine: EngineHandle) -> None:
    finished_job(engine, "kept")
    engine.stop()
    with sqlite3.connect(engine.home.db) as conn:
        conn.execute("PRAGMA user_version = 999")
    for command in (("engine", "start"), ("submit", "--", "true")):
        refuses(
            cli(*command),
            "the database has schema version 999, newer than this gpudesk understands",
            "upgrade gpudesk",
        )


# ------------------------------------------------------------- another user's home
# Root, but without the capabilities that let root read anyone's files: what another user
# meets in this home (root keeps its own uid, so the interpreter under /root still runs).
WITHOUT_ROOT_POWERS = ("setpriv", "--bounding-set=-all", "--inh-caps=-all")


def test_a_home_owned_by_another_user_is_one_paragraph(home: Home, other_user: LocalUser) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv, to run the CLI as root without root's powers")
    home.root.mkdir(mode=0o700)
    os.chown(home.root, other_user.uid, other_user.gid)
    try:
        commands = [("engine", "start"), ("submit", "--", "true"), ("queue",), ("engine", "status")]
        for command in commands:
            refuses(
                cli(*command, prefix=WITHOUT_ROOT_POWERS),
                f"the gpudesk home {home.root} belongs to {other_user.name} "
                f"(uid {other_user.uid}), and you are root (uid 0)",
                "Set GPUDESK_HOME to a folder of your own",
            )
        assert list(home.root.iterdir()) == []  # nothing was written into it
    finally:
        os.chown(home.root, 0, 0)  # for the home fixture's clean-up


# -------------------------------------------------- a re-adopted wrapper killed
def test_a_readopted_wrapper_killed_while_watched_says_so(engine: EngineHandle) -> None:
    (job_id,) = engine.submit({"name": "adopted", "command": ["sleep", "60"]})
    wrapper = engine.wait_state(job_id, "running").pgid
    engine.stop()
    engine.start()  # re-adopts it: no longer the engine's child
    assert engine.job(job_id).state == "running"
    os.kill(wrapper, signal.SIGKILL)
    job = engine.wait_state(job_id, {"failed"})
    assert "engine was down" not in job.reason
    assert job.reason == (
        f"the job's wrapper (pid {wrapper}) was killed while the engine watched it and left no "
        "exit record (most likely by SIGKILL or the out-of-memory killer)"
    )
    wait_for(lambda: not engine.client.request("jobs", states=["running"])["jobs"])
