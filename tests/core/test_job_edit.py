"""An edit's new spec, checked as a submit's, what it says changed, and the dependency cycles it
must not make: `core/job_edit.py` as a library."""

from __future__ import annotations

import msgspec
import pytest

from gpudesk.core.identity import Identity
from gpudesk.core.job_edit import dependency_cycle, edit_refusal, job_edit
from gpudesk.core.jobs import JobSpec, JobState, SpecError
from gpudesk.core.records import JobRecord

SPEC = JobSpec.from_dict(
    {"name": "train", "command": ["python", "t.py"], "env": {"A": "1"}, "time_limit_s": 60}
)


def test_fields_replace_a_null_clears_and_env_is_said_by_name_only() -> None:
    edit = job_edit(
        SPEC,
        {"HOME": "/h"},
        {"time_limit_s": None, "gpus": 2, "memory_gb": 8},
        {"TOKEN": "secret"},
        ["A", "HOME"],
    )
    assert (edit.spec.time_limit_s, edit.spec.gpus, edit.spec.memory_gb) == (None, 2, 8)
    assert dict(edit.spec.env) == {"TOKEN": "secret"}
    assert edit.base_env == {}
    assert edit.changes == (
        "gpus 0 -> 2",
        "mem none -> 8",  # as the option that edits it
        "time 00:01:00 -> none",
        "env -A",
        "env TOKEN=…",
        "env -HOME",
    )
    assert "secret" not in edit.message
    assert job_edit(SPEC, {}, {"name": "train"}, {}, []).changes == ()
    # hints with GPUs are taken; GPUs taken away from a hinted job too (it asks to run on the CPU)
    hinted = job_edit(SPEC, {}, {"gpus": 1, "sm_pct": 40}, {}, []).spec
    assert job_edit(hinted, {}, {"gpus": 0}, {}, []).spec.gpus == 0


def test_control_characters_in_what_changed_are_spelled_out() -> None:
    # The event is read by `gpudesk show` and the desk on a terminal: the command's escape
    # sequences (a cleared screen) and an inherited variable's odd name are shown, not obeyed.
    edit = job_edit(
        SPEC, {"\x1b]0;X\x07": "1"}, {"command": ["printf", "\x1b[2J\r\t"]}, {}, ["\x1b]0;X\x07"]
    )
    assert edit.changes == (
        "command python t.py -> printf \\x1b[2J\\x0d\\x09",
        "env -\\x1b]0;X\\x07",
    )


@pytest.mark.parametrize(
    ("fields", "set_env", "unset", "key"),
    [
        ({"gpus": -1}, {}, [], "gpus"),
        ({"priority": 5}, {}, [], "priority"),
        ({"group": "g"}, {}, [], "group"),
        ({"after": [-1]}, {}, [], "after"),
        ({"command": []}, {}, [], "command"),
        ({}, {"1BAD": "x"}, [], "env"),
        ({}, {}, ["NOPE"], "unset_env"),
        # GPU hints for a job with no GPU (SPEC has none), as submit refuses them
        ({"memory_gb": 8}, {}, [], "memory_gb"),
        ({"sm_pct": 50, "name": "x"}, {}, [], "sm_pct"),
        ({"gpus": 0, "memory_gb": 8}, {}, [], "memory_gb"),
    ],
)
def test_a_bad_edit_names_its_field(
    fields: dict, set_env: dict, unset: list[str], key: str
) -> None:
    with pytest.raises(SpecError) as info:
        job_edit(SPEC, {}, fields, set_env, unset)
    assert info.value.key == key


def test_a_cycle_is_named_from_the_edited_job_back_to_it() -> None:
    after = {7: (9,), 9: (5,), 8: ()}
    jobs = {
        job_id: JobRecord.queued(
            job_id,
            JobSpec(name=f"j{job_id}", command=("true",), after=refs),
            0.0,
            Identity.of(1, 1, [1]),
        )
        for job_id, refs in after.items()
    }

    def jobs_of(ids: set[int]) -> list[JobRecord]:
        return [jobs[i] for i in ids if i in jobs]

    assert dependency_cycle(5, [8, 7], jobs_of) == (
        "the jobs would wait for each other for ever: job 5 runs after job 7 runs after job 9 "
        "runs after job 5"
    )
    assert dependency_cycle(5, [5], jobs_of) == (
        "the jobs would wait for each other for ever: job 5 runs after job 5"
    )
    assert dependency_cycle(5, [8], jobs_of) is None
    assert dependency_cycle(6, [7], jobs_of) is None  # 7 waits on 9 and 5, never on 6


def test_a_started_job_is_refused_whoever_asks_a_tracked_one_left_to_the_engine() -> None:
    owner = Identity.of(1, 1, [1])
    queued = JobRecord.queued(3, SPEC, 0.0, owner)
    assert edit_refusal(queued) is None
    tracked = JobSpec.from_dict({**SPEC.to_dict(), "tracking": {"mlflow_uri": "http://x:5000"}})
    # its run is made when it is placed: whether it is made yet, only the engine knows
    assert edit_refusal(JobRecord.queued(3, tracked, 0.0, owner)) is None
    running = msgspec.structs.replace(queued, state=JobState.RUNNING)
    assert edit_refusal(running) == (
        "job 3 (train) is running: only a job that has not started (queued, held, or waiting "
        "for the jobs it runs after) can be edited; `gpudesk requeue` runs a finished one "
        "again, and a requeued job can be edited"
    )
    ended = msgspec.structs.replace(queued, state=JobState.FAILED)
    assert "job 3 (train) is already failed:" in (edit_refusal(ended) or "")


def test_an_edit_keeps_the_tasks_an_arrays_id_named_and_names_them_for_a_new_one() -> None:
    """An array's id made a dependency on its 200 tasks (more than a client may name): an edit
    of another field keeps them; one that names an array's id is given its tasks."""
    tasks = {1: {task: 1 + task for task in range(200)}, 500: {0: 500, 1: 501}}
    waiting = msgspec.structs.replace(SPEC, after=tuple(range(1, 201)))
    kept = job_edit(waiting, {}, {"gpus": 1}, {}, [], lambda i: tasks.get(i, {})).spec
    assert kept.after == waiting.after and kept.gpus == 1
    named = job_edit(waiting, {}, {"after_any": [500]}, {}, [], lambda i: tasks.get(i, {}))
    assert named.spec.after_any == (500, 501) and named.spec.after == waiting.after
