"""`gpudesk show` says what a user set and what the figures are, on a real engine: the time
limit and the jobs it runs after, "never ran" for a job cancelled first, why a job on an idle
GPU shares it under MPS, and what a MIG slice's energy figure is."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, wait_for


def test_show_prints_the_time_limit_and_the_jobs_it_runs_after_and_that_it_never_ran(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    engine.occupy_the_only_slot(gate)
    (prep,) = engine.submit({"name": "prep", "command": ["true"]})
    (train,) = engine.submit(
        {"name": "train", "command": ["true"], "after": [prep], "time_limit_s": 5400}
    )
    code, out, err = gpudesk("show", str(train))
    assert code == 0, err
    lines = [line.strip() for line in out.splitlines()]
    assert "time limit 1h30m per attempt" in out
    assert f"after      job {prep} (prep, queued): starts once all have succeeded" in lines
    assert "usage:     not measured yet" in lines  # it may still run
    assert gpudesk("cancel", str(prep))[0] == 0
    engine.wait_state(train, "cancelled")
    code, out, err = gpudesk("show", str(train))
    # cancelled because what it waited for was: it waits for nothing any more
    assert f"after      job {prep} (prep, cancelled)" in [line.strip() for line in out.splitlines()]
    assert "usage:     none: it never ran (cancelled before it started)" in out.splitlines()
    gate.touch()


def test_show_of_a_job_after_a_sweep_wraps_its_jobs_to_the_terminal(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = tmp_path / "gate"
    engine.occupy_the_only_slot(gate)
    names = [f"light-lr0.0{n}-h512-wd0.01-seed42" for n in range(1, 7)]
    sweep = engine.submit(*({"name": name, "command": ["true"]} for name in names))
    (summary,) = engine.submit({"name": "summary", "command": ["true"], "after": sweep})
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = gpudesk("show", str(summary))
    assert code == 0, err
    lines = out.splitlines()
    first = next(n for n, line in enumerate(lines) if line.startswith("  after      "))
    why = next(n for n, line in enumerate(lines) if line.startswith("  why "))
    field = lines[first:why]
    assert all(len(line) <= 80 for line in lines[first : why + 2]), out  # and why it waits
    mentions = [f"job {i} ({name}, queued)" for i, name in zip(sweep, names, strict=True)]
    said = " ".join(line.strip() for line in field)
    assert all(mention in said for mention in mentions), field  # none broken across lines
    assert said.endswith(": starts once all have succeeded"), field
    gate.touch()
    engine.wait_state(summary, "succeeded")
    out = gpudesk("show", str(summary))[1]
    assert "starts once" not in out  # it has run: it waits for nothing
    assert f"job {sweep[0]} ({names[0]}, succeeded)," in out


def test_a_job_alone_on_an_idle_gpu_says_why_mps_and_not_the_whole_gpu(
    sim_engine: EngineHandle, gpudesk: Run
) -> None:
    sim_engine.client.request("configure", station={"policy": "auto"})
    (job_id,) = sim_engine.submit(
        {"name": "small", "command": ["sleep", "30"], "gpus": 1, "memory_gb": 4, "sm_pct": 20}
    )
    sim_engine.wait_state(job_id, "running")
    placement = sim_engine.show(job_id).attempts[0].placement
    assert placement.mode == "mps", placement
    assert placement.reason == (
        f"GPU {placement.gpus[0]} idle; MPS, not the whole GPU: it asks for 20% SM and "
        "4.0 GiB (hint), so later jobs may share the GPU"
    )
    out = gpudesk("show", str(job_id))[1]
    assert "MPS, not the whole GPU: it asks for 20% SM" in out
    sim_engine.client.request("cancel", jobs=[job_id], grace=0)


def test_show_of_a_job_on_a_mig_slice_does_not_call_the_whole_gpus_counter_its_own(
    mig_engine: EngineHandle, gpudesk: Run
) -> None:
    (job_id,) = mig_engine.submit(
        {"name": "sliced", "command": ["sleep", "30"], "gpus": 1, "memory_gb": 4, "sm_pct": 20}
    )
    assert mig_engine.wait_state(job_id, "running").mode == "mig"
    wait_for(
        lambda: (usage := mig_engine.show(job_id).usage) is not None and usage.gpu_j is not None,
        20.0,
        what="the slice's job to be measured",
    )
    code, out, err = gpudesk("show", str(job_id))
    assert code == 0, err
    # the field as one line, where it folds on a terminal (an xdist worker has $COLUMNS)
    field = out[out.index("  GPU energy") : out.index("  CPU energy")]
    energy = " ".join(field.split())
    assert "the GPU to itself" not in energy
    assert "the whole GPU in MIG mode, not the slice's own: its idle slices included" in energy
    mig_engine.client.request("cancel", jobs=[job_id], grace=0)
    mig_engine.wait_all_done([job_id])


def test_show_fits_80_columns_breaking_no_argument_path_or_word(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long command, the attempt's placement and cgroup notes and the events wrap under
    their labels at 80 columns; a quoted argument, a path or a word is never cut, so only a
    line holding one token longer than the room runs past."""
    words = [
        "a",
        "long",
        "argument",
        "list",
        "that",
        "goes",
        "on",
        "and",
        "on",
        "past",
        "the",
        "edge",
        "of",
        "a",
        "terminal",
    ]
    command = ["python3", "-c", "print('one quoted argument with spaces')", *words]
    (job,) = engine.submit({"name": "wide", "command": command})
    engine.wait_state(job, "succeeded")
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = gpudesk("show", str(job))
    assert code == 0, err
    lines = out.splitlines()
    long = [line for line in lines if len(line) > 80]
    assert all(len(line.split()) <= 2 for line in long), long  # a label and one token
    start = next(n for n, line in enumerate(lines) if line.startswith("  command    "))
    end = next(n for n, line in enumerate(lines) if line.startswith("  workdir    "))
    said = " ".join(line.strip() for line in lines[start:end]).split(None, 1)[1]
    assert said == shlex.join(command), lines[start:end]  # every argument whole, in order
