"""`gpudesk hold` and `release` pick jobs as `cancel` does (--user/--me/--name): a held array of
thousands of tasks is released by its name, not by its ids one by one (a real engine)."""

from __future__ import annotations

import json

from conftest import EngineHandle, Run

from gpudesk.core.jobs import TERMINAL_STATE_NAMES, JobSpec


def test_release_and_hold_pick_jobs_by_name_and_owner(engine: EngineHandle, gpudesk: Run) -> None:
    code, _, err = gpudesk("submit", "--hold", "--array", "0-3", "--name", "sw", "--", "true")
    assert code == 0, err
    (other,) = engine.api.submit_jobs(
        [JobSpec(name="other", command=("sleep", "30"))], hold=True
    ).ids
    code, out, err = gpudesk("release", "--name", "sw_*")
    assert code == 0, err
    assert out.splitlines() == [f"job {k} (sw_{k - 1}): released" for k in range(1, 5)], out
    assert engine.job(other).held  # not picked: its name does not match
    code, out, err = gpudesk("release", "--name", "sw_*")  # none held any more
    assert (code, out, err.strip()) == (0, "", "no held job matches")
    code, out, err = gpudesk("release", "--me")
    assert code == 0 and out.strip() == f"job {other} (other): released", (out, err)
    engine.wait_state(other, "running")
    (queued,) = engine.submit({"name": "q", "command": ["true"], "after": [other]})
    code, out, err = gpudesk("hold", "--me")  # the queued job, not the running one
    assert code == 0 and out.strip() == f"job {queued} (q): held", (out, err)
    engine.api.cancel([other, queued], grace=0)


def test_names_and_picks_together_or_neither_are_a_usage_error(gpudesk: Run) -> None:
    for argv, says in (
        (("hold", "3", "--me"), "name jobs or pick them with --user/--me/--name/--group, not"),
        (("hold", "3", "-g", "r@1"), "name jobs or pick them with --user/--me/--name/--group,"),
        (("release",), "which jobs? name them, or pick them with --user/--me/--name/--group"),
        (
            ("cancel",),
            "which jobs? name them, or pick them with --user/--me/--name/--group/--state",
        ),
        (("cancel", "3", "--state", "held"), "--user/--me/--name/--group/--state, not both"),
    ):
        code, out, err = gpudesk(*argv)
        assert code == 2 and out == "" and says in err, (argv, err)


def test_a_runs_jobs_are_picked_by_its_group(engine: EngineHandle, gpudesk: Run) -> None:
    """`--group RUN` picks the live jobs of one run (a detached `gpudesk run`'s, say), as
    `queue --group` lists them; another run's jobs, and a job of no run, are left alone."""

    def run_of(group: str, count: int) -> list[int]:
        specs = [JobSpec(name=f"j{k}", command=("sleep", "30"), group=group) for k in range(count)]
        return engine.api.submit_jobs(specs, hold=True).ids

    mine, theirs = run_of("p@20261205-1.1", 2), run_of("p@20261205-1.2", 1)
    (loose,) = engine.api.submit_jobs([JobSpec(name="j0", command=("true",))], hold=True).ids
    code, out, err = gpudesk("release", "--group", "p@20261205-1.1", "--name", "j1")
    assert code == 0 and out.strip() == f"job {mine[1]} (j1): released", (out, err)
    code, out, err = gpudesk("cancel", "-g", "p@20261205-1.1")
    assert code == 0, err
    # j1, released, may have started: "stopping" then; each of the run's jobs, no other
    assert sorted(int(line.split()[1]) for line in out.splitlines()) == mine, out
    assert [engine.job(j).state for j in (*theirs, loose)] == ["queued", "queued"]
    # j1, if it had started, is live until its process has gone: the second cancel waits for that
    engine.wait_state(mine[1], set(TERMINAL_STATE_NAMES))
    code, out, err = gpudesk("cancel", "--group", "p@20261205-1.1")  # none live any more
    assert (code, out, err.strip()) == (0, "", "no live job matches")
    engine.api.cancel([*theirs, loose], grace=0)


def test_jobs_named_with_an_unknown_one_are_acted_on_and_it_is_reported(
    engine: EngineHandle, gpudesk: Run
) -> None:
    """`cancel 1 99` said only "no job with id 99" and left job 1 held, which a user of
    `scancel 1 99` or `pueue kill 1 99` (both act on 1) takes for cancelled: the jobs that
    exist are acted on, each unknown one is said on stderr, exit 1; nothing else is touched."""
    held, kept, ended = engine.api.submit_jobs(
        [
            JobSpec(name="held", command=("true",)),
            JobSpec(name="kept", command=("true",)),
            JobSpec(name="ended", command=("false",)),
        ],
        hold=True,
    ).ids
    code, out, err = gpudesk("release", str(ended))
    assert code == 0, err
    engine.wait_state(ended, "failed")
    code, out, err = gpudesk("hold", "99", str(kept))  # already held: said, exit 1
    assert code == 1 and f"job {kept} (kept): " in out, (out, err)
    assert err.strip() == "error: no job with id 99", err
    code, out, err = gpudesk("requeue", "99", str(ended), "--json")
    assert code == 1, err
    said = json.loads(out)
    assert said["unknown"] == ["99"] and [(r["id"], r["ok"]) for r in said["results"]] == [
        (ended, True)
    ], said
    code, out, err = gpudesk("cancel", str(held), "99", "nosuch", "99")
    assert code == 1 and out.strip() == f"job {held} (held): cancelled", (out, err)
    assert err.splitlines() == [
        "error: no job with id 99",
        "error: no job with id or name 'nosuch'",
    ]
    assert engine.job(held).state == "cancelled" and engine.job(kept).state == "queued"
    code, out, err = gpudesk("cancel", "98", "99")  # none known: nothing done
    assert code == 1 and out == "" and len(err.splitlines()) == 2, (out, err)
    assert engine.job(kept).state == "queued"
    engine.api.cancel([kept, ended], grace=0)


def test_a_refused_argument_is_said_in_the_command_lines_words(
    engine: EngineHandle, gpudesk: Run
) -> None:
    """The engine names the request's field its arguments fail at (`'jobs[1]'`, `'unset_env'`),
    words a command line never typed: they are said as the argument or the option instead."""
    (job,) = engine.api.submit_jobs([JobSpec(name="kept", command=("true",))], hold=True).ids
    too_big = "9" * 20
    for command in (("show", too_big), ("cancel", str(job), too_big)):
        code, _, err = gpudesk(*command)
        assert code == 2 and err.startswith("error: a job id is at most"), (command, err)
    code, _, err = gpudesk("edit", str(job), "--unset-env", "")
    assert code == 2 and err.startswith("error: --unset-env: "), err
    code, _, err = gpudesk("drain", "--reason", "r" * 600)
    assert code == 2 and err.startswith("error: --reason: must be at most"), err
    assert engine.job(job).state == "queued"  # the refused cancel touched nothing
