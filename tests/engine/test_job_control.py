"""Job control on the real daemon: hold / release, priority, requeue, their CLI, and the
telemetry op's energy for the day."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for

from gpudesk.api.errors import EngineError
from gpudesk.api.models import ActionOutcome

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60)


def sh(script: str, name: str, **extra: object) -> dict:
    return {"name": name, "command": ["sh", "-c", script], **extra}


def occupy_the_only_slot(engine: EngineHandle, tmp_path: Path) -> tuple[int, Path]:
    """One CPU slot, taken by a job that runs until the returned gate file exists."""
    gate = tmp_path / "gate"
    return engine.occupy_the_only_slot(gate), gate


def test_a_held_job_never_starts_until_released(engine: EngineHandle, tmp_path: Path) -> None:
    blocker, gate = occupy_the_only_slot(engine, tmp_path)
    (held,) = engine.submit(sh("true", "held"))
    assert engine.api.hold(["held"]) == [
        ActionOutcome(id=held, name="held", outcome="held", ok=True)
    ]
    assert engine.api.hold([held])[0].outcome == "already held"
    shown = engine.show(held)
    assert (shown.job.state, shown.job.held) == ("queued", True)
    assert shown.waiting == f"held: it will not start until released (gpudesk release {held})"
    gate.touch()
    engine.wait_state(blocker, "succeeded")
    # The slot is free: a later job takes it and finishes while the held one stays queued.
    (later,) = engine.submit(sh("true", "later"))
    engine.wait_state(later, "succeeded")
    assert engine.job(held).state == "queued"
    assert engine.api.release([held])[0].outcome == "released"
    job = engine.wait_state(held, "succeeded")
    assert job.held is False
    events = [(e.kind, e.message) for e in engine.show(held).events]
    assert ("hold", "held by user") in events and ("release", "released by user") in events


def test_hold_is_kept_across_an_engine_restart(engine: EngineHandle, tmp_path: Path) -> None:
    blocker, gate = occupy_the_only_slot(engine, tmp_path)
    (held,) = engine.submit(sh("true", "held"))
    engine.api.hold([held])
    engine.stop()
    engine.start(slots=1)
    assert engine.job(held).held is True
    gate.touch()
    engine.wait_state(blocker, "succeeded")  # re-adopted, and its end noticed
    (later,) = engine.submit(sh("true", "later"))
    engine.wait_state(later, "succeeded")
    assert engine.job(held).state == "queued"
    engine.api.release([held])
    engine.wait_state(held, "succeeded")


def test_hold_refuses_a_running_job_but_acts_on_the_rest(
    engine: EngineHandle, tmp_path: Path
) -> None:
    blocker, gate = occupy_the_only_slot(engine, tmp_path)
    (queued,) = engine.submit(sh("true", "queued"))
    results = engine.api.hold([blocker, queued])
    assert [(r.outcome, r.ok) for r in results] == [
        ("running: only a queued job can be held", False),
        ("held", True),
    ]
    [released] = engine.api.release([blocker])
    assert (released.outcome, released.ok) == ("running: only a held job can be released", False)
    # Resolution is all or nothing: one unknown job and nothing is done.
    with pytest.raises(EngineError) as info:
        engine.api.release([queued, "no-such-job"])
    assert info.value.code == "unknown_job"
    assert engine.job(queued).held is True
    gate.touch()


def test_priority_decides_which_queued_job_starts_first(
    engine: EngineHandle, tmp_path: Path
) -> None:
    blocker, gate = occupy_the_only_slot(engine, tmp_path)
    order = tmp_path / "order"
    first, second, third = engine.submit(
        *(sh(f"echo {n} >> {order}", n) for n in ("first", "second", "third"))
    )
    assert engine.api.set_priority([third], priority=5)[0].outcome == "priority 0 -> 5"
    assert engine.api.set_priority([first], delta=-1)[0].outcome == "priority 0 -> -1"
    running = engine.api.set_priority([blocker], delta=1)[0]
    assert running.ok and "running, so it changes nothing now" in running.outcome
    queue = engine.api.jobs(states=["queued"])
    assert [(j.name, j.spec.priority) for j in queue] == [
        ("first", -1),
        ("second", 0),
        ("third", 5),
    ]
    assert (
        engine.show(second).waiting
        == "waiting for a free CPU slot (1/1 busy, 1 queued ahead of it)"
    )
    gate.touch()
    engine.wait_all_done([first, second, third])
    assert order.read_text().split() == ["third", "second", "first"]
    with pytest.raises(EngineError, match="expected a whole number from -1000 to 1000"):
        engine.api.set_priority([first], priority=1001)
    with pytest.raises(EngineError, match="either 'priority'"):
        engine.api.set_priority([first], priority=1, delta=1)


def test_requeue_runs_a_failed_job_again_and_its_attempts_continue(
    engine: EngineHandle, tmp_path: Path
) -> None:
    marker = tmp_path / "tried"
    (flaky,) = engine.submit(sh(f"[ -e {marker} ] || {{ touch {marker}; exit 3; }}", "flaky"))
    (hopeless,) = engine.submit(sh("exit 2", "hopeless", max_attempts=2))
    engine.wait_all_done([flaky, hopeless])
    assert engine.api.requeue([flaky, hopeless]) == [
        ActionOutcome(id=flaky, name="flaky", outcome="requeued", ok=True),
        ActionOutcome(id=hopeless, name="hopeless", outcome="requeued", ok=True),
    ]
    jobs = {j.id: j for j in engine.wait_all_done([flaky, hopeless])}
    assert (jobs[flaky].state, jobs[flaky].attempts) == ("succeeded", 2)
    assert jobs[flaky].attempts_before_requeue == 1
    # A fresh budget: two more attempts, numbered on from the first two.
    assert (jobs[hopeless].state, jobs[hopeless].attempts) == ("failed", 4)
    shown = engine.show(hopeless)
    assert [a.number for a in shown.attempts] == [1, 2, 3, 4]
    assert [a.exit_code for a in shown.attempts] == [2, 2, 2, 2]
    assert "requeued by user (was failed)" in [e.message for e in shown.events]
    assert engine.api.requeue([flaky])[0].outcome == "requeued"  # a success reruns
    engine.wait_state(flaky, "succeeded")
    assert engine.job(flaky).attempts == 3


def test_requeue_leaves_queued_and_running_jobs_alone(engine: EngineHandle, tmp_path: Path) -> None:
    blocker, gate = occupy_the_only_slot(engine, tmp_path)
    (queued,) = engine.submit(sh("true", "queued"))
    results = engine.api.requeue([blocker, queued])
    assert [(r.outcome, r.ok) for r in results] == [
        ("running: only a finished job can be requeued", False),
        ("already queued", True),
    ]
    gate.touch()
    engine.wait_all_done([blocker, queued])
    assert engine.job(blocker).attempts == 1


@pytest.mark.slow(7)
def test_job_control_commands_and_their_errors(engine: EngineHandle, tmp_path: Path) -> None:
    blocker, gate = occupy_the_only_slot(engine, tmp_path)
    (queued,) = engine.submit(sh("true", "waiting"))
    held = gpudesk("hold", "waiting")
    assert (held.returncode, held.stdout.strip()) == (0, f"job {queued} (waiting): held")
    listed = json.loads(gpudesk("queue", "--json").stdout)["jobs"]
    assert [(j["name"], j["state"], j["held"]) for j in listed] == [
        ("blocker", "running", False),
        ("waiting", "queued", True),
    ]
    assert "why        held: it will not start" in gpudesk("show", "waiting").stdout
    moved = gpudesk("priority", "waiting", "--set", "-5", "--json")
    assert json.loads(moved.stdout)["results"][0]["outcome"] == "priority 0 -> -5"
    refused = gpudesk("hold", str(blocker))
    assert refused.returncode == 1
    assert "only a queued job can be held" in refused.stdout
    # release and resume of a job in another state: refused as hold is, its state named, exit 1
    # (the other job is acted on); a job already as asked is left so, exit 0
    refused = gpudesk("release", str(blocker), "waiting")
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        1,
        f"job {blocker} (blocker): running: only a held job can be released\n"
        f"job {queued} (waiting): released\n",
        "",
    )
    assert gpudesk("release", "waiting").stdout == f"job {queued} (waiting): not held\n"
    assert gpudesk("hold", "waiting").returncode == 0
    refused = gpudesk("resume", "waiting", str(blocker))
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        1,
        f"job {queued} (waiting): queued: only a suspended job can be resumed\n"
        f"job {blocker} (blocker): not suspended\n",
        "",
    )
    assert gpudesk("resume", str(blocker)).returncode == 0
    cases = [
        (("hold", "nope"), 1, "no job with id or name 'nope'"),
        (("requeue", str(queued), "424242"), 1, "no job with id 424242"),
        (("priority", "waiting"), 2, "give exactly one of --set N, --up or --down"),
        (("priority", "waiting", "--up", "--down"), 2, "(found --up and --down)"),
        # scontrol's order without its keyword: the flag is said
        (("priority", "waiting", "7"), 2, "to priority 7: gpudesk priority waiting --set 7"),
        (("priority", "waiting", "--set", "5000"), 2, "--set: expected a whole number from"),
        (("requeue", str(blocker)), 1, ""),
    ]
    for args, code, fragment in cases:
        result = gpudesk(*args)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        assert fragment in result.stderr
        assert "Traceback" not in result.stderr
    assert engine.job(queued).spec.priority == -5
    released = gpudesk("release", "waiting", "--json")
    assert released.returncode == 0
    assert json.loads(released.stdout)["results"][0]["outcome"] == "released"
    gate.touch()
    engine.wait_all_done([blocker, queued])


def test_energy_today_rises_and_is_kept_across_a_restart(home) -> None:
    engine = EngineHandle(home)
    engine.start(backend="sim:h100", sample_interval=0.2)
    try:

        def energy() -> float:
            return engine.api.telemetry().energy_today_j.get(0, 0.0)

        first = wait_for(energy, what="energy for the day")
        wait_for(lambda: energy() > first, what="the energy to rise")
        last_seen = energy()
        engine.stop()  # the engine stores what it counted when it stops
        engine.start(backend="sim:h100", sample_interval=0.2)
        assert engine.api.telemetry().energy_today_j[0] >= last_seen
    finally:
        engine.client.close()
