"""The `gpudesk` command as a user runs it: real processes, a real engine, real exit codes."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import EngineHandle, cli_in_fresh_python, processes_in_group, wait_for

from gpudesk.core.identity import user_name
from gpudesk.paths import Home

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(*args: str, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GPUDESK, *args], capture_output=True, text=True, timeout=timeout, **kwargs
    )


def write_profile(tmp_path: Path, body: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def long_jobs_profile(tmp_path: Path, command: list[str], repeat: int) -> Path:
    """`repeat` jobs named long#N on a 2-slot CPU station, each running `command`."""
    return write_profile(
        tmp_path,
        f"""
        [station]
        backend = "none"
        slots = 2
        [[jobs]]
        name = "long"
        command = {json.dumps(command)}
        repeat = {repeat}
    """,
    )


def start_interruptible_run(profile: Path) -> subprocess.Popen:
    """`gpudesk run` as from a terminal. A shell without job control starts background commands
    with SIGINT ignored, and Python then installs no KeyboardInterrupt handler: restore it.
    PYTHONFAULTHANDLER lets a test that finds the run stuck ask where (`where_it_hangs`)."""
    return subprocess.Popen(
        [*GPUDESK, "run", str(profile)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def swallowed_by_site(stderr: str) -> bool:
    """Whether Python lost a Ctrl-C before any gpudesk code ran: Python 3.11 wraps an interrupt
    in a `__set_name__` (as `ipaddress` is imported by an editable install's .pth hook) in a
    RuntimeError, and `site` reports an Exception in a .pth line and goes on."""
    return "Remainder of file ignored" in stderr and "KeyboardInterrupt" in stderr


def where_it_hangs(run: subprocess.Popen) -> str:
    """What a run that outlived its Ctrl-C was doing: its signal masks (was SIGINT blocked,
    ignored or pending?), then each thread's Python stack, which faulthandler prints as SIGABRT
    ends it."""
    status = Path(f"/proc/{run.pid}/status").read_text(errors="replace")
    masks = [line for line in status.splitlines() if line.startswith(("Sig", "ShdPnd"))]
    run.send_signal(signal.SIGABRT)
    out, err = run.communicate(timeout=30)
    return "\n".join([*masks, "stdout:", out, "stderr:", err])


def test_help_is_fast_to_import_and_never_loads_torch() -> None:
    printed, modules = cli_in_fresh_python(
        ["--help"], ["top", "--help"], ["run", "--help"], ["engine", "--help"]
    )
    assert "Usage: gpudesk" in printed
    assert "torch" not in modules
    assert "gpudesk.hw.mig" not in modules  # the MIG layer loads on use


def test_ctrl_c_while_the_cli_still_loads_exits_130_without_a_traceback() -> None:
    # Ctrl-C lands inside an import (typer here) the way it does when pressed in the first
    # few hundred milliseconds of `gpudesk top`
    code = (
        "import builtins, sys\n"
        "real_import = builtins.__import__\n"
        "def interrupted(name, *args, **kwargs):\n"
        "    if name == 'typer':\n        raise KeyboardInterrupt\n"
        "    return real_import(name, *args, **kwargs)\n"
        "builtins.__import__ = interrupted\n"
        "sys.argv = ['gpudesk', 'top']\n"
        "from gpudesk.cli.entry import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr


def test_run_a_profile_to_completion(engine: EngineHandle, tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path,
        """
        name = "mini"
        [station]
        backend = "none"
        slots = 2
        [[jobs]]
        name = "hello"
        command = ["sh", "-c", "echo hello from $GPUDESK_JOB_NAME"]
        [[sweeps]]
        name = "sq-{n}"
        command = ["sh", "-c", "echo $(({n} * {n}))"]
        grid = { n = [2, 3] }
    """,
    )
    report = tmp_path / "report.json"
    result = gpudesk("run", str(profile), "--report", str(report))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mini: 3 succeeded" in result.stdout
    assert "hello  succeeded" in result.stdout or "hello" in result.stdout
    data = json.loads(report.read_text())
    assert data["succeeded"] is True
    jobs = {j["name"]: j for j in data["jobs"]}
    assert set(jobs) == {"hello", "sq-2", "sq-3"}
    assert Path(jobs["sq-3"]["log"]).read_text() == "9\n"
    assert Path(jobs["hello"]["log"]).read_text() == "hello from hello\n"
    assert all(j["attempts"] == 1 and j["exit_code"] == 0 for j in jobs.values())


@pytest.mark.slow(6)
def test_run_leaves_the_station_as_it_is_unless_asked_and_says_what_differs(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A profile's [station] asking for fifo against a personal engine running `auto`: a plain
    run leaves the policy as it is and says that it differs and how to apply it;
    `--apply-station` applies it and says so, in its output and as an engine event; a further
    run has nothing to say. (A system engine's refusal is tested at the request level:
    tests/engine/test_access.py.)"""
    (tmp_path / "profiles").mkdir()
    write_profile(
        tmp_path / "profiles",
        """
        name = "lab"
        [[jobs]]
        name = "one"
        command = ["true"]
        [station]
        backend = "none"  # the engine's CPU station
        policy = "fifo"
        """,
        name="lab.toml",
    )

    def settings() -> dict:
        return json.loads(gpudesk("engine", "status", "--json").stdout)

    plain = gpudesk("run", "profiles/lab.toml", cwd=tmp_path)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    said = " ".join(plain.stdout.split())
    assert (
        "station: not applied: policy auto → fifo (gpudesk run --apply-station applies it; "
        "gpudesk engine set keeps it; from profiles/lab.toml [station])"
    ) in said
    status = settings()
    assert status["station"]["policy"] == "auto" and status["station_changes"] == []

    first = gpudesk("run", "--apply-station", "profiles/lab.toml", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    said = "station: policy auto → fifo (from profiles/lab.toml [station])"
    assert said in first.stdout.splitlines()
    assert "station: policy auto → fifo (by " in engine.home.engine_log.read_text()
    status = settings()
    assert status["station"]["policy"] == "fifo" and status["station"]["slots"] == 2
    [change] = status["station_changes"]
    assert change["kind"] == "station" and "policy auto → fifo (by " in change["message"]
    assert "changed: " in gpudesk("engine", "status").stdout  # the event, for people
    again = gpudesk("run", "profiles/lab.toml", cwd=tmp_path)
    assert again.returncode == 0 and "station:" not in again.stdout


def test_run_says_an_engine_refusal_at_the_profiles_table(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A real engine refuses the fourth job of the request (a Slurm job cannot run
    after_any): `gpudesk run` says it at the [[jobs]] table the user wrote, not as the
    request's `jobs[3]` (its index after the sweep was expanded); nothing is queued."""
    write_profile(
        tmp_path,
        """
        name = "swept"

        [[sweeps]]
        name = "s{x}"
        command = ["true"]
        grid = { x = [1, 2, 3] }

        [[jobs]]
        name = "later"
        command = ["true"]
        after_any = ["s{x}"]
        """,
        name="p.toml",
    )
    done = gpudesk("run", "p.toml", "--on", "slurm", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert said.startswith("error: p.toml:9: jobs[0] ('later'): array_task, after_any"), said
    assert "jobs[3]" not in said
    assert json.loads(gpudesk("queue", "--all", "--json").stdout)["jobs"] == []


def test_run_says_the_stations_refusal_of_a_sweeps_job_at_the_sweep(
    sim_engine: EngineHandle, tmp_path: Path
) -> None:
    """The station refuses the third job of the request (8 GPUs on a 4-GPU station), naming
    it by name: `gpudesk run` says it at the [[sweeps]] table that made it, with which of the
    sweep's jobs it is, and exits 2 as before; the jobs before it in the request are not
    queued either."""
    write_profile(
        tmp_path,
        """
        name = "swept"

        [[jobs]]
        name = "prep"
        command = ["true"]
        repeat = 2

        [[sweeps]]
        name = "big{x}"
        command = ["true"]
        gpus = 8
        grid = { x = [1, 2, 3] }
        """,
        name="p.toml",
    )
    done = gpudesk("run", "p.toml", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert said.startswith(
        "error: p.toml:9: sweeps[0] ('big1', point 1 of 3): asks for 8 GPUs but this station "
        "has only 4"
    ), said
    assert "nothing was submitted (nor the 4 other jobs)" in said, said
    assert json.loads(gpudesk("queue", "--all", "--json").stdout)["jobs"] == []


def test_run_exits_non_zero_when_a_job_fails_and_json_report(
    engine: EngineHandle, tmp_path: Path
) -> None:
    profile = write_profile(
        tmp_path,
        """
        [station]
        backend = "none"
        [[jobs]]
        name = "good"
        command = ["true"]
        [[jobs]]
        name = "bad"
        command = ["sh", "-c", "echo boom >&2; exit 4"]
    """,
    )
    result = gpudesk("run", str(profile), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    states = {j["name"]: (j["state"], j["exit_code"]) for j in report["jobs"]}
    assert states == {"good": ("succeeded", 0), "bad": ("failed", 4)}
    assert report["counts"] == {"succeeded": 1, "failed": 1}
    assert "bad  failed: exit code 4" in result.stderr  # progress goes to stderr with --json


def test_a_result_line_nested_past_the_stack_does_not_stop_the_report(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A job's `result {"x": [[[[…` 100,000 deep is not a result (json raised RecursionError,
    and the report ended in a traceback): the report is printed, the exit is the jobs'."""
    script = "print('result {\"acc\": 0.5, \"x\": ' + '[' * 100000 + ']' * 100000 + '}')"
    profile = long_jobs_profile(tmp_path, [sys.executable, "-c", script], repeat=1)
    result = gpudesk("run", str(profile), "--json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    (job,) = json.loads(result.stdout)["jobs"]
    assert job["state"] == "succeeded"


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("[[jobs]\nname = 'x'\n", "p.toml:1: invalid TOML"),
        ("[[jobs]]\nname = 'x'\ncommand = []\n", "p.toml:3: jobs[0].command"),
        ("[[jobs]]\nname = 'x'\ncommand = ['true']\ngpu = 1\n", "did you mean 'gpus'"),
        ("[[jobs]]\nname = 'x'\ncommand = ['true']\ngpus = 'two'\n", "jobs[0].gpus"),
        (
            "[[sweeps]]\nname = 's'\ncommand = ['echo', '{a}']\n"
            "grid = { a = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] }\nrepeat = 1000\n",
            "11,000 jobs",
        ),
    ],
)
def test_bad_profiles_get_a_clear_error_and_exit_2(
    home: Home, tmp_path: Path, body: str, fragment: str
) -> None:
    profile = write_profile(tmp_path, body)
    result = gpudesk("run", str(profile))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: the profile is not valid")
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not home.lock.exists(), "a bad profile must not even start the engine"


def test_a_working_directory_that_is_no_directory_is_refused_before_submitting(
    home: Home, tmp_path: Path
) -> None:
    (tmp_path / "wdfile").touch()
    os.mkfifo(tmp_path / "wdfifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    profile = write_profile(
        tmp_path,
        "[defaults]\nworkdir = 'wdfile'\n"
        "[[jobs]]\nname = 'a'\ncommand = ['true']\n"
        "[[jobs]]\nname = 'b'\ncommand = ['true']\nworkdir = 'wdfifo'\n"
        "[[sweeps]]\nname = 's{d}'\ncommand = ['true']\nworkdir = '{d}'\n"
        "grid = { d = ['missing', 'dangling', '.'] }\n",
    )
    result = gpudesk("run", str(profile))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        "error: the profile is not valid:",
        f"{profile}:2: defaults.workdir: the working directory {tmp_path / 'wdfile'} is not a "
        "directory: it is a regular file",
        f"{profile}:9: jobs[1].workdir: the working directory {tmp_path / 'wdfifo'} is not a "
        "directory: it is a named pipe",
        f"{profile}:13: sweeps[0].workdir: the working directory {tmp_path / 'missing'} does "
        "not exist",
        f"{profile}:13: sweeps[0].workdir: the working directory {tmp_path / 'dangling'} is a "
        "symbolic link to a missing target",
    ]
    assert not home.lock.exists(), "nothing is submitted, no engine started"

    submitted = gpudesk("submit", "--workdir", str(tmp_path / "wdfifo"), "true")
    assert submitted.returncode == 2
    assert submitted.stderr == (
        f"error: --workdir: the working directory {tmp_path / 'wdfifo'} is not a directory: "
        "it is a named pipe\n"
    )
    assert not home.lock.exists()


def test_a_working_directory_no_one_can_enter_is_refused_before_submitting(
    home: Home, tmp_path: Path
) -> None:
    """A symbolic link loop and a name longer than PATH_MAX can never be entered: refused at
    submit (exit 2), as a missing folder is (both were queued, and failed at their start)."""
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    for workdir, why in (
        (str(tmp_path / "loop1"), "Too many levels of symbolic links"),
        (str(tmp_path / ("a/" * 3000)), "File name too long"),
    ):
        submitted = gpudesk("submit", "--workdir", workdir, "true")
        assert submitted.returncode == 2, submitted.stdout + submitted.stderr
        assert submitted.stderr == (
            f"error: --workdir: the working directory {workdir} cannot be entered: {why}\n"
        )
    assert not home.lock.exists(), "nothing is submitted, no engine started"


def test_a_dangling_link_an_empty_name_and_a_boolean_are_said_as_they_are(
    home: Home, tmp_path: Path
) -> None:
    (tmp_path / "dangling.toml").symlink_to(tmp_path / "gone.toml")
    result = gpudesk("run", "dangling.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "error: the profile is not valid:\ndangling.toml: is a symbolic link whose target is "
        f"missing ({str(tmp_path / 'gone.toml')!r})\n"
    )
    for command in (["run", ""], ["export", "slurm", "", str(tmp_path / "out")]):
        result = gpudesk(*command, cwd=tmp_path)
        assert result.returncode == 2
        assert "'': the profile's name is empty" in result.stderr, command
        assert "is a directory" not in result.stderr
    profile = write_profile(tmp_path, "[[jobs]]\nname = 'a'\ncommand = ['true']\ngpus = true\n")
    result = gpudesk("run", str(profile))
    assert result.returncode == 2
    assert "jobs[0].gpus: expected a whole number from 0 to 64, found true (boolean)" in (
        result.stderr
    )
    assert not home.lock.exists()


def test_non_utf8_and_missing_profiles(home: Home, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "caf\xe9"\n')
    for path in (bad, tmp_path / "missing.toml", tmp_path):
        result = gpudesk("run", str(path))
        assert result.returncode == 2
        assert "error:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow(7)
def test_job_control_commands(engine: EngineHandle, tmp_path: Path) -> None:
    result = gpudesk(
        "submit",
        "--name",
        "greet",
        "--json",
        "-e",
        "WHO=world",
        "--",
        "sh",
        "-c",
        "echo hello $WHO; sleep 30",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["id"]
    engine.wait_state(job_id, "running")
    queue = json.loads(gpudesk("queue", "--json").stdout)["jobs"]
    assert [(j["id"], j["state"], j["spec"]["workdir"]) for j in queue] == [
        (job_id, "running", str(tmp_path))
    ]
    table = gpudesk("queue").stdout
    assert "greet" in table and "running" in table and "cpu:" in table
    wait_for(lambda: "hello world" in gpudesk("logs", "greet").stdout, what="the log")
    as_json = json.loads(gpudesk("logs", "greet", "--json").stdout)
    assert (as_json["job"], as_json["name"], as_json["attempt"]) == (job_id, "greet", 1)
    assert as_json["state"] == "running" and "hello world\n" in as_json["output"]
    assert gpudesk("logs", "greet", "--json", "-f").returncode == 2
    shown = gpudesk("show", str(job_id)).stdout
    assert "job 1: greet" in shown and "command    sh -c 'echo hello $WHO; sleep 30'" in shown
    cancelled = gpudesk("cancel", "greet", "--grace", "1")
    assert cancelled.stdout.strip() == f"job {job_id} (greet): stopping"
    engine.wait_state(job_id, "cancelled")
    assert gpudesk("queue").stdout.startswith("no queued or running jobs")
    assert "cancelled" in gpudesk("queue", "--all").stdout
    detail = json.loads(gpudesk("show", "greet", "--json").stdout)
    assert detail["job"]["state"] == "cancelled"
    assert [e["state"] for e in detail["events"] if e["state"]] == [
        "queued",
        "running",
        "cancelled",
    ]


def test_logs_follow_streams_until_the_job_ends(engine: EngineHandle) -> None:
    result = gpudesk(
        "submit", "--json", "--", "sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.2; done"
    )
    job_id = json.loads(result.stdout)["id"]
    followed = gpudesk("logs", "-f", str(job_id), timeout=30)
    assert followed.returncode == 0
    assert followed.stdout == "line 1\nline 2\nline 3\n"


def test_logs_n_prints_the_last_lines_and_with_f_follows_on(
    engine: EngineHandle, tmp_path: Path
) -> None:
    done = json.loads(gpudesk("submit", "--json", "--", "seq", "1000").stdout)["id"]
    engine.wait_state(done, "succeeded")
    assert gpudesk("logs", "-n", "3", str(done)).stdout == "998\n999\n1000\n"
    assert gpudesk("logs", "--lines", "0", str(done)).stdout == ""
    assert gpudesk("logs", "-n", "5000", str(done)).stdout.count("\n") == 1000
    # `tail -n 2 -f`: the last two lines printed by now, then the rest as it comes, then the
    # job's own exit status
    script = "seq 1 50; touch go; while [ ! -e more ]; do sleep 0.1; done; echo 51; exit 3"
    submitted = gpudesk("submit", "--json", "--", "sh", "-c", script, cwd=tmp_path)
    job_id = json.loads(submitted.stdout)["id"]
    workdir = tmp_path
    wait_for(lambda: (workdir / "go").exists(), what="the job to print its first 50 lines")
    follower = subprocess.Popen(
        [*GPUDESK, "logs", "-n", "2", "-f", str(job_id)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None
    # the follower has printed the tail (so it is following) before the job goes on: a
    # follower started late, on a loaded machine, would see the job's end as its tail
    tail = [follower.stdout.readline() for _ in range(2)]
    (workdir / "more").touch()
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 3, err
    assert "".join(tail) + out == "49\n50\n51\n"
    refused = gpudesk("logs", "-n", "-1", str(done))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr


def test_user_errors_are_one_paragraph_not_tracebacks(engine: EngineHandle) -> None:
    cases = [
        (("show", "424242"), 1, "no job with id 424242"),
        (("cancel", "nope"), 1, "no job with id or name 'nope'"),
        (("submit", "--gpus", "-3", "--", "true"), 2, "--gpus: expected a whole number"),
        (("submit", "--env", "NOEQUALS", "--", "true"), 2, "--env takes NAME=VALUE"),
        (("submit",), 2, ""),
    ]
    for args, code, fragment in cases:
        result = gpudesk(*args)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        assert fragment in result.stderr
        assert "Traceback" not in result.stderr


def test_an_option_missing_its_value_names_the_commands_usage_and_help(home: Home) -> None:
    # click's parser finds it outside any command's context: it was said with the root's
    # "gpudesk --help lists the commands"
    for args, usage in (
        (("submit", "--gpus"), "Usage: gpudesk submit [OPTIONS] COMMAND [ARGS]..."),
        (("show", "1", "--plot"), "Usage: gpudesk show [OPTIONS] JOB"),
        (("mig", "plan", "--gpu"), "Usage: gpudesk mig plan [OPTIONS]"),
    ):
        refused = gpudesk(*args)
        assert refused.returncode == 2 and not refused.stdout, refused
        command = " ".join(a for a in args if a.isalpha())
        assert refused.stderr == (
            f"error: Option '{args[-1]}' requires an argument. {usage} "
            f"(gpudesk {command} --help says more)\n"
        )


def test_a_negative_priority_where_the_jobs_go_names_the_command_meant(home: Home) -> None:
    """`gpudesk priority 1 -1` (scontrol's order, the keyword left out) was click's "No such
    option: -1"; it is a job the number is not, and the command meant. Another unknown option
    is still click's word."""
    for args, said in (
        (
            ("1", "-1"),
            "-1 is not a job; give the new priority with --set -1 (gpudesk priority 1 --set -1)",
        ),
        (
            ("3", "4", "-20"),
            "-20 is not a job; give the new priority with --set -20 "
            "(gpudesk priority 3 4 --set -20)",
        ),
        (("1", "-1", "--set", "2"), "-1 is not a job (a job id is a whole number from 1)"),
    ):
        refused = gpudesk("priority", *args)
        assert (refused.returncode, refused.stdout) == (2, ""), refused
        assert refused.stderr == f"error: gpudesk priority: {said}\n"
    other = gpudesk("priority", "1", "-x")
    assert other.returncode == 2 and other.stderr.startswith("error: No such option: -x"), other


def test_an_unknown_option_is_a_usage_error_not_the_command(engine: EngineHandle) -> None:
    for args in (("--before", "1", "--", "true"), ("--bogus", "true")):
        refused = gpudesk("submit", *args)
        assert refused.returncode == 2, refused.stdout
        assert refused.stderr.startswith(f"error: No such option: {args[0]}")
        assert len(refused.stderr.strip().splitlines()) == 1  # one paragraph, no usage box
        assert "gpudesk submit [OPTIONS]" in refused.stderr
    assert json.loads(gpudesk("queue", "--all", "--json").stdout)["jobs"] == []
    # from the command's first word on, every word is the command's, options and `--` included
    for args, command in (
        (("--name", "a", "python", "train.py", "--lr", "3"), ["python", "train.py", "--lr", "3"]),
        (("--name", "b", "--", "-x", "--", "--help"), ["-x", "--", "--help"]),
    ):
        result = gpudesk("submit", "--json", *args)
        assert result.returncode == 0, result.stderr
        job_id = json.loads(result.stdout)["id"]
        shown = json.loads(gpudesk("show", str(job_id), "--json").stdout)
        assert shown["job"]["spec"]["command"] == command


def test_submit_and_run_refuse_gpus_the_station_does_not_have(
    engine: EngineHandle, tmp_path: Path
) -> None:
    refused = gpudesk("submit", "--gpus", "1", "--", "true")
    assert refused.returncode == 2, refused.stdout
    assert refused.stderr.startswith("error: job 'true' asks for 1 GPU but this station has none")
    assert "gpus = 0" in refused.stderr and "Traceback" not in refused.stderr
    profile = write_profile(
        tmp_path,
        """
        [[jobs]]
        name = "cpu"
        command = ["true"]
        [[jobs]]
        name = "big"
        command = ["true"]
        gpus = 2
    """,
    )
    run = gpudesk("run", str(profile))
    assert run.returncode == 2, run.stdout + run.stderr
    # said at the [[jobs]] table that made it (the engine names the job by its name)
    assert run.stderr.startswith(f"error: {profile}:5: jobs[1] ('big'): asks for 2 GPUs"), run
    assert "nothing was submitted" in run.stderr
    assert json.loads(gpudesk("queue", "--all", "--json").stdout)["jobs"] == []
    # --parsable: the id alone, for a script (as sbatch --parsable)
    parsable = gpudesk("submit", "--parsable", "--", "true")
    assert parsable.returncode == 0 and parsable.stdout.strip().isdigit(), parsable
    assert gpudesk("wait", "-q", parsable.stdout.strip()).returncode == 0
    both = gpudesk("submit", "--parsable", "--json", "--", "true")
    assert both.returncode == 2 and "give one" in both.stderr
    # --hold: queued held (as sbatch --hold); it starts only once released
    held = gpudesk("submit", "--hold", "--json", "--", "true")
    shown = json.loads(held.stdout)
    assert held.returncode == 0 and shown["held"] is True, held
    listed = json.loads(gpudesk("queue", "--json").stdout)["jobs"]
    (mine,) = [j for j in listed if j["id"] == shown["id"]]
    assert (mine["state"], mine["held"]) == ("queued", True)
    assert gpudesk("release", str(shown["id"])).returncode == 0
    assert gpudesk("wait", "-q", str(shown["id"])).returncode == 0
    refused = gpudesk("submit", "--hold", "--on", "slurm", "--", "true")
    assert refused.returncode == 2 and "--hold: a job sent to Slurm" in refused.stderr
    # cancel picks jobs as scancel does: --name GLOB, --state, --user/--me
    ids = {
        label: int(gpudesk("submit", "--parsable", "--hold", "--name", label, "--", "true").stdout)
        for label in ("lr-1", "lr-2", "other")
    }
    picked = gpudesk("cancel", "--name", "lr-*", "--state", "held", "--json")
    assert picked.returncode == 0, picked.stderr
    assert {r["id"] for r in json.loads(picked.stdout)["results"]} == {ids["lr-1"], ids["lr-2"]}
    live = {j["id"] for j in json.loads(gpudesk("queue", "--json").stdout)["jobs"]}
    assert ids["other"] in live and not live & {ids["lr-1"], ids["lr-2"]}
    none = gpudesk("cancel", "--name", "nothing-*")
    assert none.returncode == 0 and "no live job matches" in none.stderr
    for bad in ([], ["--name", "x", "5"], ["--state", "done"]):
        assert gpudesk("cancel", *bad).returncode == 2, bad
    assert gpudesk("cancel", "--me").returncode == 0
    assert ids["other"] not in {
        j["id"] for j in json.loads(gpudesk("queue", "--json").stdout)["jobs"]
    }


def test_commands_start_the_engine_when_needed_and_engine_commands(home: Home) -> None:
    assert gpudesk("engine", "status").returncode == 3
    result = gpudesk("submit", "--", "true")  # a read (queue, show…) starts none: test_no_engine
    assert result.returncode == 0, result.stderr
    status = json.loads(gpudesk("engine", "status", "--json").stdout)
    assert status["running"] is True and status["home"] == str(home.root)
    # starting it again: nothing to do (exit 0), as `systemctl start`; with a setting it runs
    # otherwise, one paragraph saying what changes it (exit 1), and it is not changed
    again = gpudesk("engine", "start")
    assert again.returncode == 0 and again.stdout.startswith("engine already running"), again
    same = gpudesk("engine", "start", "--slots", str(status["station"]["effective_slots"]))
    assert same.returncode == 0 and "engine already running" in same.stdout, same
    other = gpudesk("engine", "start", "--policy", "fifo")
    assert other.returncode == 1 and "`gpudesk engine set policy=fifo` does" in other.stderr
    assert json.loads(gpudesk("engine", "status", "--json").stdout)["pid"] == status["pid"]
    stopped = gpudesk("engine", "stop")
    assert stopped.returncode == 0 and "engine stopped" in stopped.stdout
    assert gpudesk("engine", "status").returncode == 3


def test_ctrl_c_cancels_the_runs_jobs_and_still_reports(
    engine: EngineHandle, tmp_path: Path
) -> None:
    profile = long_jobs_profile(tmp_path, ["sh", "-c", "sleep 60 & sleep 60 & wait"], repeat=3)
    run = start_interruptible_run(profile)
    try:
        wait_for(
            lambda: len(engine.client.request("jobs", states=["running"])["jobs"]) == 2,
            what="two jobs running",
        )
        pgids = [
            a.pid
            for j in engine.client.request("jobs")["jobs"]
            for a in engine.show(j["id"]).attempts
        ]
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, out + err
    assert "cancelling 3 job(s)" in out
    assert "(interrupted)" in out
    states = [j["state"] for j in engine.client.request("jobs")["jobs"]]
    assert states == ["cancelled"] * 3
    for pgid in pgids:
        wait_for(lambda p=pgid: not processes_in_group(p), 5.0, what="no process left")


def test_ctrl_c_is_answered_at_once_while_the_engine_is_slow_to(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """Which jobs to cancel is the engine's to say; a busy engine may take a while. The run
    says at once that it was interrupted (seen once on a loaded CI machine: 30 s of nothing),
    then cancels when the engine answers (here: stopped, then let go)."""
    profile = long_jobs_profile(tmp_path, ["sleep", "60"], repeat=3)
    run = start_interruptible_run(profile)
    lines: queue.Queue[str] = queue.Queue()
    out = run.stdout
    assert out is not None

    def read() -> None:  # the run's lines as they come, so none is waited for past its time
        for line in out:
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
                said = lines.get(timeout=10)  # the engine answers nothing meanwhile
            assert "Ctrl-C again leaves without waiting for the cancels to end" in said
        finally:
            os.kill(pid, signal.SIGCONT)
        assert run.wait(timeout=30) == 130
    finally:
        if run.poll() is None:
            run.kill()
    reader.join(timeout=5)
    rest = "".join(lines.queue)
    assert "cancelling 3 job(s) of this run" in rest, rest
    states = [j["state"] for j in engine.client.request("jobs")["jobs"]]
    assert states == ["cancelled"] * 3


@pytest.mark.parametrize("delay", [0.2, 0.35, 0.5])
def test_ctrl_c_anywhere_leaves_no_job_of_the_run_behind(
    engine: EngineHandle, tmp_path: Path, delay: float
) -> None:
    """Wherever the interrupt lands (loading, submitting, following), nothing keeps running."""
    profile = long_jobs_profile(tmp_path, ["sleep", "60"], repeat=4)
    run = start_interruptible_run(profile)
    time.sleep(delay)
    run.send_signal(signal.SIGINT)
    try:
        out, err = run.communicate(timeout=30)
    except subprocess.TimeoutExpired as going_on:
        said = (going_on.stderr or b"").decode(errors="replace")
        if not swallowed_by_site(said):
            pytest.fail(f"the run went on 30 s after its Ctrl-C:\n{where_it_hangs(run)}")
        run.send_signal(signal.SIGINT)  # Python lost the first: a user presses Ctrl-C again
        out, err = run.communicate(timeout=30)
    # One window is Python's own: an interrupt while the interpreter is still starting (the
    # `site` module's frozen frames, the .pth hooks it runs from site-packages: setuptools'
    # `_distutils_hack`, an editable install's finder) or finding the package (`python -m` in
    # runpy) comes before any gpudesk code can handle it, and Python prints that traceback. A
    # loaded machine can keep the process there for 0.2 s. There, an interrupt as the
    # interpreter initializes is its "Fatal Python error: init_…" (init_sys_streams,
    # init_import_site: exit 1), and one in runpy's import "Could not import runpy module"
    # (exit 1); past it, Python's handler or gpudesk's gives 130. Any traceback with a frame
    # of gpudesk's own package is a defect.
    if run.returncode == 1:
        pythons_own = r"^(Fatal Python error: init_\w+:|Could not import runpy module$)"
        assert re.search(pythons_own, err, re.MULTILINE), out + err
    else:
        assert run.returncode in (130, -signal.SIGINT), out + err
    package = str(Path(sys.modules["gpudesk"].__file__ or "").resolve().parent) + os.sep
    frames = re.findall(r'File "([^"]+)"', err)
    ours = [
        f for f in frames if not f.startswith("<") and str(Path(f).resolve()).startswith(package)
    ]
    assert "Traceback" not in err or not ours, err

    def settled() -> bool:
        jobs = engine.client.request("jobs")["jobs"]
        return all(j["state"] == "cancelled" for j in jobs)

    wait_for(settled, 10.0, what="every job of the run to be cancelled")


@pytest.mark.slow(8)
def test_quickstart_style_sweep_trains_for_real(engine: EngineHandle, tmp_path: Path) -> None:
    """The real torch workload under the real engine (two tiny jobs of a quickstart-style
    sweep; each job's CPU is mostly its `import torch`): at 80 columns the report shows each
    job's result metrics and the best configuration by the profile's [report] metric, and no
    line is wider than 80."""
    profile = write_profile(
        tmp_path,
        """
        name = "quickstart"
        [station]
        backend = "none"
        slots = 2
        [report]
        metric = "val_acc"
        goal = "max"
        [[sweeps]]
        name = "digits-lr{lr}-h{hidden}"
        command = ["python", "-m", "gpudesk.workloads.digits", "--lr", "{lr}",
                   "--hidden", "{hidden}", "--epochs", "2"]
        grid = { lr = [0.003, 0.1], hidden = [32] }
    """,
    )
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "COLUMNS": "80",
    }
    report = tmp_path / "report.json"
    result = gpudesk("run", str(profile), "--report", str(report), timeout=180, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(report.read_text())
    accuracy = {}
    for job in data["jobs"]:
        log = Path(job["log"]).read_text()
        assert "epoch 2/2" in log
        assert "threads 1" in log  # the CPU station gave each job its share of the cores
        final = json.loads(log.rsplit("result ", 1)[1])
        assert job["metrics"]["val_acc"] == final["val_acc"]
        assert "device" not in job["metrics"]  # a string is not a metric
        accuracy[job["name"]] = final["val_acc"]
    assert max(accuracy.values()) > 0.5
    winner = max(accuracy, key=lambda name: accuracy[name])
    assert (data["best"]["name"], data["best"]["value"]) == (winner, accuracy[winner])
    lines = result.stdout.splitlines()
    # A path longer than the terminal (pytest's temporary folders) cannot wrap; all else does.
    too_wide = [line for line in lines if len(line) > 80 and " " in line.strip()]
    assert not too_wide, result.stdout
    start = lines.index("results, best val_acc first:")
    assert lines[start + 1].split()[:3] == ["ID", "NAME", "val_acc"]
    rows = [line.split() for line in lines[start + 2 : start + 4]]
    assert [float(row[2]) for row in rows] == sorted(accuracy.values(), reverse=True)
    assert [accuracy[row[1]] for row in rows] == [float(row[2]) for row in rows]
    best_line = next(line for line in lines if line.startswith("best configuration: "))
    assert best_line.startswith(f"best configuration: {winner} (job {data['best']['job']}): ")


def test_top_once_and_json_show_the_station_and_running_jobs(engine: EngineHandle) -> None:
    (job_id,) = engine.submit({"name": "busy", "command": ["sh", "-c", "while :; do :; done"]})
    engine.wait_state(job_id, "running")

    def measured() -> dict | None:  # the engine's sampler has seen the job twice
        snapshot = json.loads(gpudesk("top", "--json").stdout)
        return snapshot if snapshot["jobs"] and snapshot["jobs"][0]["cpu_pct"] else None

    snapshot = wait_for(measured, 10.0, interval=0.2, what="the job's CPU use in top")
    assert (snapshot["backend"], snapshot["simulated"], snapshot["gpus"]) == ("none", False, [])
    (job,) = snapshot["jobs"]
    assert job["id"] == job_id and job["processes"] >= 1
    assert job["user"] == user_name(os.getuid())  # whose job it is
    assert job["cpu_pct"] > 20  # a busy loop, over the engine's last sampling interval
    assert snapshot["host"]["memory_total_mib"] > 0
    frame = gpudesk("top", "--once")
    assert frame.returncode == 0, frame.stderr
    lines = frame.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "backend none" in lines[0] and "CPU slots 1/2" in lines[1]
    assert "SIMULATED" not in frame.stdout
    me = user_name(os.getuid())
    assert any(line.split()[:4] == [str(job_id), me, "busy", "cpu:0"] for line in lines)
    assert "USER" in next(line for line in lines if line.lstrip().startswith("ID"))


def test_top_fits_the_terminals_width(engine: EngineHandle) -> None:
    # into a pipe without $COLUMNS a frame is 80 columns (above); a terminal's width, as
    # $COLUMNS gives it, is used: a wide one shows a long name whole, a narrow one clips
    name = "a-sweep-member-lr0.003-hidden512-layers3-seed42"
    (job_id,) = engine.submit({"name": name, "command": ["sleep", "60"]})
    engine.wait_state(job_id, "running")
    wait_for(
        lambda: json.loads(gpudesk("top", "--json").stdout)["jobs"],
        10.0,
        interval=0.2,
        what="the job in top",
    )
    for columns in (60, 160):
        frame = gpudesk("top", "--once", env={**os.environ, "COLUMNS": str(columns)})
        assert frame.returncode == 0, frame.stderr
        lines = frame.stdout.splitlines()
        assert all(len(line) <= columns for line in lines), frame.stdout
        row = next(line for line in lines if line.split()[:1] == [str(job_id)])
        assert (name in row) == (columns == 160), row
    engine.client.request("cancel", jobs=[job_id])


def test_top_without_an_engine_does_not_start_one(home: Home) -> None:
    result = gpudesk("top", "--once")
    assert result.returncode == 0
    assert "engine not running" in result.stdout
    assert not home.lock.exists()


def test_simulate_compares_policies_on_the_carma_trace() -> None:
    trace = Path(__file__).resolve().parents[2] / "traces" / "carma-philly-t1.json"
    result = gpudesk("simulate", str(trace), "--policy", "exclusive,carma,auto", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["simulated"] is True and data["station"] == "sim:dgx-station-a100"
    by_policy = {r["policy"]: r for r in data["results"]}
    assert by_policy["auto"]["makespan_s"] < by_policy["carma"]["makespan_s"]
    assert by_policy["auto"]["lost"] == 0
    table = gpudesk("simulate", str(trace), "--policy", "exclusive,auto")
    assert table.stdout.startswith("SIMULATED sim:dgx-station-a100")
    bad = gpudesk("simulate", str(trace), "--policy", "slurm")
    assert bad.returncode == 2 and "unknown policy slurm" in bad.stderr
