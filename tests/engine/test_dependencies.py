"""Job dependencies and waiting on the real daemon: `submit --after` (ids or names), a failed
or cancelled dependency cancelling what runs after it, `gpudesk wait` and `logs -f` exiting
with the job's status."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, module_engine, wait_for
from store_refusal import store_refusing

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60)


def submitted_id(result: subprocess.CompletedProcess) -> int:
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[2])  # "submitted job 3 (name)"


def test_a_chain_runs_in_order_and_a_failure_cancels_what_runs_after_it(
    engine: EngineHandle, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    first = submitted_id(
        gpudesk("submit", "--name", "prep", "--", "sh", "-c", f"sleep 0.5; echo prep >> {trace}")
    )
    second = submitted_id(
        gpudesk(
            "submit",
            "--name",
            "train",
            "--after",
            "prep",
            "--",
            "sh",
            "-c",
            f"echo train >> {trace}",
        )
    )
    broken = submitted_id(gpudesk("submit", "--name", "broken", "--", "sh", "-c", "exit 4"))
    # one by id and one by name, comma-separated: both must succeed first
    child = submitted_id(
        gpudesk("submit", "--name", "child", "--after", f"{second},broken", "--", "true")
    )
    grandchild = submitted_id(
        gpudesk("submit", "--name", "grandchild", "--after", str(child), "--", "true")
    )

    waited = gpudesk("wait", str(second), str(grandchild), str(first))
    # the first of the jobs named that did not succeed is grandchild: cancelled, never ran
    assert waited.returncode == 1, waited.stderr
    assert trace.read_text() == "prep\ntrain\n"
    prep, train = engine.show(first).job, engine.show(second).job
    assert train.started_at is not None and prep.ended_at is not None
    assert train.started_at >= prep.ended_at
    assert train.spec.after == [first]
    shown = engine.show(child).job
    assert shown.state == "cancelled" and shown.started_at is None
    assert shown.reason == f"job {broken} (broken), which it runs after, failed; this job never ran"
    assert engine.show(grandchild).job.reason == (
        f"job {child} (child), which it runs after, cancelled; this job never ran"
    )
    lines = waited.stdout.splitlines()
    assert f"job {second} (train) succeeded: exit code 0" in lines
    assert any(line.startswith(f"job {grandchild} (grandchild) cancelled: ") for line in lines)


def test_a_waiting_job_says_what_it_waits_for(engine: EngineHandle, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    blocker = submitted_id(
        gpudesk(
            "submit",
            "--name",
            "blocker",
            "--",
            "sh",
            "-c",
            f"while [ ! -e {gate} ]; do sleep 0.02; done",
        )
    )
    after = submitted_id(
        gpudesk("submit", "--name", "after", "--after", str(blocker), "--", "true")
    )
    engine.wait_state(blocker, "running")
    # a free slot is there (2 slots), yet it waits
    waiting = wait_for(lambda: engine.show(after).waiting, 10.0, what="a waiting reason")
    assert waiting == f"waiting: runs after job {blocker} (blocker), which is running"
    assert engine.show(after).job.state == "queued"
    gate.touch()
    assert gpudesk("wait", "after").returncode == 0


def test_wait_and_logs_follow_exit_with_the_jobs_status(engine: EngineHandle) -> None:
    job = submitted_id(gpudesk("submit", "--name", "four", "--", "sh", "-c", "echo out; exit 4"))
    assert gpudesk("wait", str(job)).returncode == 4
    follow = gpudesk("logs", "-f", str(job))
    assert follow.returncode == 4
    assert follow.stdout == "out\n"  # the job's output only; how it ended goes to stderr
    assert follow.stderr == f"--- gpudesk: job {job} (four) failed: exit code 4 ---\n"
    killed = submitted_id(gpudesk("submit", "--name", "killed", "--", "sh", "-c", "kill -9 $$"))
    assert gpudesk("wait", "-q", str(killed)).returncode == 128 + 9
    slow = submitted_id(gpudesk("submit", "--name", "slow", "--", "sleep", "30"))
    timed_out = gpudesk("wait", "--timeout", "0.3", str(slow))
    assert timed_out.returncode == 124
    assert "gave up after 0.3 s" in timed_out.stderr
    gpudesk("cancel", str(slow))


# The tests on `refusing_engine` run one after another on one worker (--dist loadgroup): spread
# over the workers, each would make the module's engine again.
REFUSALS = pytest.mark.xdist_group("test_dependencies_refusals")


@pytest.fixture(scope="module")
def refusing_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    """One engine for the tests whose every submit is refused: each checks that it queued
    nothing, which holds on an engine they share as on one of their own."""
    with module_engine(tmp_path_factory, "refusals") as handle:
        yield handle


@REFUSALS
def test_an_unknown_dependency_or_a_bad_list_queues_nothing(
    refusing_engine: EngineHandle,
) -> None:
    engine = refusing_engine
    # bad input, said as the option that named the job (not the engine's `jobs[0].after`)
    missing = gpudesk("submit", "--after", "999", "--", "true")
    assert (missing.returncode, missing.stderr) == (
        2,
        "error: --after: there is no job 999 to run after (gpudesk queue --all lists the jobs)\n",
    )
    missing = gpudesk("submit", "--after-notok", "998", "--", "true")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: --after-notok: there is no job 998 to run after")
    empty = gpudesk("submit", "--after", "1,", "--", "true")
    assert empty.returncode == 2 and "--after: expected job ids or names" in empty.stderr
    unknown_name = gpudesk("submit", "--after", "nosuchjob", "--", "true")
    assert unknown_name.returncode == 2 and "Traceback" not in unknown_name.stderr
    assert unknown_name.stderr.startswith(
        "error: --after: there is no job named 'nosuchjob' to run after"
    )
    assert engine.client.request("jobs")["jobs"] == []
    unknown_wait = gpudesk("wait", "nosuchjob")
    assert unknown_wait.returncode != 0 and "Traceback" not in unknown_wait.stderr


@REFUSALS
def test_station_only_options_sent_to_slurm_are_said_as_the_options(
    refusing_engine: EngineHandle,
) -> None:
    """--array, --after-any, --after-notok and --notify with --on slurm: refused as the
    options (not the request's `jobs[0]: arrays, after_any, …`), exit 2, nothing queued."""
    engine = refusing_engine
    for extra in (["--array", "0-2"], ["--notify", "echo done"]):
        refused = gpudesk("submit", "--on", "slurm", *extra, "--", "true")
        assert (refused.returncode, refused.stderr) == (
            2,
            "error: --array, --after-any, --after-notok and --notify are for the station's "
            "jobs; a job sent to Slurm cannot take them yet (it takes --begin and --comment)\n",
        )
    assert engine.client.request("jobs")["jobs"] == []


def test_a_time_limit_stops_the_job_and_fails_it_as_timed_out(engine: EngineHandle) -> None:
    script = 'trap "echo stopped; exit 7" TERM; sleep 30 & wait'
    job = submitted_id(
        gpudesk("submit", "--time", "1s", "--name", "bounded", "--", "sh", "-c", script)
    )
    waited = gpudesk("wait", str(job))
    assert waited.returncode == 7  # the job's own status after SIGTERM
    shown = engine.show(job)
    assert shown.job.state == "failed"
    assert shown.job.reason == "timed out: ran past its time limit of 1 s (exit code 7)"
    assert shown.job.spec.time_limit_s == 1.0
    ran = shown.job.ended_at - shown.job.started_at
    assert 1.0 <= ran < 10.0  # stopped at the limit, well before its 30 s sleep
    assert any(e.kind == "time_limit" for e in shown.events)
    assert gpudesk("logs", str(job)).stdout == "stopped\n"
    within = submitted_id(gpudesk("submit", "--time", "1m", "--", "true"))
    assert gpudesk("wait", str(within)).returncode == 0


@REFUSALS
def test_a_bad_time_limit_is_a_usage_error(refusing_engine: EngineHandle) -> None:
    engine = refusing_engine
    for text, fragment in (
        ("1x", "is not a duration"),
        ("0.5s", "1 s to 366 days; 0.5s is 0.5 s"),
        ("366-00:00:01", "366 days; 366-00:00:01 is more than 366 days"),  # not 3.16224e+07 s
    ):
        result = gpudesk("submit", "--time", text, "--", "true")
        assert result.returncode == 2 and fragment in result.stderr, result.stderr
    assert engine.client.request("jobs")["jobs"] == []


@pytest.mark.slow(7)
def test_queue_filters_by_state_and_name(engine: EngineHandle, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    for name, script in (
        ("train-a", "true"),
        ("train-b", "exit 3"),
        ("eval", f"while [ ! -e {gate} ]; do sleep 0.02; done"),
    ):
        submitted_id(gpudesk("submit", "--name", name, "--", "sh", "-c", script))
    held = submitted_id(gpudesk("submit", "--name", "held-one", "--after", "eval", "--", "true"))
    gpudesk("hold", str(held))
    wait_for(lambda: engine.show("train-b").job.state == "failed", 10.0, what="train-b to fail")

    def names(*args: str) -> list[str]:
        result = gpudesk("queue", "--json", *args)
        assert result.returncode == 0, result.stderr
        return [job["name"] for job in json.loads(result.stdout)["jobs"]]

    assert names("--state", "failed,succeeded") == ["train-a", "train-b"]
    assert names("--name", "train-*", "--all") == ["train-a", "train-b"]
    assert names("--name", "train-*") == []  # finished, and no --all
    assert names("--state", "held") == ["held-one"]
    assert names("--state", "queued") == []  # the only queued job is held
    assert names("--state", "running", "--name", "ev*") == ["eval"]
    wrong = gpudesk("queue", "--state", "bogus")
    assert wrong.returncode == 2 and "bogus is not a job state" in wrong.stderr
    assert gpudesk("queue", "--state", "queued").stdout.strip() == "no jobs match"
    gate.touch()


def test_a_profiles_after_chain_runs_in_order_and_stops_at_a_failure(
    engine: EngineHandle, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    profile = tmp_path / "chain.toml"
    profile.write_text(
        f"""
[[jobs]]
name = "report"
command = ["sh", "-c", "echo report >> {trace}"]
after = ["train-{{lr}}"]
[[jobs]]
name = "prep"
command = ["sh", "-c", "sleep 0.3; echo prep >> {trace}"]
[[sweeps]]
name = "train-{{lr}}"
command = ["sh", "-c", "echo train {{lr}} >> {trace}; [ {{lr}} = 1 ]"]
grid = {{ lr = [1, 2] }}
after = "prep"
"""
    )
    result = gpudesk("run", str(profile), "--json")
    assert result.returncode == 1, result.stderr  # train-2 failed, so report never ran
    lines = trace.read_text().splitlines()
    assert lines[0] == "prep" and sorted(lines[1:]) == ["train 1", "train 2"]
    jobs = {job["name"]: job for job in json.loads(result.stdout)["jobs"]}
    assert jobs["report"]["state"] == "cancelled"
    shown = engine.show("report").job
    assert shown.reason.endswith("(train-2), which it runs after, failed; this job never ran")
    assert shown.spec.after == [jobs["train-1"]["id"], jobs["train-2"]["id"]]


def test_a_time_limit_stops_the_job_when_its_event_is_refused(engine: EngineHandle) -> None:
    """The store refuses the "time_limit" event (a real SQLite trigger): the job is stopped
    and failed as timed out all the same, and no engine step fails over it. (Before, the
    refused event cut that turn's check short, logged as a failed engine step.)"""
    refused = "BEFORE INSERT ON events WHEN NEW.kind = 'time_limit'"
    with store_refusing(engine.home.db, refused, "the store refuses the event"):
        job = submitted_id(gpudesk("submit", "--time", "1s", "--", "sleep", "30"))
        assert gpudesk("wait", str(job)).returncode != 0
    shown = engine.show(job)
    assert shown.job.reason is not None and shown.job.reason.startswith("timed out: ran past")
    assert not any(e.kind == "time_limit" for e in shown.events)
    said = engine.home.engine_log.read_text()
    assert "its time limit event was not stored" in said
    assert "engine step failed" not in said


def test_a_job_after_one_that_already_failed_is_said_cancelled_not_held(
    engine: EngineHandle,
) -> None:
    """Taken and cancelled in the same turn (as Slurm's kill_invalid_depend): `submit --hold`
    said `held: gpudesk release N lets it start` and --json `held: true` of a job already
    cancelled. It says the cancel and its reason now; the exit stays 0, as sbatch's."""
    failed = submitted_id(gpudesk("submit", "--name", "bad", "--", "false"))
    assert gpudesk("wait", "-q", str(failed)).returncode == 1
    held = gpudesk("submit", "--hold", "--after", str(failed), "--", "true")
    job = submitted_id(held)
    assert "held:" not in held.stdout, held.stdout
    assert held.stderr == (
        f"note: job {job} was cancelled at once: job {failed} (bad), which it runs after, "
        "failed; this job never ran\n"
    )
    shown = json.loads(
        gpudesk("submit", "--json", "--hold", "--after", str(failed), "--", "true").stdout
    )
    assert (shown["held"], shown["state"]) == (False, "cancelled")
    # after-any of a failed job is met: queued and held as asked, nothing said
    fine = gpudesk("submit", "--json", "--hold", "--after-any", str(failed), "--", "true")
    assert (json.loads(fine.stdout)["held"], fine.stderr) == (True, "")
    gpudesk("cancel", str(json.loads(fine.stdout)["id"]))


def test_logs_of_a_job_with_no_output_says_why(engine: EngineHandle, tmp_path: Path) -> None:
    """`gpudesk logs` of a job cancelled while queued said `has not started yet: ` (it never
    will), and of one whose attempt could not start (its folder gone) said nothing at all."""
    cancelled = submitted_id(gpudesk("submit", "--hold", "--", "true"))
    gpudesk("cancel", str(cancelled))
    said = gpudesk("logs", str(cancelled))
    assert said.stderr == (
        f"job {cancelled} never ran: it was cancelled before it started (while queued)\n"
    )
    gone = tmp_path / "gone"
    gone.mkdir()
    launch_failed = submitted_id(
        subprocess.run(
            [*GPUDESK, "submit", "--hold", "--", "true"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=gone,
        )
    )
    gone.rmdir()
    gpudesk("release", str(launch_failed))
    gpudesk("wait", "-q", str(launch_failed))
    said = gpudesk("logs", str(launch_failed))
    assert said.stderr == (
        f"job {launch_failed}'s attempt 1 never started: the working directory {gone} does "
        "not exist\n"
    )
    held = submitted_id(gpudesk("submit", "--hold", "--", "true"))
    assert gpudesk("logs", str(held)).stderr.startswith(f"job {held} has not started yet: held")
    gpudesk("cancel", str(held))


def test_a_reader_that_leaves_the_pipe_is_no_error(engine: EngineHandle) -> None:
    """`gpudesk logs J | head -1` exited 1 (typer's own EPIPE handling), where `gpudesk queue |
    head` exits 0; both 0, nothing said."""
    job = submitted_id(gpudesk("submit", "--", "seq", "200000"))  # far more than a pipe holds
    assert gpudesk("wait", "-q", str(job)).returncode == 0
    reader = subprocess.Popen(
        [*GPUDESK, "logs", str(job)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.readline() == b"1\n"
    reader.stdout.close()  # as head -1 does once it has its line
    assert reader.wait(60) == 0
    assert reader.stderr.read() == b""
