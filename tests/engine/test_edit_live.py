"""`edit` on a real daemon: a queued job's spec changed before it starts (what runs, its place in
the queue, its event), the refusals (a started job, bad values, unknown jobs, a dependency
cycle), and the race with placement: a job starts as it was or as edited, never between."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import EngineHandle

from gpudesk.api.errors import EngineError


def sh(script: str, name: str, **extra: object) -> dict:
    return {"name": name, "command": ["sh", "-c", script], **extra}


def refused(code: str, call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(EngineError) as info:
        call(*args, **kwargs)  # type: ignore[operator]
    assert info.value.code == code, str(info.value)
    return str(info.value)


def test_an_edited_job_runs_as_edited_and_keeps_its_place(
    engine: EngineHandle, tmp_path: Path
) -> None:
    blocker = engine.occupy_the_only_slot(tmp_path / "gate")
    order = tmp_path / "order"
    first, middle, last = engine.submit(
        *(sh(f"echo {n} >> {order}", n, env={"GONE": "x"}) for n in ("first", "middle", "last"))
    )
    engine.api.hold([middle])
    result = engine.api.edit_job(
        middle,
        {
            "name": "edited",
            "command": ["sh", "-c", f'echo "edited $SEEN${{GONE:-}}" >> {order}'],
            "time_limit_s": 600,
        },
        set_env={"SEEN": "yes"},
        unset_env=["GONE"],
    )
    assert result.id == middle and result.name == "edited"
    assert result.changes[0] == "name middle -> edited"
    assert "time none -> 00:10:00" in result.changes
    assert result.changes[-2:] == ["env -GONE", "env SEEN=…"]  # names only: values may be secret
    shown = engine.show(middle)
    assert (shown.job.name, shown.job.held, shown.job.spec.time_limit_s) == ("edited", True, 600)
    (event,) = [e for e in shown.events if e.kind == "edit"]
    assert event.message == "edited by user: " + "; ".join(result.changes)
    # its id and its place: still between the other two
    assert [j.id for j in engine.api.jobs(states=["queued"])] == [first, middle, last]
    assert engine.api.edit_job(middle, {"name": "edited"}).changes == []  # nothing to change
    engine.api.release([middle])
    (tmp_path / "gate").touch()
    engine.wait_all_done([blocker, first, middle, last])
    assert order.read_text().split("\n")[:3] == ["first", "edited yes", "last"]


def test_a_started_or_ended_job_is_refused_naming_its_state(
    engine: EngineHandle, tmp_path: Path
) -> None:
    blocker = engine.occupy_the_only_slot(tmp_path / "gate")
    message = refused("refused", engine.api.edit_job, blocker, {"name": "late"})
    assert f"job {blocker} (blocker) is running: only a job that has not started" in message
    (tmp_path / "gate").touch()
    engine.wait_state(blocker, "succeeded")
    message = refused("refused", engine.api.edit_job, blocker, {"name": "late"})
    assert "is already succeeded" in message and "gpudesk requeue" in message
    assert engine.job(blocker).name == "blocker"


def test_bad_values_unknown_jobs_and_cycles_change_nothing(
    engine: EngineHandle, tmp_path: Path
) -> None:
    engine.occupy_the_only_slot(tmp_path / "gate")
    a, b, c = engine.submit(sh("true", "a"), sh("true", "b"), sh("true", "c"))
    before = engine.show(b).job
    assert "fields.gpus" in refused("invalid_args", engine.api.edit_job, b, {"gpus": -1})
    assert "fields.time_limit_s" in refused(
        "invalid_args", engine.api.edit_job, b, {"time_limit_s": 0}
    )
    assert "gpudesk priority" in refused("invalid_args", engine.api.edit_job, b, {"priority": 9})
    assert "fields.cluster: cannot be edited" in refused(
        "invalid_args", engine.api.edit_job, b, {"cluster": {"name": "x"}}
    )
    assert "set_env" in refused("invalid_args", engine.api.edit_job, b, set_env={"1X": "y"})
    assert "no variable 'NOPE'" in refused(
        "invalid_args", engine.api.edit_job, b, unset_env=["NOPE"]
    )
    assert "there is no job 9999" in refused(
        "unknown_job", engine.api.edit_job, b, {"after": [a, 9999]}
    )
    refused("unknown_job", engine.api.edit_job, "no-such-job", {"name": "x"})
    # a GPU job on a station with no GPUs: refused as the same submit would be, and said as
    # an edit's refusal (it said "nothing was submitted")
    said = refused("invalid_args", engine.api.edit_job, b, {"gpus": 1})
    assert said.endswith("so the job was left as it was.") and "submitted" not in said, said
    # c after b, then b after c: they would wait for each other for ever
    engine.api.edit_job(c, {"after": [b]})
    message = refused("invalid_args", engine.api.edit_job, b, {"after": [c]})
    assert f"job {b} runs after job {c} runs after job {b}" in message
    assert "for ever" in refused("invalid_args", engine.api.edit_job, a, {"after": [a]})
    assert engine.show(b).job == before
    assert [e.kind for e in engine.show(b).events].count("edit") == 0
    assert engine.api.edit_job(c, {"after": []}).changes == [f"after {b} -> none"]


def test_an_edit_racing_placement_is_all_or_nothing(engine: EngineHandle, tmp_path: Path) -> None:
    """Edits sent back to back while the engine frees the slot and starts the job: each is
    answered either "edited" (the job has not started, and will run as edited) or refused
    because the job started, as the last edit answered left it. Two variants swap the command
    and the environment together: a job started with half an edit would print a mix."""
    gate, out = tmp_path / "gate", tmp_path / "out"
    engine.occupy_the_only_slot(gate)
    variants = [
        ({"command": ["sh", "-c", f'echo "one $V" > {out}']}, {"V": "one"}),
        ({"command": ["sh", "-c", f'echo "two $V" > {out}']}, {"V": "two"}),
    ]
    (job,) = engine.submit(sh(f'echo "zero $V" > {out}', "racer", env={"V": "zero"}))
    engine.api.edit_job(job, *variants[0][:1], set_env=variants[0][1])
    expected, edits, refusals = "one one", 1, 0
    gate.touch()  # the blocker ends within 20 ms; the engine then starts `job`
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        fields, env = variants[edits % 2]
        try:
            engine.api.edit_job(job, fields, set_env=env)
        except EngineError as exc:
            assert exc.code == "refused", str(exc)
            assert "is running" in str(exc) or "is already succeeded" in str(exc), str(exc)
            refusals += 1
            break
        expected = f"{env['V']} {env['V']}"
        edits += 1
    assert refusals == 1, "the job never started"
    engine.wait_state(job, "succeeded")
    assert out.read_text().strip() == expected
    shown = engine.show(job)
    assert [e.kind for e in shown.events].count("edit") == edits
