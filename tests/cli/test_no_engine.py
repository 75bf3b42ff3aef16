"""A command that only reads never starts an engine (issue 41; gpudesk.cli.no_engine): in a home
where none runs, `gpudesk queue`, `show`, `logs`, `wait`, `history` and `top` say so in one line
and leave no engine behind (no process, no socket, no lock holding a pid), as `pueue status`
and `squeue` leave their daemons alone; `submit` still starts one."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import EngineHandle, kill_running

from gpudesk.api.connection import engine_pid
from gpudesk.paths import Home

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def engines_of(home: Home) -> list[psutil.Process]:
    """Engine daemons running for `home`, however they were started."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "gpudesk.engine.daemon" in cmdline and str(home.root) in " ".join(cmdline):
            found.append(proc)
    return found


def assert_no_engine(home: Home) -> None:
    assert engine_pid(home) is None
    assert not engines_of(home), "an engine daemon runs for this home"
    assert not home.control_socket.exists() and not home.lock.exists()
    assert not home.db.exists()  # no engine opened a store here


# (arguments, exit code, the line's words, the line on stderr: stdout is the listing's JSON/CSV)
READS = [
    (("queue",), 0, "nothing is queued or running", False),
    (("queue", "-al"), 0, "nothing is queued or running", False),  # typer's path, not the fast one
    (("queue", "--json"), 0, "nothing is queued or running", True),
    (("history",), 0, "no job has finished", False),
    (("history", "--format", "csv"), 0, "no job has finished", True),
    (("show", "3"), 1, "no job with id or name '3'", True),
    (("show", "train", "--json"), 1, "no job with id or name 'train'", True),
    (("logs", "3"), 1, "no job with id or name '3'", True),
    (("wait", "3", "4"), 1, "no job with id or name '3'", True),
]


@pytest.mark.parametrize(
    ("args", "code", "words", "on_stderr"), READS, ids=[" ".join(r[0]) for r in READS]
)
def test_a_read_in_a_fresh_home_starts_no_engine_and_says_so_in_one_line(
    home: Home, args: tuple[str, ...], code: int, words: str, on_stderr: bool
) -> None:
    done = gpudesk(*args)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    said = done.stderr if on_stderr else done.stdout
    lines = said.splitlines()
    assert len(lines) == 1, said
    assert words in lines[0] and f"no engine is running for {home.root}" in lines[0], lines
    assert "`gpudesk submit` starts one" in lines[0]
    if code:
        assert done.stdout == "" and lines[0].startswith("error: ")
    elif on_stderr and "--json" in args:
        assert json.loads(done.stdout)["jobs"] == []
    elif on_stderr:
        assert done.stdout.splitlines()[0].startswith("id,name,")  # the CSV's header, no row
        assert len(done.stdout.splitlines()) == 1
    else:
        assert done.stderr == ""
    assert_no_engine(home)


@pytest.mark.parametrize("args", [("model", "show"), ("mig", "plan", "--json")])
def test_a_read_of_the_engines_own_state_in_a_fresh_home_starts_none(
    home: Home, args: tuple[str, ...]
) -> None:
    """The interference model and the MIG plan are the engine's: no empty answer, so one error
    line, exit 3 (as `engine status`), and no engine."""
    done = gpudesk(*args)
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: no engine is running for {home.root};"), line
    assert f"`GPUDESK_HOME={home.root} gpudesk engine start` starts it" in line
    assert_no_engine(home)


def test_top_once_in_a_fresh_home_starts_no_engine(home: Home) -> None:
    """`top` never did (gpudesk.cli.top_view samples the machine itself): kept so."""
    done = gpudesk("top", "--once", env={**os.environ, "GPUDESK_BACKEND": "none"})
    assert done.returncode == 0, done.stderr
    assert_no_engine(home)


def test_a_read_in_a_home_whose_engine_stopped_says_how_to_start_it(
    engine: EngineHandle,
) -> None:
    """Its jobs are in a store only an engine reads: not "nothing is queued" but one error line,
    exit 3 (as `engine status`), and the engine stays stopped until asked."""
    (job_id,) = engine.submit({"name": "kept", "command": ["true"]})
    engine.wait_state(job_id, "succeeded")
    engine.stop()
    home = engine.home
    for args in (("queue",), ("queue", "--json"), ("history",), ("show", str(job_id))):
        done = gpudesk(*args)
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert done.stdout == ""
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"error: no engine is running for {home.root};"), line
        # named as the command found it (GPUDESK_HOME): a bare `gpudesk engine start` would
        # start the default home's engine, not this one's
        assert f"`GPUDESK_HOME={home.root} gpudesk engine start` starts it" in line, line
        assert engine.pid is None and not engines_of(home)
    # the default home, named by nothing: the bare command
    env = {k: v for k, v in os.environ.items() if k not in ("GPUDESK_HOME", "XDG_STATE_HOME")}
    env["HOME"] = str(home.root.parent / "user")
    try:
        assert gpudesk("submit", "--", "true", env=env).returncode == 0
        assert gpudesk("engine", "stop", env=env).returncode == 0
        done = gpudesk("history", env=env)
        assert done.returncode == 3, done.stderr
        bare = "only asks a running one and does not start it: `gpudesk engine start` starts it"
        assert bare in done.stderr, done.stderr
    finally:
        gpudesk("engine", "stop", env=env)
    assert gpudesk("engine", "start").returncode == 0
    listed = json.loads(gpudesk("queue", "--all", "--json").stdout)["jobs"]
    assert [job["id"] for job in listed] == [job_id]


def test_submit_still_starts_the_engine(home: Home) -> None:
    done = gpudesk("submit", "--", "true", env={**os.environ, "GPUDESK_BACKEND": "none"})
    assert done.returncode == 0, done.stderr
    assert engine_pid(home) is not None and len(engines_of(home)) == 1
    shown = gpudesk("queue", "--all", "--json")
    assert shown.returncode == 0 and len(json.loads(shown.stdout)["jobs"]) == 1, shown.stderr


def test_a_system_engines_reader_is_told_who_starts_it(home: Home, tmp_path: Path) -> None:
    """A system engine is never started by its users, reads included: the client says so as
    before, and nothing starts in the personal home either."""
    socket = tmp_path / "station" / "control.sock"
    done = gpudesk("queue", env={**os.environ, "GPUDESK_SOCKET": str(socket)})
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert str(socket) in done.stderr, done.stderr
    assert_no_engine(home)
    # the station's socket was named: how to start that one (the default command, which it said
    # before, starts an engine at /run/gpudesk/control.sock instead)
    (folder := socket.parent).mkdir()
    said = gpudesk("submit", "--", "true", env={**os.environ, "GPUDESK_SOCKET": str(socket)})
    assert f"`sudo gpudesk engine start --system --socket {socket}` with its --state-dir" in (
        said.stderr
    ), said.stderr
    assert folder.exists() and not any(folder.iterdir())
    # exit 3, as `engine status` (and a personal home's stopped engine) says it: not 1, a job's
    # or a command's failure, which a script would take it for
    station = {**os.environ, "GPUDESK_SOCKET": str(socket)}
    for args in (
        ("queue",),
        ("show", "3"),
        ("history",),
        ("cancel", "3"),
        ("submit", "--", "true"),
    ):
        done = gpudesk(*args, env=station)
        assert done.returncode == 3, (args, done.stderr)
        assert "is not running; an admin starts it" in done.stderr, (args, done.stderr)


def test_engine_status_json_says_where_a_stopped_engines_home_comes_from(
    home: Home, tmp_path: Path
) -> None:
    """A personal engine's home is what this shell names (GPUDESK_HOME, XDG_STATE_HOME): said
    with where from. A station's state folder is its engine's --state-dir, which no socket
    names: null while no engine answers, `home_unknown` saying why; it was /var/lib/gpudesk,
    the default, as if it were the station's."""
    socket = tmp_path / "station" / "control.sock"
    done = gpudesk("engine", "status", "--json", env={**os.environ, "GPUDESK_SOCKET": str(socket)})
    assert done.returncode == 3, done.stderr
    said = json.loads(done.stdout)
    assert (said["kind"], said["socket"], said["home"]) == ("system", str(socket), None), said
    assert said["home_source"] is None, said
    assert "only the running engine names" in said["home_unknown"], said
    said = json.loads(gpudesk("engine", "status", "--json").stdout)
    assert (said["running"], said["home"], said["home_source"], said["home_unknown"]) == (
        False,
        str(home.root),
        "GPUDESK_HOME",
        None,
    ), said
    env = {k: v for k, v in os.environ.items() if k not in ("GPUDESK_HOME", "GPUDESK_SOCKET")}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    said = json.loads(gpudesk("engine", "status", "--json", env=env).stdout)
    if said["kind"] == "personal":  # else this host is a station: its default socket is named
        xdg = str(tmp_path / "xdg" / "gpudesk")
        assert (said["home"], said["home_source"]) == (xdg, "XDG_STATE_HOME"), said
    assert_no_engine(home)


def test_engine_status_text_says_a_stopped_engine_where_its_state_is_and_how_it_starts(
    home: Home, tmp_path: Path
) -> None:
    """Stopped, `engine status` says what it says of a running engine that it can know, as a
    sysadmin reads it: which engine this shell talks to, where its state is, and how it starts
    (before: one line naming its socket or home)."""
    socket = tmp_path / "station" / "control.sock"
    done = gpudesk("engine", "status", env={**os.environ, "GPUDESK_SOCKET": str(socket)})
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [
        "engine: not running",
        f"talks to: the station's system engine at {socket}",
        "state:   not known: the station's engine is down: its state folder is the --state-dir "
        "it was started with, which only the running engine names (/var/lib/gpudesk by default)",
        f"start:   an admin starts it (its service, or `sudo gpudesk engine start --system "
        f"--socket {socket}` with its --state-dir)",
    ], done.stdout
    done = gpudesk("engine", "status")  # a personal home
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [
        "engine: not running",
        f"talks to: the personal engine of {home.root} (from GPUDESK_HOME)",
        f"socket:  {home.control_socket}",
        f"start:   `GPUDESK_HOME={home.root} gpudesk engine start` starts it (its jobs are kept)",
    ], done.stdout
    assert_no_engine(home)


@pytest.mark.parametrize("args", [("--readonly",), ("desk", "--readonly")])
def test_a_readonly_desk_watches_a_running_engine_and_starts_none(
    home: Home, args: tuple[str, ...]
) -> None:
    """The desk starts the engine (jobs are submitted and acted on there); `--readonly` only
    watches, so it is a reader: one line, exit 3, no engine. On a terminal that can draw, as
    the desk needs (whatever TERM the tests run under: a CI's may be `dumb`)."""
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [*GPUDESK, *args],
            stdin=terminal,
            stdout=terminal,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "TERM": "xterm-256color"},
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: no engine is running for {home.root};"), line
    assert_no_engine(home)


# A command that changes jobs, in a home where no engine ever ran: no job of those exists.
ACTIONS = [
    ("cancel", "3"),
    ("cancel", "--me"),
    ("cancel", "--signal", "USR1", "3"),
    ("hold", "3"),
    ("release", "train"),
    ("requeue", "3"),
    ("priority", "3", "--up"),
    ("suspend", "3"),
    ("resume", "3"),
    ("edit", "3", "--name", "x"),
]


@pytest.mark.parametrize("args", ACTIONS, ids=[" ".join(a) for a in ACTIONS])
def test_acting_on_jobs_in_a_fresh_home_says_there_are_none_and_starts_no_engine(
    home: Home, args: tuple[str, ...]
) -> None:
    done = gpudesk(*args)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    ref = (
        next(a for a in args[1:] if not a.startswith("-") and a != "USR1")
        if "--me" not in args
        else None
    )
    said = f"no job with id or name {ref!r}" if ref else "no live job matches"
    assert (
        line == f"error: {said}: no engine is running for {home.root} (`gpudesk submit` starts one)"
    )
    assert done.stdout == ""
    assert_no_engine(home)


@pytest.mark.parametrize("system", [False, True])
def test_wait_and_logs_f_wait_through_an_engine_restart_for_the_jobs_real_exit(
    engine: EngineHandle, tmp_path: Path, system: bool
) -> None:
    """`wait` and `logs -f` gave up (exit 3, which a job's own exit 3 reads as) when the engine
    stopped while they waited, an upgrade's restart too, though its jobs went on: now they say
    once that it is away, wait for it, say it is back, and end with the job's own status. Each
    is seen waiting (a job's end printed, a line followed) before the engine stops; the job
    ends while no engine runs, and the next engine settles it."""
    gate, stopped = tmp_path / "gate", tmp_path / "stopped"
    first, long = engine.submit(
        {"name": "first", "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done"]},
        {
            "name": "long",
            "command": [
                "sh",
                "-c",
                f"echo started; while [ ! -e {stopped} ]; do sleep 0.02; done; echo ended; exit 3",
            ],
        },
    )
    engine.wait_state(long, "running")
    env = dict(os.environ)
    if system:  # the engine reached as a station's users reach theirs
        env["GPUDESK_SOCKET"] = str(engine.home.control_socket)
    wait = subprocess.Popen(
        [*GPUDESK, "wait", str(first), str(long)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    follow = subprocess.Popen(
        [*GPUDESK, "logs", "-f", str(long)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        gate.touch()
        assert wait.stdout is not None and follow.stdout is not None
        assert wait.stdout.readline().startswith(f"job {first} (first) succeeded")
        assert follow.stdout.readline() == "started\n"
        engine.stop()
        assert wait.stderr is not None and follow.stderr is not None
        for process in (wait, follow):  # said once the engine is away, and both still wait
            said = process.stderr.readline()
            assert " is not answering: stopped, or restarting" in said, said
            assert "GPUDESK_HOME" not in said and process.poll() is None
        stopped.touch()  # the job ends while no engine runs
        engine.start()
        for process, what in ((wait, f"job(s) {first} {long}"), (follow, f"job {long}")):
            out, err = process.communicate(timeout=60)
            assert process.returncode == 3, out + err  # the job's own exit 3
            assert err.startswith("gpudesk: the engine answers again"), err
            assert what in err and "error" not in err and "Traceback" not in err
        assert out == "ended\n"
    finally:
        kill_running(wait, follow)
    assert engine.job(long).exit_code == 3


@pytest.mark.parametrize("kind", ["a link to her folder", "a file", "a name not UTF-8"])
@pytest.mark.parametrize(
    "args",
    [("queue",), ("queue", "--json"), ("history",), ("show", "3"), ("cancel", "3")],
    ids=" ".join,
)
def test_a_read_in_a_home_submit_would_refuse_says_why_not_that_submit_starts_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, args: tuple[str, ...]
) -> None:
    """GPUDESK_HOME naming a link, a file or a path not UTF-8: `submit` refuses it, so a read
    must not answer "nothing is queued (`gpudesk submit` starts one)" there; it gives submit's
    paragraph and exit, and creates nothing."""
    real = tmp_path / "real"
    real.mkdir()
    named = tmp_path / ("named-\udcff" if kind == "a name not UTF-8" else "named")
    if kind == "a file":
        named.write_text("")
    elif kind == "a link to her folder":
        named.symlink_to(real)
    monkeypatch.setenv("GPUDESK_HOME", str(named))
    refused = gpudesk("submit", "--", "true")
    done = gpudesk(*args)
    assert refused.returncode == done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line == refused.stderr.strip() and "submit` starts one" not in line
    said = {"a file": "not a folder", "a name not UTF-8": "not UTF-8"}
    assert said.get(kind, "symbolic link") in line, line
    assert not any(real.iterdir()) and (kind != "a name not UTF-8" or not named.exists())


def _run_profile(tmp_path: Path, gate: Path) -> Path:
    """A profile of two jobs: one ends at once, one once `gate` exists (while no engine runs)."""
    profile = tmp_path / "outlast.toml"
    profile.write_text(
        'name = "outlast"\n[defaults]\nmax_attempts = 1\n'
        '[[jobs]]\nname = "quick"\ncommand = ["true"]\n'
        f'[[jobs]]\nname = "gated"\ncommand = ["sh", "-c", "while [ ! -e {gate} ]; do '
        'sleep 0.02; done"]\n'
    )
    return profile


def test_run_waits_through_an_engine_restart_and_follows_its_run_to_the_report(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """`gpudesk run` exited 1 (a job's failure, to a script) when its engine stopped, though
    the jobs went on: now it waits for the engine as `wait` does, then follows the run as
    `--attach` would, and reports it, a job that ended meanwhile too."""
    gate = tmp_path / "gate"
    run = subprocess.Popen(
        [*GPUDESK, "run", str(_run_profile(tmp_path, gate))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None and run.stderr is not None
        while "gated  running" not in (line := run.stdout.readline()):
            assert line, run.stderr.read()
        engine.stop()
        said = run.stderr.readline()
        assert " is not answering: stopped, or restarting" in said, said
        assert run.poll() is None
        gate.touch()  # the job ends while no engine runs
        engine.start()
        out, err = run.communicate(timeout=60)
    finally:
        kill_running(run)
    assert run.returncode == 0, out + err
    assert err.startswith("gpudesk: the engine answers again"), err
    assert "error" not in err and "Traceback" not in err
    assert "outlast: 2 succeeded" in out, out  # the report, the job ended meanwhile counted
