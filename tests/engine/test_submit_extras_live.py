"""pueue's and Slurm's everyday submit verbs on the real daemon (issue 41, item 5): `--begin`
(the job waits as BeginTime and the engine wakes for it), `--comment`, `--array 0-5%2` (the
throttle measured by the jobs' own start and end times), `--after-any` and `--after-notok`
with a job that really fails. Real `gpudesk` processes and a real engine."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from conftest import EngineHandle, wait_for

from gpudesk.api.errors import EngineError

GPUDESK = [sys.executable, "-m", "gpudesk"]
# each job writes when it started and ended, by its own clock reading
STAMP = (
    f'{sys.executable} -c \'import sys, time; open(sys.argv[1], "a").write("%r\\n" % time.time())\''
)


def gpudesk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60)


def submitted_ids(result: subprocess.CompletedProcess[str]) -> list[int]:
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return list(data.get("ids") or [data["id"]])


def test_a_job_with_a_begin_time_waits_as_begintime_and_starts_at_it(
    engine: EngineHandle, tmp_path: Path
) -> None:
    # nothing else wakes the loop meanwhile: no samples, and no request until the job ran
    engine.client.request("configure", station={"sample_interval": 60})
    started = tmp_path / "started"
    (job_id,) = submitted_ids(
        gpudesk(
            "submit", "--json", "--begin", "now+3s", "--", "sh", "-c", f"date +%s.%N > {started}"
        )
    )
    job = engine.job(job_id)
    assert job.spec.begin_at is not None
    assert job.state == "queued" and job.wait_reason == "BeginTime"
    assert "(BeginTime)" in gpudesk("queue").stdout
    assert "begins at" in (engine.show(job_id).waiting or "")
    wait_for(lambda: started.exists() and started.read_text().strip(), 30, what="the job to run")
    assert float(started.read_text()) >= job.spec.begin_at
    started_at = engine.wait_state(job_id, "succeeded").started_at
    assert started_at is not None and started_at >= job.spec.begin_at
    # The loop woke for the begin time, not at its next idle turn (up to a second later). The
    # engine's own start time, taken as it decides: the job's stamp would add its wrapper's
    # and sh's start-up, 0.63 s once on a loaded 2-core CI.
    assert started_at - job.spec.begin_at < 0.3, started_at - job.spec.begin_at


def test_an_array_runs_each_task_once_and_its_throttle_caps_how_many_run_at_once(
    engine: EngineHandle, tmp_path: Path
) -> None:
    engine.client.request("configure", station={"slots": 4})  # room for 4: the throttle caps 2
    script = (
        f"{STAMP} {tmp_path}/start-$GPUDESK_ARRAY_TASK_ID; sleep 0.6; "
        f"{STAMP} {tmp_path}/end-$GPUDESK_ARRAY_TASK_ID; "
        f"echo $GPUDESK_ARRAY_JOB_ID > {tmp_path}/array-$GPUDESK_ARRAY_TASK_ID"
    )
    ids = submitted_ids(
        gpudesk("submit", "--json", "--name", "arr", "--array", "0-5%2", "--", "sh", "-c", script)
    )
    assert len(ids) == 6
    listing = wait_for(
        lambda: "(JobArrayTaskLimit)" in (out := gpudesk("queue").stdout) and out,
        20,
        what="a task held back by the throttle",
    )
    assert "arr_5" in listing
    jobs = engine.wait_all_done(ids, timeout=60)
    assert [j.state for j in jobs] == ["succeeded"] * 6
    assert [j.name for j in jobs] == [f"arr_{task}" for task in range(6)]
    assert {(tmp_path / f"array-{task}").read_text().strip() for task in range(6)} == {str(ids[0])}
    spans = [
        (
            float((tmp_path / f"start-{task}").read_text()),
            float((tmp_path / f"end-{task}").read_text()),
        )
        for task in range(6)
    ]
    # the most that ran at once, by the jobs' own start and end times
    most = max(sum(1 for s, e in spans if s <= moment < e) for moment, _ in spans)
    assert most == 2, spans
    detail = gpudesk("show", str(ids[3])).stdout
    assert f"task 3 of array job {ids[0]}, at most 2 of the array at once" in detail
    assert f"{ids[0]}_3%2" in gpudesk("queue", "--all", "--long").stdout


def test_afterany_and_afternotok_follow_a_job_that_really_failed(engine: EngineHandle) -> None:
    (failing,) = submitted_ids(
        gpudesk("submit", "--json", "--name", "breaks", "--", "sh", "-c", "sleep 0.5; exit 3")
    )
    (fine,) = submitted_ids(gpudesk("submit", "--json", "--name", "fine", "--", "true"))
    (anyway,) = submitted_ids(
        gpudesk("submit", "--json", "--name", "anyway", "--after-any", "breaks", "--", "true")
    )
    (rescue,) = submitted_ids(
        gpudesk("submit", "--json", "--after-notok", str(failing), "--name", "rescue", "--", "true")
    )
    (never,) = submitted_ids(
        gpudesk("submit", "--json", "--after-notok", str(fine), "--name", "never", "--", "true")
    )
    jobs = {j.name: j for j in engine.wait_all_done([failing, fine, anyway, rescue, never])}
    assert jobs["breaks"].state == "failed" and jobs["breaks"].exit_code == 3
    assert jobs["anyway"].state == "succeeded"
    assert jobs["anyway"].started_at >= jobs["breaks"].ended_at
    assert jobs["rescue"].state == "succeeded"
    assert jobs["never"].state == "cancelled" and jobs["never"].attempts == 0
    assert "DependencyNeverSatisfied" in (jobs["never"].reason or "")
    assert jobs["anyway"].spec.after_any == [failing]
    assert "afternotok job" in gpudesk("show", str(rescue)).stdout


def test_a_comment_shows_in_show_queue_and_history(engine: EngineHandle) -> None:
    (job_id,) = submitted_ids(
        gpudesk("submit", "--json", "--comment", "baseline, lr 3e-4", "--", "true")
    )
    engine.wait_state(job_id, "succeeded")
    assert "comment    baseline, lr 3e-4" in gpudesk("show", str(job_id)).stdout
    assert "baseline, lr 3e-4" in gpudesk("queue", "--all", "--long").stdout
    assert "baseline, lr 3e-4" in gpudesk("history", "--wide").stdout
    assert engine.job(job_id).spec.comment == "baseline, lr 3e-4"


def test_bad_input_is_one_paragraph_and_queues_nothing(engine: EngineHandle) -> None:
    for args, says in (
        (("--comment", "red\x1b[31m"), "--comment: a comment cannot contain control characters"),
        (("--begin", "tomorow"), "--begin: 'tomorow' is not a begin time"),
        (("--array", "9-2"), "--array: '9-2': a range goes up"),
        (("--array", "0-3%0"), "--array: %0: the throttle is a whole number from 1"),
        (("--begin", "2031-01-01"), "--begin: a begin time is at most 366 days ahead"),
        (("--after-notok", "nosuchjob"), "nosuchjob"),
    ):
        done = gpudesk("submit", *args, "--", "true")
        assert done.returncode != 0, args
        assert "Traceback" not in done.stderr
        assert says in done.stderr, done.stderr
        assert len(done.stderr.strip().split("\n\n")) == 1, done.stderr
    assert engine.api.jobs() == []
    # what no typed client sends: the door refuses it, naming the field
    # (an array's first job named by an id continues an array of an earlier request: one that
    # names no job is `unknown_job`, as `after` is)
    for job, code, says in (
        ({"comment": "x\x07y"}, "invalid_args", "jobs[0].comment"),
        ({"array_task": 0, "array_job": 5}, "unknown_job", "jobs[0].array_job"),
        ({"array_task": 0, "array_job": -1}, "invalid_args", "jobs[0].array_job"),
        ({"begin_at": "soon"}, "invalid_args", "jobs[0].begin_at"),
    ):
        try:
            engine.client.request(
                "submit", jobs=[{"name": "raw", "command": ["true"], **job}], env={}
            )
        except EngineError as exc:
            assert exc.code == code and says in str(exc), exc
        else:
            raise AssertionError(f"{job} was accepted")
    assert engine.api.jobs() == []


def test_a_job_that_must_succeed_and_must_not_is_refused_at_submit(engine: EngineHandle) -> None:
    """A job named by both --after (afterok) and --after-notok was queued and could never
    start: that job can only succeed or not (Slurm leaves it pending for ever, reason
    DependencyNeverSatisfied). Refused at submit, by name or id, exit 2, nothing queued; and
    by the engine itself, for a client that does not check."""
    (first,) = submitted_ids(gpudesk("submit", "--json", "--name", "prep", "--", "true"))
    for after, notok in (("prep", str(first)), (f"{first},prep", f"7,{first}")):
        done = gpudesk("submit", "--after", after, "--after-notok", notok, "--", "true")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(
            f"error: --after and --after-notok both name job {first}: it would have to succeed "
            "for --after and end without succeeding for --after-notok, so this job could never "
            "start (Slurm's DependencyNeverSatisfied)"
        ), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
    raw = {"name": "raw", "command": ["true"]}
    for jobs, says in (
        ([{**raw, "after": [first], "after_notok": [first]}], f"both name job {first}"),
        ([raw, {**raw, "after": [-1], "after_notok": [-1]}], "both name job 1 of this request"),
    ):
        try:
            engine.client.request("submit", jobs=jobs, env={})
        except EngineError as exc:
            # the fields said as keys, which a client says as its options (as the CLI does)
            assert exc.code == "invalid_args" and "after_notok: `after` and `after_notok`" in str(
                exc
            ), exc
            assert says in str(exc), exc
        else:
            raise AssertionError(f"{jobs} was accepted")
    assert [job.id for job in engine.api.jobs()] == [first]


def test_an_arrays_id_and_one_of_its_tasks_as_after_and_after_notok_are_refused(
    engine: EngineHandle,
) -> None:
    """`--after 144` waits for every task of array 144, so `--after-notok 144_2` (one of them)
    can never be met either: the engine expands the array before its check, as it does when
    the job waits (it was accepted, and the job stayed queued for good)."""
    head, *tasks = submitted_ids(gpudesk("submit", "--json", "--array", "0-2", "--", "true"))
    done = gpudesk("submit", "--after", str(head), "--after-notok", f"{head}_1", "--", "true")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        f"error: --after-notok: --after and --after-notok both name job {tasks[0]}: it would "
        "have to succeed for --after and end"
    ), done.stderr  # the engine's message, in the options typed (not `after_notok`)
    assert [job.id for job in engine.api.jobs()] == [head, *tasks]


def test_an_array_from_the_typed_client_names_its_first_job(engine: EngineHandle) -> None:
    from gpudesk.core.jobs import JobSpec
    from gpudesk.core.submit_options import parse_array

    array = parse_array("3,5%1")
    specs = [
        JobSpec(
            name=f"t{task}",
            command=("true",),
            array_task=task,
            array_job=-1 if number else None,
            array_limit=array.limit,
        )
        for number, task in enumerate(array.tasks)
    ]
    ids = engine.api.submit(specs)
    jobs = engine.wait_all_done(ids)
    assert [j.spec.array_job for j in jobs] == [None, ids[0]]
    assert [j.spec.array_task for j in jobs] == [3, 5]
    assert jobs[1].started_at >= jobs[0].ended_at  # %1: one at a time


def test_edit_moves_a_begin_time_and_a_comment_as_scontrol_update_does(
    engine: EngineHandle, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    (job_id,) = submitted_ids(
        gpudesk(
            "submit", "--json", "--begin", "now+1h", "--", "sh", "-c", f"date +%s.%N > {started}"
        )
    )
    assert engine.job(job_id).wait_reason == "BeginTime"
    moved = gpudesk("edit", str(job_id), "--begin", "now+2h", "--comment", "moved on")
    assert moved.returncode == 0, moved.stderr
    assert "begin " in moved.stdout and "comment none -> moved on" in moved.stdout
    job = engine.job(job_id)
    assert job.spec.comment == "moved on" and job.wait_reason == "BeginTime"
    asked = time.time()
    assert gpudesk("edit", str(job_id), "--begin", "now").returncode == 0
    wait_for(lambda: started.exists() and started.read_text().strip(), 20, what="the job to run")
    assert float(started.read_text()) >= asked
    bad = gpudesk("edit", str(job_id), "--begin", "whenever")
    assert bad.returncode != 0 and "--begin: 'whenever' is not a begin time" in bad.stderr
