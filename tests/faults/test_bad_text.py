"""Text that is not valid Unicode (a file name that is not UTF-8, a lone surrogate sent over the
socket) and outcomes the store refuses: one job never wedges the engine.

Linux names are bytes: a program or folder whose name is not UTF-8 must run as it is, and what
gpudesk stores and shows of it must be readable (`\\xe9`). A surrogate that stands for no byte is
refused at the request. And when recording one attempt's outcome fails anyway (an SQLite trigger
injects the fault here), the other attempts still settle, the engine neither spins nor floods its
log, and an engine restart still succeeds.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import EngineHandle, wait_for

from gpudesk.api.errors import EngineError

GPUDESK = [sys.executable, "-m", "gpudesk"]
LOG_LIMIT = 20_000  # bytes engine.log may hold after these tests: a few lines, no loop


def cli(*args: str | bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`gpudesk ARGS` as a user runs it; args may be bytes (a file name that is not UTF-8)."""
    return subprocess.run(
        [*GPUDESK, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


def submitted_id(result: subprocess.CompletedProcess[str]) -> int:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return int(result.stdout.split()[2])  # "submitted job 3 (name)"


def test_non_utf8_program_names_fail_cleanly_and_do_not_wedge_the_engine(
    engine: EngineHandle, tmp_path: Path
) -> None:
    here = tmp_path / "work"
    here.mkdir()
    not_executable = os.fsencode(here) + b"/donn\xe9es.sh"
    Path(os.fsdecode(not_executable)).write_text("#!/bin/sh\necho hi\n")  # mode 0644

    # as a user types it: the job's name is taken from the program
    bad = submitted_id(cli("submit", "--", b"./donn\xe9es.sh", cwd=here))
    missing = submitted_id(cli("submit", "--", b"/no/such/prog\xff", cwd=here))
    named = submitted_id(cli("submit", "--name", "named", "--", b"./donn\xe9es.sh", cwd=here))
    good = submitted_id(cli("submit", "--", "true", cwd=here))

    jobs = {j.id: j for j in engine.wait_all_done([bad, missing, named, good])}
    assert jobs[good].state == "succeeded"
    assert jobs[bad].name == "donn\\xe9es.sh"
    assert (jobs[bad].state, jobs[bad].exit_code) == ("failed", 126)
    assert jobs[bad].reason == "permission denied: ./donn\\xe9es.sh"
    assert (jobs[missing].state, jobs[missing].exit_code) == ("failed", 127)
    assert jobs[missing].reason == "command not found: /no/such/prog\\xff"
    assert jobs[named].state == "failed"
    # the wrapper's line in the job's log holds the name's own byte, as the job's output
    # would: `gpudesk logs` spells it \xff on a terminal, not Python's \udcff
    logged = subprocess.run([*GPUDESK, "logs", str(missing)], capture_output=True, timeout=60)
    assert b"gpudesk: command not found: /no/such/prog\xff\n" in logged.stdout, logged

    # every front end can read them (strict JSON decoding), and cancel answers
    listed = cli("queue", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {j["id"] for j in json.loads(listed.stdout)["jobs"]} >= {bad, missing, named, good}
    shown = cli("show", str(bad))
    assert shown.returncode == 0 and "permission denied: ./donn\\xe9es.sh" in shown.stdout
    cancelled = cli("cancel", str(bad))
    assert cancelled.returncode == 0 and "already failed" in cancelled.stdout

    # the engine restarts cleanly on this store and goes on running jobs
    engine.stop()
    engine.start()
    assert engine.job(bad).state == "failed"
    (after,) = engine.submit({"name": "after", "command": ["true"]})
    assert engine.wait_state(after, {"succeeded", "failed"}).state == "succeeded"
    assert engine.home.engine_log.stat().st_size < LOG_LIMIT


def test_non_utf8_programs_folders_and_values_run_as_they_are(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """The exact bytes reach the job: the program, its folder, an argument and an env value."""
    folder = os.fsencode(tmp_path) + b"/d\xe9p\xf4t"
    os.mkdir(folder)
    script = folder + b"/ex\xe9cute.sh"
    out = tmp_path / "seen"
    with open(script, "w") as fh:
        fh.write(f'#!/bin/sh\nprintf "%s\\n%s\\n%s\\n%s\\n" "$0" "$PWD" "$1" "$VALUE" > {out}\n')
    os.chmod(script, 0o755)

    job = submitted_id(
        cli(
            "submit",
            "-C",
            folder,
            "-e",
            b"VALUE=caf\xe9",
            "--",
            b"./ex\xe9cute.sh",
            b"arg\xff",
            cwd=tmp_path,
        )
    )
    assert engine.wait_state(job, {"succeeded", "failed"}).state == "succeeded"
    assert out.read_bytes().split(b"\n")[:4] == [
        b"./ex\xe9cute.sh",
        folder,
        b"arg\xff",
        b"caf\xe9",
    ]
    assert engine.job(job).name == "ex\\xe9cute.sh"


@pytest.mark.parametrize(
    "field, job, env",
    [
        ("args.jobs[0].command[0]", {"name": "x", "command": ["/bin/\ud800"]}, None),
        ("args.jobs[0].command[1]", {"name": "x", "command": ["echo", "a\udfffb"]}, None),
        (
            "args.jobs[0].workdir",
            {"name": "x", "command": ["true"], "workdir": "/tmp/\ud800"},
            None,
        ),
        ("args.jobs[0].env.X", {"name": "x", "command": ["true"], "env": {"X": "\ud800"}}, None),
        ("args.env.HOME", {"name": "x", "command": ["true"]}, {"HOME": "\udbff"}),
        ("args.jobs[0].name", {"name": "\ud800", "command": ["true"]}, None),
    ],
)
def test_a_lone_surrogate_over_the_socket_is_an_invalid_request(
    engine: EngineHandle, field: str, job: dict, env: dict | None
) -> None:
    """What no file name can hold is refused at the request, naming where it is."""
    with pytest.raises(EngineError) as info:
        engine.client.request("submit", jobs=[{"workdir": "/", **job}], env=env or {})
    assert info.value.code == "invalid_args"
    assert str(info.value).startswith(f"invalid request: {field} holds a lone surrogate")
    assert engine.client.request("jobs")["jobs"] == []
    assert engine.client.request("ping")["pid"] == engine.pid


def test_a_non_utf8_name_sent_raw_is_refused_clearly(engine: EngineHandle) -> None:
    """A job's name is a label: it must be text (the CLI makes one from a program's bytes)."""
    with pytest.raises(EngineError) as info:
        engine.client.request(
            "submit", jobs=[{"name": "donn\udce9es", "command": ["true"], "workdir": "/"}], env={}
        )
    assert info.value.code == "invalid_args"
    assert "jobs[0].name: a name must be text (UTF-8)" in str(info.value)


# ------------------------------------------------------------ outcomes the store refuses
def refuse_settling(db: Path, job_id: int, *, unless_reason: str | None = None) -> None:
    """Inject the fault: the store refuses to close job `job_id`'s attempts (every write of
    their end state aborts), unless the reason starts with `unless_reason`."""
    condition = f"OLD.job_id = {job_id} AND NEW.state NOT IN ('launching', 'running')"
    if unless_reason:
        condition += f" AND NEW.reason NOT LIKE '{unless_reason}%'"
    with sqlite3.connect(db) as conn:
        conn.execute(
            f"CREATE TRIGGER refuse_settling BEFORE UPDATE OF state ON attempts WHEN {condition} "
            "BEGIN SELECT RAISE(ABORT, 'injected fault: the store refuses this outcome'); END"
        )


def allow_settling(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER refuse_settling")


def cpu_seconds(pid: int, over: float) -> float:
    proc = psutil.Process(pid)
    before = sum(proc.cpu_times()[:2])
    time.sleep(over)
    return sum(proc.cpu_times()[:2]) - before


def test_an_outcome_the_store_refuses_stops_nothing_and_is_recorded_later(
    engine: EngineHandle, tmp_path: Path
) -> None:
    gate, started = tmp_path / "gate", tmp_path / "started"
    (stuck,) = engine.submit(
        {"name": "stuck", "command": ["sh", "-c", f"trap '' TERM; touch {started}; sleep 60"]},
    )
    wait_for(started.exists, what="the stuck job to run")
    (other,) = engine.submit(
        {"name": "other", "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done"]}
    )
    engine.wait_state(other, "running")
    refuse_settling(engine.home.db, stuck)

    # cancel: SIGTERM is ignored, SIGKILL follows at once; its end cannot be stored
    engine.client.request("cancel", jobs=[stuck], grace=0.1)
    time.sleep(0.5)
    gate.touch()
    assert engine.wait_state(other, {"succeeded", "failed"}).state == "succeeded"
    assert engine.job(stuck).state == "running"  # not recorded yet, and not lost

    # no busy loop on the past kill deadline, no log line per retry
    assert engine.pid is not None
    assert cpu_seconds(engine.pid, 2.0) < 0.5
    log_size = engine.home.engine_log.stat().st_size
    time.sleep(2.5)
    assert engine.home.engine_log.stat().st_size == log_size
    assert log_size < LOG_LIMIT

    # once the store takes it, the real outcome is recorded
    allow_settling(engine.home.db)
    job = engine.wait_state(stuck, {"cancelled", "failed"}, timeout=20)
    assert job.state == "cancelled"
    assert "SIGKILL" in job.reason


def test_an_outcome_that_cannot_be_stored_fails_the_job_with_the_reason(
    engine: EngineHandle,
) -> None:
    (job_id,) = engine.submit({"name": "refused", "command": ["sh", "-c", "sleep 0.3"]})
    engine.wait_state(job_id, "running")
    refuse_settling(engine.home.db, job_id, unless_reason="gpudesk could not record")
    job = engine.wait_state(job_id, {"succeeded", "failed"})
    assert job.state == "failed"
    assert job.reason.startswith(
        "gpudesk could not record how this attempt ended (IntegrityError: injected fault"
    )
    (after,) = engine.submit({"name": "after", "command": ["true"]})
    assert engine.wait_state(after, {"succeeded", "failed"}).state == "succeeded"
    log = engine.home.engine_log.read_text()
    assert log.count("could not record how attempt 1 of job") == 1


def test_an_engine_restart_recovers_past_an_outcome_the_store_refuses(
    engine: EngineHandle,
) -> None:
    (lost,) = engine.submit({"name": "lost", "command": ["sleep", "60"]})
    engine.wait_state(lost, "running")
    pgid = engine.job(lost).pgid
    engine.stop()
    os.killpg(pgid, 9)  # it dies while no engine runs, leaving no exit record
    wait_for(lambda: not psutil.pid_exists(pgid), what="the job to die")
    refuse_settling(engine.home.db, lost)

    engine.start()  # recovery cannot settle it: the engine starts all the same
    (after,) = engine.submit({"name": "after", "command": ["true"]})
    assert engine.wait_state(after, {"succeeded", "failed"}).state == "succeeded"
    assert engine.job(lost).state == "running"

    allow_settling(engine.home.db)
    job = engine.wait_state(lost, {"failed"}, timeout=20)
    assert job.reason == (
        "the job's processes ended while the engine was down and left no exit record"
    )


def test_exported_shell_functions_do_not_block_submit(engine: EngineHandle, tmp_path: Path) -> None:
    """bash's `export -f greet` puts `BASH_FUNC_greet%%` in the environment (Lmod's `module`
    is one such function on most clusters). Every submit from that shell carries it, so it must
    be taken as execve takes it, and the job's bash still finds the function."""
    env = {**os.environ, "BASH_FUNC_greet%%": "() {  echo hello from an exported function\n}"}
    result = subprocess.run(
        [*GPUDESK, "submit", "--", "bash", "-c", "greet"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    job_id = submitted_id(result)
    (job,) = engine.wait_all_done([job_id])
    assert job.state == "succeeded", job
    logs = cli("logs", str(job_id))
    assert "hello from an exported function" in logs.stdout, logs.stdout + logs.stderr
