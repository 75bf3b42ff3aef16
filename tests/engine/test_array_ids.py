"""An array's id means the whole array, as Slurm reads it (docs/jobs.md, "An array's id names
every task"): `cancel 144`, `hold`, `release`, `requeue`, `priority`, `suspend`, `resume`,
`cancel --signal`, `wait` and `--after 144` act on (or wait for) every task of array 144, and
`144_2` names its task 2 alone (Slurm's JOBID_TASK). A real engine, the CLI in-process."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from conftest import EngineHandle, Run, wait_for

from gpudesk.core.jobs import JobSpec


def submit_array(gpudesk: Run, *args: str, tasks: str = "0-2") -> list[int]:
    """The ids of the array `gpudesk submit --array TASKS` made, from what it said."""
    code, out, err = gpudesk("submit", "--array", tasks, "--name", "sw", *args)
    assert code == 0, err
    first, last = re.search(r"jobs (\d+)-(\d+)", out).groups()  # type: ignore[union-attr]
    return list(range(int(first), int(last) + 1))


def said(out: str) -> list[str]:
    return sorted(out.splitlines())


def test_an_array_id_names_every_task_and_id_task_one_of_them(
    engine: EngineHandle, gpudesk: Run
) -> None:
    # released, each still waits for `gate`, held: none starts
    (gate,) = engine.api.submit_jobs([JobSpec(name="gate", command=("true",))], hold=True).ids
    head, one, two = submit_array(gpudesk, "--hold", "--after", str(gate), "--", "true")
    (lone,) = engine.api.submit_jobs([JobSpec(name="lone", command=("true",))], hold=True).ids
    code, out, err = gpudesk("release", f"{head}_1")
    assert (code, out.strip()) == (0, f"job {one} (sw_1): released"), err
    code, out, err = gpudesk("priority", "--set", "3", str(head))
    assert code == 0, err
    assert [engine.job(i).spec.priority for i in (head, one, two)] == [3, 3, 3]
    code, out, err = gpudesk("release", str(head))
    assert code == 0, err
    assert out.splitlines() == [
        f"job {head} (sw_0): released",
        f"job {one} (sw_1): not held",
        f"job {two} (sw_2): released",
    ]
    code, out, err = gpudesk("hold", str(head))
    assert code == 0 and len(out.splitlines()) == 3, (out, err)
    assert all(engine.job(i).held for i in (head, one, two))
    # one task by JOBID_TASK; a task the array does not have is reported, the rest acted on
    code, out, err = gpudesk("cancel", f"{head}_2", f"{head}_9", str(lone))
    assert code == 1
    assert said(out) == sorted([f"job {lone} (lone): cancelled", f"job {two} (sw_2): cancelled"])
    assert err.strip() == f"error: no job {head}_9"
    assert [engine.job(i).state for i in (head, one)] == ["queued", "queued"]
    code, out, err = gpudesk("cancel", str(head))
    assert code == 0, err
    assert out.splitlines() == [
        f"job {head} (sw_0): cancelled",
        f"job {one} (sw_1): cancelled",
        f"job {two} (sw_2): already cancelled",
    ]
    code, out, err = gpudesk("requeue", str(head))
    assert code == 0 and len(out.splitlines()) == 3, (out, err)
    assert [engine.job(i).state for i in (head, one, two)] == ["queued"] * 3
    engine.api.cancel([head, gate], grace=0)


def test_a_task_name_stays_a_name_and_a_task_range_names_its_tasks(
    engine: EngineHandle, gpudesk: Run
) -> None:
    """A range of an array's tasks (`144_[0,2]`) names those tasks where a command acts on
    many jobs, as scancel takes it; where it takes one job, one line says to name one."""
    head, one, two = submit_array(gpudesk, "--hold", "--", "true")
    code, out, err = gpudesk("show", "sw_1")  # a task's name: a name
    assert code == 0 and out.startswith(f"job {one}: sw_1"), (out, err)
    code, out, err = gpudesk("show", f"{head}_1")
    assert code == 0 and out.startswith(f"job {one}: sw_1"), (out, err)
    code, out, err = gpudesk("show", f"{head}_[0-2]")
    assert code != 0 and out == "" and len(err.strip().splitlines()) == 1, (out, err)
    assert "names several jobs; name one task here" in err and "Traceback" not in err
    code, out, err = gpudesk("release", f"{head}_[0,2]", f"{head}_[7]")
    assert code == 1 and err.strip() == f"error: no job {head}_7", (out, err)
    assert [line.split(":")[0] for line in out.splitlines()] == [
        f"job {head} (sw_0)",
        f"job {two} (sw_2)",
    ]
    assert engine.job(one).held and not engine.job(two).held
    for bad, said in (
        (f"{head}_[0-2%2]", "the indexes as --array takes them"),
        (f"{head}_[2-0]", "a range goes up"),
        (f"{head}_[0-2", "the indexes as --array takes them"),
    ):
        code, out, err = gpudesk("cancel", bad)
        assert code == 2 and out == "" and f"error: {bad}: " in err and said in err, err
    code, out, err = gpudesk("wait", "--timeout", "0", f"{head}_[1]")
    assert code == 124, (out, err)  # task 1 is held: the range named it, and only it
    code, _, err = gpudesk("submit", "--name", "144_2", "--", "true")
    assert code == 2 and "cannot read as an array's task" in err, err
    engine.api.cancel([head], grace=0)


def test_show_logs_and_submit_say_what_an_array_id_names(
    engine: EngineHandle, gpudesk: Run
) -> None:
    code, out, err = gpudesk("submit", "--array", "0-2", "--name", "sw", "--", "echo", "hi")
    assert code == 0, err
    head = int(re.search(r"array job (\d+)", out).group(1))  # type: ignore[union-attr]
    assert f"; {head} names them all, {head}_0 task 0" in out, out
    engine.wait_all_done([head, head + 1, head + 2])
    code, out, err = gpudesk("show", str(head))
    assert code == 0 and out.startswith(f"job {head}: sw_0"), (out, err)  # the first task
    line = (
        f"array {head}: tasks 0-2 (jobs {head}-{head + 2}); {head} names them all, {head}_1 task 1"
    )
    assert line in out, out
    code, out, err = gpudesk("show", f"{head}_1")  # a task: no array line
    assert code == 0 and f"array {head}:" not in out, out
    code, out, err = gpudesk("logs", str(head))
    assert (code, out) == (0, "hi\n"), err
    assert err.strip() == f"job {head} is task 0 of {line}"
    detail = engine.show(head)  # --json and the API: one field more, the rest as it was
    assert detail.array is not None and detail.array.tasks == [0, 1, 2]
    assert detail.array.jobs == [head, head + 1, head + 2]
    assert engine.show(head + 1).array is None


def test_wait_on_an_array_id_waits_for_every_task(engine: EngineHandle, gpudesk: Run) -> None:
    """Task 2 fails after task 0 succeeded: `wait HEAD` exits with task 2's status."""
    script = 'test "$GPUDESK_ARRAY_TASK_ID" != 2 || { sleep 0.5; exit 3; }'
    head, _one, two = submit_array(gpudesk, "--", "sh", "-c", script)
    code, out, err = gpudesk("wait", str(head))
    assert code == 3, (out, err)
    assert engine.job(two).state == "failed"
    assert len(out.splitlines()) == 3, out  # each task's end, said once
    code, out, err = gpudesk("wait", f"{head}_0")  # the first task alone
    assert code == 0, (out, err)


def test_after_an_array_id_runs_after_every_task(engine: EngineHandle, gpudesk: Run) -> None:
    """Expanded by the engine at submit and edit, so an API client gets Slurm's meaning too."""
    (gate,) = engine.api.submit_jobs([JobSpec(name="gate", command=("true",))], hold=True).ids
    head, one, two = submit_array(gpudesk, "--after", str(gate), "--", "true")
    code, out, err = gpudesk("submit", "--json", "--name", "total", "--after", str(head), "true")
    assert code == 0, err
    total = int(re.search(r"\d+", out).group())  # type: ignore[union-attr]
    assert engine.job(total).spec.after == [head, one, two]
    (api,) = engine.api.submit_jobs(
        [JobSpec(name="api", command=("true",), after_any=(head,), workdir=str(engine.home.root))],
        hold=True,
    ).ids
    assert engine.job(api).spec.after_any == [head, one, two]
    code, out, err = gpudesk("edit", str(api), "--after", f"{head}_2")  # one task
    assert code == 0, err
    assert engine.job(api).spec.after == [two]
    code, out, err = gpudesk("edit", str(api), "--after-notok", str(head))
    assert code == 0, err
    assert engine.job(api).spec.after_notok == [head, one, two]
    # the first task alone: by ID_TASK, or by its name (the engine is told: first_tasks_alone)
    for ref in (f"{head}_0", "sw_0"):
        code, out, err = gpudesk("submit", "--json", "--hold", "--after", ref, "true")
        assert code == 0, err
        alone = int(re.search(r"\d+", out).group())  # type: ignore[union-attr]
        assert engine.job(alone).spec.after == [head], ref
        code, out, err = gpudesk("edit", str(alone), "--after-any", f"{head}_0,{one}")
        assert code == 0 and engine.job(alone).spec.after_any == [head, one], err
        code, out, err = gpudesk("edit", str(alone), "--after-any", f"{head}_0,{head}")
        assert engine.job(alone).spec.after_any == [head, one, two], err  # the id: all
        engine.api.cancel([alone], grace=0)
    code, _, err = gpudesk("submit", "--after", f"{head}_9", "--name", "x", "true")
    assert code == 2 and f"there is no job {head}_9 to run after" in err, err
    code, out, err = gpudesk("release", str(gate))
    engine.wait_all_done([head, one, two, total])
    jobs = {job.id: job for job in engine.api.jobs(ids=[head, one, two, total])}
    assert jobs[total].state == "succeeded"
    assert jobs[total].started_at >= max(jobs[i].ended_at or 0 for i in (head, one, two))
    engine.api.cancel([api], grace=0)


def test_suspend_resume_and_signal_reach_every_running_task(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    engine.client.request("configure", station={"slots": 4})
    ready = tmp_path / "ready"
    ready.mkdir()
    deaf = (  # each task says when it ignores SIGUSR1
        "import os, signal, time; signal.signal(signal.SIGUSR1, signal.SIG_IGN); "
        f"open('{ready}/' + os.environ['GPUDESK_ARRAY_TASK_ID'], 'w').close(); time.sleep(30)"
    )
    head, one, two = submit_array(gpudesk, "--", sys.executable, "-c", deaf)
    wait_for(lambda: len(list(ready.iterdir())) == 3, 20, what="every task to run")
    for verb, state in (("suspend", "suspended"), ("resume", "running")):
        code, out, err = gpudesk(verb, str(head))
        assert code == 0 and len(out.splitlines()) == 3, (verb, out, err)
        assert [engine.wait_state(i, state).state for i in (head, one, two)] == [state] * 3
    code, out, err = gpudesk("cancel", "--signal", "USR1", f"{head}_1")
    assert (code, out) == (0, f"job {one} (sw_1): sent SIGUSR1\n"), err
    code, out, err = gpudesk("cancel", "--signal", "USR1", str(head))
    assert code == 0 and out.count("sent SIGUSR1") == 3, (out, err)
    engine.api.cancel([head], grace=0)


def test_an_array_sent_in_parts_is_whole_once_its_submit_returns(
    engine: EngineHandle, gpudesk: Run
) -> None:
    """501 tasks go in two requests (PART_JOBS a request): `--after` the array's id, given once
    submit returned, names every one of them, as `cancel` does."""
    ids = submit_array(gpudesk, "--hold", "--", "true", tasks="0-500")
    assert len(ids) == 501
    code, out, err = gpudesk(
        "submit", "--json", "--hold", "--name", "all", "--after", str(ids[0]), "true"
    )
    assert code == 0, err
    total = int(re.search(r"\d+", out).group())  # type: ignore[union-attr]
    assert engine.job(total).spec.after == ids
    assert len(engine.show(ids[0]).array.jobs) == 501  # type: ignore[union-attr]
    code, out, err = gpudesk("cancel", str(ids[0]), str(total))
    assert code == 0 and len(out.splitlines()) == 502, err
