"""`gpudesk hold` and `release` pick jobs as `cancel` does (--user/--me/--name): a held array of
thousands of tasks is released by its name, not by its ids one by one (a real engine)."""

from __future__ import annotations

from conftest import EngineHandle, Run

from gpudesk.core.jobs import JobSpec


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
        (("hold", "3", "--me"), "name jobs or pick them with --user/--me/--name, not both"),
        (("release",), "which jobs? name them, or pick them with --user/--me/--name"),
        (("cancel",), "which jobs? name them, or pick them with --user/--me/--name/--state"),
        (("cancel", "3", "--state", "held"), "--user/--me/--name/--state, not both"),
    ):
        code, out, err = gpudesk(*argv)
        assert code == 2 and out == "" and says in err, (argv, err)
