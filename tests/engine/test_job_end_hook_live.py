"""Hooks run when a job ends (issue 41, item 5; gpudesk.hw.job_hooks) on a real personal
engine: the station's `hooks.toml` hook and a job's `--notify` get the job's variables; a
hanging hook is killed at its timeout while the engine answers and runs other jobs; a failing
one changes nothing about the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import EngineHandle, wait_for

from gpudesk.core.jobs import JobSpec
from gpudesk.paths import Home

GPUDESK = [sys.executable, "-m", "gpudesk"]
VARIABLES = (
    "GPUDESK_JOB_ID",
    "GPUDESK_JOB_NAME",
    "GPUDESK_JOB_STATE",
    "GPUDESK_JOB_EXIT_CODE",
    "GPUDESK_JOB_OWNER",
    "GPUDESK_JOB_OWNER_UID",
    "GPUDESK_JOB_REASON",
)


def gpudesk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60)


def engine_with_hook(home: Home, command: list[str], timeout_s: float) -> EngineHandle:
    home.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    (home.root / "hooks.toml").write_text(
        f"[job_end]\ncommand = {json.dumps(command)}\ntimeout_s = {timeout_s}\n"
    )
    handle = EngineHandle(home)
    handle.start()
    return handle


def dump_env(path: Path) -> list[str]:
    """A hook that writes the job's variables, as JSON, to `path` (one object per line)."""
    script = (
        "import json, os, sys; "
        f"names = {list(VARIABLES)!r}; "
        "open(sys.argv[1], 'a').write(json.dumps({n: os.environ.get(n) for n in names}) + '\\n')"
    )
    return [sys.executable, "-c", script, str(path)]


def test_the_station_hook_gets_the_variables_of_a_job_that_really_failed(
    home: Home, tmp_path: Path
) -> None:
    out = tmp_path / "hook.json"
    engine = engine_with_hook(home, dump_env(out), 10)
    try:
        (job_id,) = engine.submit({"name": "breaks", "command": ["sh", "-c", "exit 3"]})
        engine.wait_state(job_id, "failed")
        seen = wait_for(lambda: out.exists() and out.read_text(), 20, what="the hook to run")
        told = json.loads(seen.splitlines()[0])
        assert told == {
            "GPUDESK_JOB_ID": str(job_id),
            "GPUDESK_JOB_NAME": "breaks",
            "GPUDESK_JOB_STATE": "failed",
            "GPUDESK_JOB_EXIT_CODE": "3",
            "GPUDESK_JOB_OWNER": engine.job(job_id).user,
            "GPUDESK_JOB_OWNER_UID": str(os.getuid()),
            "GPUDESK_JOB_REASON": "exit code 3",
        }
        log = wait_for(
            lambda: (p := home.root / "hooks.log").exists() and p.read_text(), 10, what="its log"
        )
        assert f"job {job_id}'s job-end hook: exit 0" in log
        # a job cancelled before it ran ends too (submitted held: a hold after the submit may
        # come after the engine has started it, as it did once beside a CPU hog)
        spec = JobSpec.from_dict({"name": "never", "command": ["true"], "workdir": str(home.root)})
        (held,) = engine.api.submit_jobs([spec], hold=True).ids
        engine.api.cancel([held])
        wait_for(lambda: len(out.read_text().splitlines()) == 2, 20, what="the second ending")
        assert json.loads(out.read_text().splitlines()[1])["GPUDESK_JOB_STATE"] == "cancelled"
    finally:
        engine.client.close()


def test_a_hanging_hook_is_killed_at_its_timeout_and_stalls_nothing(
    home: Home, tmp_path: Path
) -> None:
    pid_file = tmp_path / "hook.pid"
    hang = ["sh", "-c", f"echo $$ > {pid_file}; echo hanging; exec sleep 120"]
    engine = engine_with_hook(home, hang, 4)
    try:
        (first,) = engine.submit({"name": "first", "command": ["true"]})
        pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20))
        hook_started = time.monotonic()
        # while it hangs the engine answers at once, and starts and ends another job
        asked = time.monotonic()
        engine.api.ping()
        assert time.monotonic() - asked < 0.5
        (second,) = engine.submit({"name": "second", "command": ["true"]})
        assert engine.wait_state(second, "succeeded", timeout=10).state == "succeeded"
        assert time.monotonic() - hook_started < 4, "the check came too late to mean anything"
        os.kill(pid, 0)  # the hook still hangs
        log = wait_for(
            lambda: "killed after its timeout of 4 s" in (text := _log(home)) and text,
            20,
            what="the hook to be killed",
        )
        assert "  | hanging" in log
        wait_for(lambda: not _alive(pid), 5, what="the hook's process to be gone")
        job = engine.job(first)
        assert job.state == "succeeded" and job.reason == "exit code 0"
        engine_log = (home.root / "engine.log").read_text()
        assert f"job {first}'s job-end hook: killed after its timeout of 4 s" in engine_log
    finally:
        engine.client.close()


def test_a_jobs_notify_runs_when_it_ends_and_a_failing_one_changes_nothing(
    engine: EngineHandle, tmp_path: Path
) -> None:
    out = tmp_path / "notified"
    command = f"echo $GPUDESK_JOB_ID $GPUDESK_JOB_STATE $GPUDESK_JOB_EXIT_CODE >> {out}; exit 5"
    done = gpudesk("submit", "--parsable", "--notify", command, "--", "sh", "-c", "exit 2")
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    text = wait_for(lambda: out.exists() and out.read_text(), 20, what="the notify to run")
    assert text == f"{job_id} failed 2\n"
    job = engine.wait_state(job_id, "failed")
    assert job.exit_code == 2 and job.reason == "exit code 2"
    assert job.spec.notify == command
    log = wait_for(lambda: "exit 5" in (t := _log(engine.home)) and t, 10, what="its log")
    assert f"job {job_id}'s --notify" in log
    # and in the job's own events, as `gpudesk show` lists them
    said = wait_for(
        lambda: [e.message for e in engine.show(job_id).events if e.kind == "hook"],
        10,
        what="the hook's event",
    )
    assert said == [f"--notify (as {job.user}): exit 5 in {said[0].split(' in ')[1]}"]
    assert "hook" in gpudesk("show", str(job_id)).stdout
    bad = gpudesk("submit", "--notify", "echo hi\x1b[2J", "--", "true")
    assert bad.returncode == 2 and "--notify: " in bad.stderr and "control characters" in bad.stderr


def _log(home: Home) -> str:
    path = home.root / "hooks.log"
    return path.read_text() if path.exists() else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_hook_still_running_when_the_engine_stops_goes_with_it(
    home: Home, tmp_path: Path
) -> None:
    pid_file = tmp_path / "hook.pid"
    engine = engine_with_hook(home, ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 120"], 600)
    try:
        engine.submit({"name": "one", "command": ["true"]})
        pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20))
        engine.stop()
        wait_for(lambda: not _alive(pid), 10, what="the hook to go with the engine")
    finally:
        engine.client.close()


def test_a_notify_commands_secrets_are_hidden_where_the_job_is_listed(
    engine: EngineHandle,
) -> None:
    command = "curl -s 'https://hooks.example.org/in?channel=lab&token=s3cret'"
    (job_id,) = engine.submit({"name": "quiet", "command": ["true"], "notify": command})
    shown = engine.job(job_id).spec.notify
    assert shown is not None and "channel=lab&token=***" in shown and "s3cret" not in shown
    assert "s3cret" not in gpudesk("show", str(job_id)).stdout
    assert "s3cret" not in gpudesk("queue", "--all", "--json").stdout


def test_hooks_toml_changed_while_the_engine_runs_is_read_again(home: Home, tmp_path: Path) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    engine = engine_with_hook(home, dump_env(first), 10)
    config = home.root / "hooks.toml"

    def changes() -> list[str]:
        return [c.message for c in engine.api.status().station_changes]

    try:
        config.chmod(0o666)  # made unsafe: the station's hook is off
        said = wait_for(
            lambda: [m for m in changes() if m.startswith("hooks.toml changed and is not used")],
            20,
            what="the unsafe hooks.toml to be said",
        )
        assert "others may write it" in said[0]
        (before,) = engine.submit({"name": "unhooked", "command": ["true"]})
        engine.wait_state(before, "succeeded")
        config.write_text(f"[job_end]\ncommand = {json.dumps(dump_env(second))}\n")
        config.chmod(0o600)
        wait_for(
            lambda: any(m.startswith("hooks.toml read again") for m in changes()),
            20,
            what="hooks.toml to be read again",
        )
        (after,) = engine.submit({"name": "hooked", "command": ["true"]})
        engine.wait_state(after, "succeeded")
        seen = wait_for(lambda: second.exists() and second.read_text(), 20, what="the new hook")
        assert [json.loads(line)["GPUDESK_JOB_ID"] for line in seen.splitlines()] == [str(after)]
        assert not first.exists()  # the first hook never ran: it was off before any job ended
        assert str(second) not in "".join(changes())  # the event does not repeat its words
    finally:
        engine.stop()
        engine.client.close()
