"""Preemption in the live engine on a simulated A100 40GB (issue 39, docs/preemption.md): a long
low-priority preemptible job fills the GPU, a high-priority job arrives; the low one gets its
signal, checkpoints and leaves within its grace, the high one starts, and the low one is
requeued, resumes from its checkpoint (GPUDESK_PREEMPTED=1) and finishes with the result an
uninterrupted run has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, wait_for
from test_cli import gpudesk

from gpudesk.paths import Home
from gpudesk.policy.preemption import PROTECT_FACTOR

SIM = "sim:a100-40gb"
GRACE_S = 1.0
STEPS = 150  # 0.05 s each: 7.5 s of work

# Counts steps, summing them; on its signal saves where it is at the next step boundary and
# exits 75 (EX_TEMPFAIL); started again with the checkpoint there, resumes from it.
LOW = """
import json, os, pathlib, signal, sys, time
STEPS = int(sys.argv[3])
ckpt, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
asked = []
signal.signal(signal.SIGUSR1, lambda *_: asked.append(1))
state = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0, "total": 0}
log = {"resumed_at": state["step"], "preempted_env": os.environ.get("GPUDESK_PREEMPTED")}
with out.open("a") as f:
    f.write(json.dumps(log) + "\\n")
while state["step"] < STEPS:
    if asked:
        ckpt.write_text(json.dumps(state))
        with out.open("a") as f:
            f.write(json.dumps({"checkpointed_at": state["step"]}) + "\\n")
        sys.exit(75)
    time.sleep(0.05)
    state["step"] += 1
    state["total"] += state["step"]
with out.open("a") as f:
    f.write(json.dumps({"result": state["total"]}) + "\\n")
"""


@pytest.fixture
def engine(home: Home) -> Iterator[EngineHandle]:
    handle = EngineHandle(home)
    handle.start(backend=SIM, policy="auto", sample_interval=0.2)
    yield handle
    handle.client.close()  # `home` stops the engine


def test_a_high_priority_job_preempts_a_long_preemptible_one(
    engine: EngineHandle, tmp_path: Path
) -> None:
    ckpt, out = tmp_path / "ckpt.json", tmp_path / "out.jsonl"
    heavy = {"gpus": 1, "memory_gb": 35, "sm_pct": 95}
    (low,) = engine.submit(
        {
            "name": "low",
            "command": [sys.executable, "-c", LOW, str(ckpt), str(out), str(STEPS)],
            "priority": -10,
            "preemptible": True,
            "preempt_grace_s": GRACE_S,
            **heavy,
        }
    )
    engine.wait_state(low, "running")
    (high,) = engine.submit(
        {"name": "high", "command": [sys.executable, "-c", "pass"], "priority": 10, **heavy}
    )
    done = {j.id: j for j in engine.wait_all_done([low, high], timeout=60.0)}
    assert done[high].state == "succeeded" and done[low].state == "succeeded"
    # protected until it has run 2 x (grace + restart), then within a recheck, its grace
    # and the 60 s
    started = done[high].started_at
    assert started is not None
    assert started - done[high].submitted_at <= PROTECT_FACTOR * 2 * GRACE_S + 5 + GRACE_S + 60
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    first, saved, resumed, result = lines
    assert first == {"resumed_at": 0, "preempted_env": None}
    assert 0 < saved["checkpointed_at"] < STEPS
    assert resumed == {"resumed_at": saved["checkpointed_at"], "preempted_env": "1"}
    assert result == {"result": STEPS * (STEPS + 1) // 2}  # what an uninterrupted run sums
    detail = engine.show(low)
    assert [a.state for a in detail.attempts] == ["preempted", "exited"]
    assert done[low].preemptions == 1 and done[low].attempts == 2  # not a failed attempt
    assert "preempted for job" in (detail.attempts[0].reason or "")
    assert any(e.kind == "preempt" and "sent SIGUSR1" in e.message for e in detail.events)
    # the high job ran while the low one was out
    (high_attempt,) = engine.show(high).attempts
    assert detail.attempts[0].ended_at is not None and high_attempt.started_at is not None
    assert high_attempt.started_at >= detail.attempts[0].ended_at
    shown = gpudesk("show", str(low))
    assert shown.returncode == 0, shown.stderr
    assert "preempted" in shown.stdout and "(+1 preempted)" in shown.stdout, shown.stdout
    assert "preemptible (SIGUSR1, grace" in shown.stdout


def test_a_waiting_job_is_told_why_the_preemptible_job_does_not_give_way(
    engine: EngineHandle,
) -> None:
    """`gpudesk show` of the waiting job says why the rule does not preempt: a job just started
    is protected for 2 x (grace + restart) of running, here 4 min; one of equal priority is
    told what would let it preempt."""
    heavy = {"gpus": 1, "memory_gb": 35, "sm_pct": 95}
    (low,) = engine.submit(
        {
            "name": "low",
            "command": ["sleep", "600"],
            "preemptible": True,
            "preempt_grace_s": 60.0,
            **heavy,
        }
    )
    engine.wait_state(low, "running")
    (high,) = engine.submit({"name": "high", "command": ["true"], "priority": 10, **heavy})
    (same,) = engine.submit({"name": "same", "command": ["true"], **heavy})
    try:
        why = engine.show(high).waiting or ""
        assert f"not preempting: job {low} is protected: its attempt has run" in why, why
        assert "of the 4m00s it must run before it may be preempted" in why, why
        why = engine.show(same).waiting or ""
        assert f"no preemption: the preemptible job {low} has priority 0" in why, why
        shown = gpudesk("show", str(high))
        assert shown.returncode == 0 and "is protected" in shown.stdout, shown.stdout
    finally:
        engine.api.cancel([low, high, same])


# The workload's own training, 100 epochs of it: what the run costs in CPU. Its wall time is
# what the check needs (it must still be training once its protection, 2 x (1 s grace + 1 s
# restart), has ended; 1,000 unpaced epochs took ~5 s on a fast host, 400 were too few): the
# preemptible job runs the same module as its __main__ with every training step paced by a
# sleep (PACED), ~12 s of waiting on any host, and the uninterrupted run, the same training
# unpaced. A sleep between steps changes no step's arithmetic: both must end with the same
# weights.
DIGITS = ["--epochs", "100", "--hidden", "64"]
DIGITS += ["--batch-size", "64", "--threads", "1", "--seed", "1"]
STEP_PAUSE_S = 0.005  # x 23 steps an epoch x 100 epochs: ~11.5 s
PACED = f"""
import runpy, time
from gpudesk.workloads import common
step = common.StepCounter.step
def paced(self):
    time.sleep({STEP_PAUSE_S})
    step(self)
common.StepCounter.step = paced
runpy.run_module("gpudesk.workloads.digits", run_name="__main__", alter_sys=True)
"""


def result_of(text: str) -> dict[str, object]:
    (line,) = [line for line in text.splitlines() if line.startswith("result ")]
    return json.loads(line.removeprefix("result "))  # type: ignore[no-any-return]


@pytest.mark.slow(35)
# Two trainings beside an engine: the job's ~12 s of paced steps plus its two starts, the
# uninterrupted run's seconds beside it; beside two busy loops on 2 cores they take many times
# that. Its own waits still bound each step.
@pytest.mark.timeout(600)
def test_the_bundled_workload_checkpoints_requeues_and_resumes_to_the_same_result(
    engine: EngineHandle, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    # the uninterrupted run to compare with, started first: it trains beside the engine's
    alone = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpudesk.workloads.digits",
            *DIGITS,
            "--checkpoint",
            str(tmp_path / "alone.pt"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    heavy = {"gpus": 1, "memory_gb": 35, "sm_pct": 95}
    saved = tmp_path / "digits.pt"
    (low,) = engine.submit(
        {
            "name": "digits",
            "command": [sys.executable, "-c", PACED, *DIGITS, "--checkpoint", str(saved)],
            "priority": -10,
            "preemptible": True,
            # it saves at its next step, milliseconds away; a longer grace would make the rule
            # (rightly) wait: protection is 2 x (grace + restart) of running
            "preempt_grace_s": 1.0,
            **heavy,
        }
    )
    running = engine.wait_state(low, "running")
    assert running.log is not None and running.started_at is not None
    log = Path(running.log)
    wait_for(lambda: "epoch 1/" in log.read_text(errors="replace"), 60.0, what="training")
    # Past its protection (2 x (1 s grace + 1 s restart)): the pass the next submit causes may
    # preempt it. Most of the run is still ahead (see DIGITS), and a loaded machine only leaves
    # more of it.
    protected_until = running.started_at + PROTECT_FACTOR * (1.0 + 1.0) + 0.5
    wait_for(lambda: time.time() > protected_until, 30.0, what="the end of its protection")
    (high,) = engine.submit(
        {"name": "high", "command": [sys.executable, "-c", "pass"], "priority": 10, **heavy}
    )
    done = {j.id: j for j in engine.wait_all_done([low, high], timeout=300.0)}
    assert done[high].state == "succeeded" and done[low].state == "succeeded"
    detail = engine.show(low)
    assert [a.state for a in detail.attempts] == ["preempted", "exited"]
    assert detail.attempts[0].exit_code == 75
    last = Path(detail.attempts[1].log or "").read_text(errors="replace")
    assert f"resumed from {saved} at epoch" in last
    alone_out, alone_err = alone.communicate(timeout=240)
    assert alone.returncode == 0, alone_err
    resumed, uninterrupted = result_of(last), result_of(alone_out)
    for key in ("weights", "final_loss", "val_acc", "best_val_acc", "epochs"):
        assert resumed[key] == uninterrupted[key], key
