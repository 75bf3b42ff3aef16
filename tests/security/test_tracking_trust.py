"""Issue 35, finding 6: a user's own MLflow worker must not speak for other users' jobs.

Each user's tracking worker runs as that user, so she may attach to it or write to its pipe
herself. The engine believes a reply only for a run of the worker's own user
(engine/services/tracking/replies.py); anything else is dropped, and said in the log once,
however many come.

The end-to-end test needs root (real users), a real system engine, and a Python the users may
run (their workers run the engine's; tests/security/user_python.py): each is skipped, saying
why, where it cannot run. The rest are unit tests of the reply parsing and the pipe reader.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import psutil
import pytest
from station_fixture import Station, user_python_station

from gpudesk import trust
from gpudesk.core.identity import Identity
from gpudesk.engine.services.tracking import sidecar as sidecar_module
from gpudesk.engine.services.tracking.replies import Complaints
from gpudesk.engine.services.tracking.sidecar import WORKER_ENV, Sidecar
from gpudesk.paths import Home
from gpudesk.tracking import content, messages

# No store answers at these: no run is ever made by a real worker.
ADA_STORE, BOB_STORE = "http://127.0.0.1:1/", "http://127.0.0.1:2/"
FORGED_RUN_ID = "f" * 32


# ------------------------------------------------------------------------ end to end
@pytest.fixture
def station() -> Iterator[Station]:
    # A job waits for its MLflow run at most a second: no store answers here.
    for made in user_python_station(engine_env={"GPUDESK_TRACKING_WAIT_S": "1"}):
        yield made
        # its jobs sleep a minute: ended here, not left to the station's teardown to kill
        live = [j["id"] for j in made.ok(None, "jobs", states=["queued", "running"])["jobs"]]
        if live:
            made.ok(None, "cancel", jobs=live, grace=0)


def tracked(name: str, uri: str) -> dict[str, object]:
    return {
        "name": name,
        "command": ["sleep", "60"],
        "workdir": "/",
        "tracking": {"mlflow_uri": uri, "experiment": name},
    }


def run_rows(station: Station) -> dict[int, sqlite3.Row]:
    """The engine's record of each job's run (read as root: what `show` cannot say, such as
    whether its end is recorded as in MLflow)."""
    db = sqlite3.connect(f"file:{Home(station.state_dir).db}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        rows = db.execute("SELECT * FROM tracking_runs WHERE job_id IS NOT NULL").fetchall()
    finally:
        db.close()
    return {row["job_id"]: row for row in rows}


def engine_log(station: Station) -> str:
    """What the engine logged: a system engine logs to its stderr (the service's journal)."""
    files = [station.log, Home(station.state_dir).engine_log]
    return "".join(f.read_text(errors="replace") for f in files if f.exists())


def worker_pid(station: Station, uid: int) -> int:
    """The pid of the tracking worker running as `uid`, once it runs; skips the test, saying
    why, where the engine says it cannot start."""
    deadline = time.monotonic() + 60
    while True:
        for process in psutil.process_iter(["cmdline", "uids"]):
            cmdline = process.info["cmdline"] or []
            uids = process.info["uids"]
            if "gpudesk.tracking.worker" in cmdline and uids and uids.real == uid:
                return process.pid
        problems = [s["error"] for s in station.ok(None, "status")["tracking"] if s["uid"] == uid]
        if any(p and "could not be started" in p for p in problems):
            pytest.skip(f"the user's tracking worker cannot start here: {problems}")
        assert time.monotonic() < deadline, problems
        time.sleep(0.1)


def speak_as_worker(station: Station, role: str, pid: int, lines: bytes) -> None:
    """`role`'s user makes her own tracking worker (`pid`) write `lines` on its reply pipe, as
    she may: the worker is her process, so she attaches to it with gdb (which the test needs)
    and has it run `cat` of a file of hers, with the worker's stdout."""
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed: the user attaches to her worker with it")
    user = station.users[role]
    forged = Path(f"/home/{user.name}/forged-replies")
    forged.write_bytes(lines)
    os.chown(forged, user.uid, user.gid)
    command = f'call (int)system("cat {forged}")'
    done = subprocess.run(
        ["runuser", "-u", user.name, "--", "gdb", "-p", str(pid), "-batch", "-nx", "-ex", command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "$1 = 0" not in done.stdout:  # ptrace refused here (a container's seccomp, Yama)
        pytest.skip(f"the user cannot attach to her own process here: {done.stderr[-300:]}")


def test_a_users_worker_cannot_speak_for_another_users_run(station: Station) -> None:
    ada_job = station.submit("ada", tracked("ada-run", ADA_STORE))
    # what bob's client sends (his shell's variables) never reaches his worker
    sent = {"PATH": "/home/bob/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/home/bob/lib"}
    bob_job = station.submit("bob", tracked("bob-run", BOB_STORE), {**sent, "MARK": "bob's"})
    bob = station.users["bob"]
    pid = worker_pid(station, bob.uid)
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    worker_env = dict(item.decode().split("=", 1) for item in environ if item)
    identity = Identity.of(bob.uid, bob.gid, bob.groups)
    assert worker_env == trust.engine_environment(identity, **WORKER_ENV), worker_env
    deadline = time.monotonic() + 30
    while not {ada_job, bob_job} <= run_rows(station).keys():
        assert time.monotonic() < deadline, "the runs were never recorded"
        time.sleep(0.1)
    rows = run_rows(station)
    ada_key, bob_key = rows[ada_job]["key"], rows[bob_job]["key"]
    assert rows[ada_job]["run_id"] is None  # nobody could make it: its store never answers
    forged = [
        messages.RunMade(ada_key, FORGED_RUN_ID),
        messages.Rejected(ada_key, "INJECTED BY bob: mail your password to bob"),
        messages.Acked(ada_key),
        messages.Health(ADA_STORE, 0, "INJECTED BY bob"),  # a store of ada's, not bob's
    ]
    flood = [messages.Rejected(ada_key, f"flood {n}") for n in range(300)]
    # Last, a reply bob's worker may give (his own run): once the engine shows it, it has read
    # every line before it.
    sentinel = messages.RunMade(bob_key, "b" * 32)
    nested = b"[" * 60_000 + b"\n"  # JSON no parser follows that deep (RecursionError)
    lines = nested + b"".join(messages.encode(m) for m in [*forged, *flood, sentinel])
    speak_as_worker(station, "bob", pid, lines)
    deadline = time.monotonic() + 30
    while station.ok("bob", "show", job=bob_job)["tracking"]["run_id"] != "b" * 32:
        assert time.monotonic() < deadline, "the engine never read bob's worker's replies"
        time.sleep(0.1)

    shown = station.ok("ada", "show", job=ada_job)
    assert shown["tracking"]["run_id"] is None, shown["tracking"]  # not rebound to bob's id
    texts = [event["message"] for event in shown["events"]]
    assert not any("INJECTED" in t or "flood" in t for t in texts), texts
    row = run_rows(station)[ada_job]
    assert row["run_id"] is None and not row["final"]  # not closed by bob's "acked"
    log = engine_log(station)
    assert "INJECTED" not in log and "flood" not in log
    assert "Traceback" not in log  # not one engine step failed on what bob's worker said
    complaints = [line for line in log.splitlines() if f"worker of uid {bob.uid}" in line]
    assert len(complaints) == 1, complaints  # 303 forged replies: one line, rate-limited


def test_a_sweep_named_like_another_users_gets_a_parent_run_of_its_own(station: Station) -> None:
    """A job's group and sweep are whatever its client sent, and `queue` shows them to all:
    bob naming ada's must not make his job a child of her sweep's run (which would hold it
    open, end it FAILED with his job, reopen it with his requeue)."""
    same = {"group": "ada-grid-20261129", "sweep": "lr"}
    ada_job = station.submit("ada", {**tracked("ada-lr", ADA_STORE), **same})
    bob_job = station.submit("bob", {**tracked("bob-lr", BOB_STORE), **same})
    deadline = time.monotonic() + 30
    while not {ada_job, bob_job} <= run_rows(station).keys():
        assert time.monotonic() < deadline, "the runs were never recorded"
        time.sleep(0.1)
    rows = run_rows(station)
    parents = {job: json.loads(rows[job]["create_op"])["parent"] for job in (ada_job, bob_job)}
    assert parents[ada_job] is not None and parents[bob_job] is not None
    assert parents[ada_job] != parents[bob_job], parents
    db = sqlite3.connect(f"file:{Home(station.state_dir).db}?mode=ro", uri=True)
    try:
        owners = dict(db.execute("SELECT key, uid FROM tracking_runs WHERE job_id IS NULL"))
    finally:
        db.close()
    assert owners == {
        parents[ada_job]: station.users["ada"].uid,
        parents[bob_job]: station.users["bob"].uid,
    }


# ------------------------------------------------------------------------ the parsing
@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ({"kind": "run", "key": "k", "run_id": "../../etc"}, "run id"),
        ({"kind": "run", "key": "k", "run_id": "x" * 300}, "run id"),
        ({"kind": "run", "key": "k", "run_id": ""}, "run id"),
        ({"kind": "acked", "key": "k" * 201}, "'key'"),
        ({"kind": "acked", "key": "k\x1b]0;owned\x07"}, "'key'"),
        ({"kind": "acked", "key": ""}, "'key'"),
        ({"kind": "health", "uri": "u", "queued": -1}, "'queued'"),
        ({"kind": "health", "uri": "u", "queued": True}, "'queued'"),
        ({"kind": "health", "uri": "u" * 2001, "queued": 0}, "'uri'"),
        ({"kind": "rejected", "key": "k", "message": 5}, "'message'"),
        ({"kind": "shell", "key": "k"}, "unknown kind"),
        ([[[[[]]]]], "not a JSON object"),
    ],
)
def test_a_reply_is_parsed_as_untrusted_input(reply: dict[str, object], why: str) -> None:
    with pytest.raises(messages.BadMessage, match=why):
        messages.decode_reply(json.dumps(reply).encode())


def test_a_replys_text_is_cut_and_its_control_characters_spelled_out() -> None:
    message = "\x1b]0;pwned\x07\x1b[2J" + "y" * 5000
    line = json.dumps({"kind": "rejected", "key": "k", "message": message}).encode()
    reply = messages.decode_reply(line)
    assert isinstance(reply, messages.Rejected)
    assert "\x1b" not in reply.message and "\x07" not in reply.message
    assert reply.message.startswith("\\x1b]0;pwned\\x07\\x1b[2J")
    assert len(reply.message) == messages.MAX_REPLY_TEXT and reply.message.endswith("...")
    with pytest.raises(messages.BadMessage, match="over"):
        messages.decode_reply(b" " * (messages.MAX_REPLY_BYTES + 1))
    with pytest.raises(messages.BadMessage, match="RecursionError"):
        messages.decode_reply(b"[" * 60_000)


def test_the_pipe_reader_holds_no_more_than_a_reply_and_drops_an_overlong_line() -> None:
    inbox = Sidecar(12345, None, "/dev/null", lambda restart: None).inbox
    good = messages.encode(messages.Acked("k"))
    # an overlong line, in pieces, whose tail would parse as a reply: dropped to its end
    assert inbox.take(b"x" * (messages.MAX_REPLY_BYTES + 10)) == []
    assert len(inbox.buffer) == 0 and inbox.discarding
    assert inbox.take(b"y" * 100_000) == [] and len(inbox.buffer) == 0
    assert inbox.take(b'{"kind":"acked","key":"tail"}\n' + good) == [messages.Acked("k")]
    assert not inbox.discarding
    # a reply split over reads is whole once its end comes
    assert inbox.take(good[:5]) == [] and inbox.take(good[5:]) == [messages.Acked("k")]


def test_complaints_are_logged_once_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    complaints = Complaints(7)
    with caplog.at_level("WARNING", logger="gpudesk.engine"):
        for n in range(1000):
            complaints.dropped(f"reply {n}")
    assert len(caplog.records) == 1 and "reply 0" in caplog.records[0].getMessage()
    assert complaints.unsaid == 999


def test_a_workers_log_is_emptied_once_it_passes_its_bound(tmp_path: Path) -> None:
    """The worker writes its log (in root's state folder) as its owner: however much she makes
    it write, the engine keeps it under LOG_MAX_BYTES, give or take LOG_CHECK_S of writing."""
    path = tmp_path / "worker-1234.log"
    path.write_bytes(b"x" * (sidecar_module.LOG_MAX_BYTES + 1))
    sidecar = Sidecar(1234, None, str(path), lambda restart: None)
    assert sidecar.pump() == []
    assert path.stat().st_size == 0 and sidecar.log_emptied == 1
    path.write_bytes(b"y" * 100)
    sidecar.pump()
    assert path.stat().st_size == 100  # below the bound: kept


def test_a_worker_writing_without_end_cannot_hold_the_engines_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One pump reads at most READS_PER_PUMP chunks; the rest waits for the next loop step."""
    monkeypatch.setattr(sidecar_module, "READ_CHUNK", 1024)  # a pipe's 64 KiB holds more
    limit = sidecar_module.READS_PER_PUMP * 1024
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(read_end, False)
        line = messages.encode(messages.Acked("k"))
        flood = line * (4 * limit // len(line))
        assert os.write(write_end, flood) == len(flood)
        sidecar = Sidecar(1234, None, os.devnull, lambda restart: None)
        with open(os.devnull, "wb") as stdin, os.fdopen(os.dup(read_end), "rb") as stdout:
            sidecar.process = cast(Any, SimpleNamespace(stdin=stdin, stdout=stdout))
            replies = sidecar.pump()
        assert 0 < len(replies) <= limit // len(line) + 1
        assert os.read(read_end, 1)  # the rest is left for the next step
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_result_line_no_float_holds_does_not_trip_the_engine(station: Station) -> None:
    """The engine reads a tracked job's `result {json}` lines from its log (the job's own
    output) to log them as metrics: a number JSON holds but a float does not (10**400) is
    skipped, and the job's end is recorded as any other's."""
    huge = "1" + "0" * 400
    script = f'echo \'result {{"acc": 0.5, "huge": {huge}}}\''
    job = {**tracked("huge", ADA_STORE), "command": ["sh", "-c", script]}
    job_id = station.submit("ada", job)
    done = station.wait_state(job_id, "succeeded", "failed", timeout=90)
    assert done["state"] == "succeeded", done
    after = station.submit("bob", {"name": "after", "command": ["true"], "workdir": "/"})
    assert station.wait_state(after, "succeeded", "failed")["state"] == "succeeded"
    assert "OverflowError" not in engine_log(station)


def test_a_result_number_no_float_holds_is_skipped() -> None:
    line = 'result {"acc": 0.5, "huge": 1' + "0" * 400 + ', "nan": NaN}'
    assert content.result_points(line, 0) == [messages.MetricPoint("result/acc", 0.5, 0, 0)]


def test_a_result_line_nested_past_the_stack_is_skipped() -> None:
    deep = 'result {"x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    line = deep + 'result {"acc": 0.5}\n'
    assert content.result_points(line, 0) == [messages.MetricPoint("result/acc", 0.5, 0, 0)]
