"""The job-end hooks' library (gpudesk.hw.job_hooks) without an engine: hooks.toml's checks,
and one hook run for real: its output kept up to its bound, its process group killed at its
timeout."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import wait_for

from gpudesk.hw.job_hooks import (
    OUTPUT_KEPT,
    STATION_LANE,
    HookConfig,
    HookConfigError,
    HookRun,
    JobEndHooks,
    Lanes,
    load_hooks,
    parse_hooks,
    run_hook,
)


def test_hooks_toml_is_checked_key_by_key() -> None:
    assert parse_hooks("") is None
    assert parse_hooks('[job_end]\ncommand = ["/bin/echo", "x"]\n') == HookConfig(
        ("/bin/echo", "x"), 30.0
    )
    assert parse_hooks('[job_end]\ncommand = ["echo"]\ntimeout_s = 2', "/usr/bin/echo") == (
        HookConfig(("/usr/bin/echo",), 2.0)
    )
    for text, says in (
        ("[job_end", "not TOML"),
        ("[on_end]\ncommand = ['/bin/true']", "[on_end]: unknown table"),
        ("[job_end]\ncommand = '/bin/true'", "job_end.command: expected a list"),
        ("[job_end]\ncommand = ['/bin/true']\nshell = true", "job_end.shell: unknown key"),
        ("[job_end]\ncommand = ['/bin/true']\ntimeout_s = 0", "job_end.timeout_s"),
        ("[job_end]\ncommand = ['nosuchprogram']", "is not on the site's PATH"),
    ):
        with pytest.raises(HookConfigError, match=re.escape(says)):
            parse_hooks(text)


def test_a_personal_engines_hooks_toml_must_not_be_writable_by_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "hooks.toml"
    assert load_hooks(tmp_path, system=False) is None  # none there: no hook, nothing said
    config.write_text('[job_end]\ncommand = ["true"]\n')
    config.chmod(0o666)
    assert load_hooks(tmp_path, system=False) is None
    assert "others may write it" in caplog.text
    config.chmod(0o600)
    loaded = load_hooks(tmp_path, system=False)
    assert loaded is not None and loaded.command[0].endswith("/true")
    link = tmp_path / "linked"
    link.mkdir()
    (link / "hooks.toml").symlink_to(config)
    assert load_hooks(link, system=False) is None and "a link, not followed" in caplog.text


def test_hooks_toml_is_read_again_when_it_changes_with_the_checks_of_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "hooks.toml"
    config.write_text('[job_end]\ncommand = ["/bin/true"]\n')
    config.chmod(0o600)
    hooks = JobEndHooks.at(tmp_path, system=False, wake=lambda: None)
    assert hooks.config == HookConfig(("/bin/true",), 30.0)
    events: list[tuple[str, str]] = []

    def add_event(kind: str, message: str, **_: object) -> None:
        events.append((kind, message))

    clock = [100.0]

    def step() -> list[tuple[str, str]]:
        clock[0] += 2.5  # past RECHECK_S
        events.clear()
        hooks.refresh(add_event, now=clock[0])
        return list(events)

    assert step() == []  # unchanged: not read again
    config.write_text('[job_end]\ncommand = ["/bin/echo", "token=s3cret"]\ntimeout_s = 5\n')
    assert step() == [
        ("station", "hooks.toml read again: the station's job-end hook runs (timeout 5 s)")
    ]  # its words, which may hold a secret, are not in the event (every user's)
    assert hooks.config == HookConfig(("/bin/echo", "token=s3cret"), 5.0)
    caplog.clear()
    config.chmod(0o664)  # now unsafe: the station's hook is off, said once in the log
    [(kind, message)] = step()
    assert kind == "station" and message.startswith("hooks.toml changed and is not used")
    assert "others may write it" in message and hooks.config is None
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert step() == []  # said once, not at every step
    config.chmod(0o600)
    assert step()[0][1].startswith("hooks.toml read again") and hooks.config is not None
    config.unlink()
    assert step() == [("station", "hooks.toml was removed: no job-end hook runs")]
    assert hooks.config is None


def _run(script: str, timeout_s: float) -> tuple[float, object]:
    started = time.monotonic()
    result = run_hook(
        HookRun((sys.executable, "-c", script), dict(os.environ), None, timeout_s, "test")
    )
    return time.monotonic() - started, result


def test_a_hook_keeps_its_first_output_and_is_killed_with_its_children_at_its_timeout(
    tmp_path: Path,
) -> None:
    took, result = _run(f"import sys; sys.stdout.write('x' * {OUTPUT_KEPT + 1000})", 10)
    assert result.returncode == 0 and len(result.output) == OUTPUT_KEPT  # type: ignore[attr-defined]
    assert result.cut == 1000  # type: ignore[attr-defined]
    child = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen(['sleep', '60']); open('{child}', 'w').write(str(p.pid)); "
        "print('waiting', flush=True); time.sleep(60)"
    )
    took, result = _run(script, 1.5)
    assert result.returncode is None and result.output == b"waiting\n"  # type: ignore[attr-defined]
    assert 1.5 <= took < 5
    pid = int(child.read_text())
    deadline = time.monotonic() + 5
    while True:  # its child went with it (the whole process group), reaped by init
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the hook's child outlived its timeout"
        time.sleep(0.05)


def test_one_members_many_hooks_wait_their_turn_behind_the_station_and_the_others() -> None:
    """Ada's jobs end first and queue five --notify hooks; Bob's one and the station's come
    after. The station's runs next, then the members take turns, so Bob's waits behind one
    of Ada's, not five; and Ada's lane full drops only hers."""

    def run(lane: str, n: int) -> HookRun:
        return HookRun(("/bin/true",), {}, None, 1.0, f"{lane} {n}", n, lane)

    lanes = Lanes(most=5)
    for n in range(5):
        assert lanes.put(run("uid 1001", n))
    assert not lanes.put(run("uid 1001", 5))  # her lane is full
    assert lanes.put(run("uid 1002", 0))
    assert lanes.put(run(STATION_LANE, 0))
    order = []
    for _ in range(7):  # one worker: each run ends before it takes the next
        run = lanes.get()
        order.append(run.what)
        lanes.done(run)
    assert order == [
        "station 0",
        "uid 1001 0",
        "uid 1002 0",
        "uid 1001 1",
        "uid 1001 2",
        "uid 1001 3",
        "uid 1001 4",
    ]


def test_no_lane_runs_more_than_its_share_at_once_and_the_others_still_get_theirs() -> None:
    def run(lane: str, n: int) -> HookRun:
        return HookRun(("/bin/true",), {}, None, 1.0, f"{lane} {n}", n, lane)

    lanes = Lanes(most=10, per_lane=2)
    for n in range(4):
        lanes.put(run("uid 1001", n))
    first, second = lanes.get(), lanes.get()
    assert (first.what, second.what) == ("uid 1001 0", "uid 1001 1")
    assert lanes.workers_wanted() == 2  # her third waits for one of her two to end
    lanes.put(run("uid 1002", 0))
    assert lanes.workers_wanted() == 3
    assert lanes.get().what == "uid 1002 0"  # hers are skipped while two of hers run
    lanes.done(first)
    assert lanes.get().what == "uid 1001 2"


def test_one_members_hanging_hooks_hold_only_her_lanes_workers(tmp_path: Path) -> None:
    """Ada's three --notify hooks hang until their timeout; Bob's, queued after them, runs at
    once on a worker of its own (with two workers in all, as before, it waited for hers)."""
    hooks = JobEndHooks(None, tmp_path / "hooks.log", system=False)
    hang = (sys.executable, "-c", "import time; time.sleep(60)")
    try:
        for n in range(3):
            hooks.queue(HookRun(hang, dict(os.environ), None, 60.0, f"ada {n}", n, "uid 1001"))
        asked = time.monotonic()
        hooks.queue(HookRun(("/bin/true",), dict(os.environ), None, 60.0, "bob 0", 9, "uid 1002"))
        job_id, said = hooks.ended.get(timeout=30)
        assert job_id == 9 and said.startswith("0: exit 0"), said
        assert time.monotonic() - asked < 30
        # two of Ada's taken by workers, her third waiting its turn (Bob's worker may not
        # have counted his run done yet: it records the end first)
        assert hooks.runs.running["uid 1001"] == 2
        assert [r.what for r in hooks.runs.waiting["uid 1001"]] == ["ada 2"]
        assert len(hooks.workers) == 3
    finally:
        hooks.close()


def test_closing_kills_the_running_hooks_and_starts_none_of_those_waiting(tmp_path: Path) -> None:
    """The engine stops with two of Ada's hooks hanging and a third waiting its turn: the two
    are killed, and the third never starts (it used to, on the worker the kill freed, and then
    hung on to its timeout with no engine to kill it). Every worker ends."""
    hooks = JobEndHooks(None, tmp_path / "hooks.log", system=False)
    script = "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); time.sleep(60)"
    for n in range(3):
        argv = (sys.executable, "-c", script, str(tmp_path / f"started-{n}"))
        hooks.queue(HookRun(argv, dict(os.environ), None, 60.0, f"ada {n}", n, "uid 1001"))
    wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 2, what="two hooks to start")
    running = sorted(hooks.live.pids)
    hooks.close()
    for worker in hooks.workers:
        worker.join(30)
        assert not worker.is_alive(), "a hook worker outlived close()"
    assert sorted(p.name for p in tmp_path.glob("started-*")) == ["started-0", "started-1"]
    assert not hooks.live.pids and len(running) == 2
    for pid in running:
        wait_for(lambda pid=pid: not psutil.pid_exists(pid), what=f"hook {pid} to be gone")
