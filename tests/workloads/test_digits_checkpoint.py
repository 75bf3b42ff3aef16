"""The digits workload's `--checkpoint` (docs/preemption.md): on its preempt signal it saves the
run at the next step and exits 75; run again it resumes from there and ends with the weights,
loss and accuracy of an uninterrupted run (torch on the CPU is deterministic here)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from gpudesk.workloads import checkpoint, digits
from gpudesk.workloads.common import StepCounter

ARGS = ["--epochs", "3", "--hidden", "16", "--threads", "1", "--seed", "3"]
STEPS_PER_EPOCH = 23  # 1,437 training digits in batches of 64


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = digits.main([*ARGS, *argv])
    return code, capsys.readouterr().out


def result(out: str) -> dict[str, object]:
    (line,) = [line for line in out.splitlines() if line.startswith("result ")]
    return json.loads(line.removeprefix("result "))  # type: ignore[no-any-return]


def test_a_preempted_run_resumes_to_the_uninterrupted_result(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.delenv(checkpoint.ENV_PREEMPT_SIGNAL, raising=False)
    code, out = run(capsys, "--checkpoint", str(tmp_path / "whole.pt"))
    assert code == 0, out
    whole = result(out)
    plain_code, plain_out = run(capsys)  # the ordinary loop: the same steps
    assert plain_code == 0
    plain = result(plain_out)
    assert (plain["final_loss"], plain["val_acc"]) == (whole["final_loss"], whole["val_acc"])

    # the preempt signal, for real, in the middle of epoch 2
    stop_at = STEPS_PER_EPOCH + 7
    real_step = StepCounter.step

    def step(self: StepCounter) -> None:
        real_step(self)
        if self.done == stop_at:
            os.kill(os.getpid(), signal.SIGUSR1)

    monkeypatch.setattr(StepCounter, "step", step)
    saved = tmp_path / "run.pt"
    code, out = run(capsys, "--checkpoint", str(saved))
    assert code == checkpoint.EXIT_PREEMPTED, out
    assert f"preempted at epoch 2 step {stop_at - STEPS_PER_EPOCH}" in out
    assert saved.exists() and "result " not in out
    monkeypatch.setattr(StepCounter, "step", real_step)
    code, out = run(capsys, "--checkpoint", str(saved))
    assert code == 0, out
    assert f"resumed from {saved} at epoch 2 step {stop_at - STEPS_PER_EPOCH}" in out
    resumed = result(out)
    for key in ("weights", "final_loss", "val_acc", "best_val_acc", "epochs"):
        assert resumed[key] == whole[key], key


def test_checkpoint_with_a_shared_loader_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        digits.main(["--loader", "shared", "--checkpoint", str(tmp_path / "x.pt")])
    assert exited.value.code == 2
    assert "--checkpoint works with --loader local" in capsys.readouterr().err
