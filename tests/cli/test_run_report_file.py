"""`gpudesk run --report FILE` as a user runs it: the file checked before anything is submitted,
written whole or not at all; and what a run says when it is left (a second Ctrl-C) or loses its
engine. Real processes, a real engine, real files."""

from __future__ import annotations

import json
import os
import queue
import resource
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_cli import GPUDESK, gpudesk, long_jobs_profile, start_interruptible_run, write_profile

from gpudesk.paths import Home

ONE_JOB = """
    name = "rep"
    [station]
    backend = "none"
    slots = 2
    [[jobs]]
    name = "hello"
    command = ["echo", "hello"]
"""


def refused(result: subprocess.CompletedProcess, fragment: str) -> None:
    """Refused as bad input: exit 2, one `error:` paragraph naming `fragment`, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: --report "), result.stderr
    assert fragment in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Nothing was submitted" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""


def test_the_engines_database_is_refused_and_left_intact(
    engine: EngineHandle, tmp_path: Path
) -> None:
    profile = write_profile(tmp_path, ONE_JOB)
    db = engine.home.db
    # the home itself, and through a link to its folder
    (tmp_path / "state").symlink_to(engine.home.root)
    for target in (db, tmp_path / "state" / "gpudesk.db", engine.home.root / "report.txt"):
        result = gpudesk("run", "--report", str(target), str(profile))
        refused(result, f"is inside gpudesk's home {engine.home.root}")
    assert db.read_bytes().startswith(b"SQLite format 3\x00")
    assert not (engine.home.root / "report.txt").exists()
    assert engine.client.request("jobs")["jobs"] == []  # nothing was submitted
    assert gpudesk("queue").returncode == 0  # and the engine still reads its store


def test_the_profile_being_run_is_refused(home: Home, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, ONE_JOB)
    before = profile.read_bytes()
    # as `gpudesk run --report p.toml p.toml`, and by another path
    for target in (profile.name, str(tmp_path / "." / profile.name)):
        refused(gpudesk("run", "--report", target, profile.name, cwd=tmp_path), "profile")
    assert profile.read_bytes() == before
    assert not home.lock.exists(), "a refused --report must not even start the engine"


@pytest.mark.parametrize(
    "kind, fragment",
    [
        ("missing folder", "does not exist"),
        ("folder", "is a folder"),
        ("fifo", "is a named pipe"),
        ("device", "is a character device"),
        ("link", "is a symbolic link"),
        ("file as folder", "Not a directory"),
    ],
)
def test_a_report_path_that_cannot_be_written_is_refused_up_front(
    home: Home, tmp_path: Path, kind: str, fragment: str
) -> None:
    profile = write_profile(tmp_path, ONE_JOB)
    target = {
        "missing folder": tmp_path / "no" / "such" / "rep.txt",
        "folder": tmp_path,
        "fifo": tmp_path / "fifo",
        "device": Path("/dev/full"),
        "link": tmp_path / "link.txt",
        "file as folder": tmp_path / "p.toml" / "rep.txt",
    }[kind]
    if kind == "fifo":
        os.mkfifo(target)
    if kind == "link":
        (tmp_path / "real.txt").write_text("mine\n")
        target.symlink_to(tmp_path / "real.txt")
    refused(gpudesk("run", "--report", str(target), str(profile)), fragment)
    assert not home.lock.exists(), "a refused --report must not even start the engine"
    if kind == "link":
        assert (tmp_path / "real.txt").read_text() == "mine\n"


def test_the_report_as_text_and_json_replaces_the_file_whole(
    engine: EngineHandle, tmp_path: Path
) -> None:
    profile = write_profile(tmp_path, ONE_JOB)
    out = tmp_path / "out"
    out.mkdir()
    text, data = out / "report.txt", out / "report.json"
    text.write_text("an earlier report, longer than the new one\n" * 100)
    text.chmod(0o640)
    for target in (text, data):
        result = gpudesk("run", "--report", str(target), str(profile))
        assert result.returncode == 0, result.stdout + result.stderr
    written = text.read_text()
    assert written.startswith("ID") and "rep: 1 succeeded" in written
    assert "earlier" not in written
    assert text.stat().st_mode & 0o777 == 0o640  # the mode of the file it replaced
    assert json.loads(data.read_text())["succeeded"] is True
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.txt"]


def test_a_report_that_cannot_be_written_at_the_end_fails_the_run_and_leaves_no_half_file(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A full disk, as the file-size limit simulates it (EFBIG on the write past 256 bytes, as
    ENOSPC would be): the report is printed, the earlier file kept whole, nothing left beside
    it, and the run exits 1 although its job succeeded."""
    profile = write_profile(tmp_path, ONE_JOB)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "report.json"  # the JSON report is longer than 256 bytes
    target.write_text("previous\n")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))

    result = subprocess.run(
        [*GPUDESK, "run", "--report", str(target), str(profile)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=small_files,
        # no bytecode written: Python's writer of a module's .pyc does not check for a short
        # write, and a first import under the limit leaves it cut at 256 bytes (EOFError after)
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "rep: 1 succeeded" in result.stdout  # the report, printed still
    assert result.stderr.startswith("error: could not write the report to "), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert target.read_text() == "previous\n"
    assert [p.name for p in out.iterdir()] == ["report.json"]
    states = [j["state"] for j in engine.client.request("jobs")["jobs"]]
    assert states == ["succeeded"]


def test_a_run_whose_engine_stops_says_how_to_follow_its_jobs_again(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A run whose engine stops, which it cannot follow again once the engine is back (a
    profile read from a pipe; docs/jobs.md, "An engine restarted while you wait"), says its
    jobs go on and how to follow them: exit 3, as `wait`'s give-up, not a job's failure."""
    profile = long_jobs_profile(tmp_path, ["sleep", "60"], repeat=3)
    read_end, write_end = os.pipe()  # the profile, whole in the pipe's buffer
    os.write(write_end, profile.read_bytes())
    os.close(write_end)
    run = subprocess.Popen(
        [*GPUDESK, "run", "/dev/stdin"],
        stdin=read_end,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(read_end)
    try:
        wait_for(
            lambda: len(engine.client.request("jobs", states=["running"])["jobs"]) == 2,
            what="two jobs running",
        )
        ids = [j["id"] for j in engine.client.request("jobs")["jobs"]]
        engine.stop()
        out, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 3, out + err
    # closed on the run's event stream, or on its listing of the jobs, or gone (its socket
    # removed) by the time the run asks for that listing: which, the race decides
    first = err.split("\n")[0]
    assert (
        err.startswith("error: the engine closed")
        or "closed the connection without answering this 'jobs' request" in first
        or first.startswith(f"error: no engine is listening for {engine.home.root} ")
    ), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "may still be queued or running" in err
    assert "gpudesk engine start" in err
    assert f"gpudesk wait {' '.join(map(str, sorted(ids)))}" in err
    assert "gpudesk queue --group " in err
    assert "--attach" not in err  # it has no file to read again


def test_a_second_ctrl_c_says_what_happens_to_the_jobs(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """The first Ctrl-C says the jobs are being cancelled; a second one, before the (here:
    stopped) engine was even asked to, leaves them running and says so, and how to reach them."""
    profile = long_jobs_profile(tmp_path, ["sleep", "60"], repeat=3)
    run = start_interruptible_run(profile)
    lines: queue.Queue[str] = queue.Queue()
    stdout = run.stdout
    assert stdout is not None

    def read() -> None:
        for line in stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    pid = engine.pid
    assert pid is not None
    try:
        wait_for(
            lambda: len(engine.client.request("jobs", states=["running"])["jobs"]) == 2,
            what="two jobs running",
        )
        os.kill(pid, signal.SIGSTOP)
        try:
            run.send_signal(signal.SIGINT)
            said = ""
            while "interrupted" not in said:
                said = lines.get(timeout=10)
            assert "cancelling this run's jobs" in said
            assert "Ctrl-C again leaves without waiting for the cancels to end" in said
            run.send_signal(signal.SIGINT)
            assert run.wait(timeout=30) == 130
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        if run.poll() is None:
            run.kill()
    err = run.stderr.read() if run.stderr else ""
    assert "left the run before the engine was asked to cancel its jobs, so they go on" in err
    assert "gpudesk queue --group " in err and "Traceback" not in err, err
    assert "--attach follows them to the end and reports" in err
    states = sorted(j["state"] for j in engine.client.request("jobs")["jobs"])
    assert states == ["queued", "running", "running"]  # as said: not cancelled
