"""`gpudesk run --attach`: a run whose `gpudesk run` was killed (an SSH session that dropped, a
SIGKILL) is followed to its end and reported by a second `gpudesk run`, which submits nothing.
Real engines, real `gpudesk` processes."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from conftest import EngineHandle, wait_for
from test_cli import GPUDESK, gpudesk, long_jobs_profile

from gpudesk.api.submit import profile_tag
from gpudesk.core.jobs import JobSpec
from gpudesk.profile import load_profile


def gated_profile(tmp_path: Path, gate: Path) -> Path:
    """Three jobs (long#1-3) that each print a result once `gate` exists, on 2 CPU slots."""
    script = f"while [ ! -e {gate} ]; do sleep 0.05; done; echo 'result {{\"acc\": 0.5}}'"
    return long_jobs_profile(tmp_path, ["sh", "-c", script], repeat=3)


def test_a_killed_runs_jobs_are_followed_and_reported_by_attach(
    engine: EngineHandle, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    profile = gated_profile(tmp_path, gate)
    run = subprocess.Popen(
        [*GPUDESK, "run", str(profile)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(
            lambda: len(engine.client.request("jobs", states=["running"])["jobs"]) == 2,
            what="two jobs running",
        )
    finally:
        run.send_signal(signal.SIGKILL)  # as a dropped session's run, with no word said
        run.wait()
    jobs = engine.client.request("jobs")["jobs"]
    assert len(jobs) == 3 and len({j["group"] for j in jobs}) == 1
    group = jobs[0]["group"]

    attached = subprocess.Popen(
        [*GPUDESK, "run", str(profile), "--attach", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    gate.touch()
    out, err = attached.communicate(timeout=60)
    assert attached.returncode == 0, err
    assert f"run {group}, submitted " in err  # the progress goes to stderr with --json
    report = json.loads(out)
    assert report["group"] == group and report["succeeded"] and report["unsubmitted"] == 0
    assert sorted(j["id"] for j in report["jobs"]) == sorted(j["id"] for j in jobs)
    assert [j["metrics"] for j in report["jobs"]] == [{"acc": 0.5}] * 3  # read from their logs
    # the run's span: from its first submission, not from the attach
    assert report["started_at"] == min(j["submitted_at"] for j in jobs)
    # nothing was submitted again
    assert len(engine.client.request("jobs")["jobs"]) == 3

    # its jobs all ended: a second attach reports at once, with the run's own span
    again = gpudesk("run", str(profile), "--attach")
    assert again.returncode == 0, again.stderr
    assert "p: 3 succeeded in " in again.stdout


def test_attach_says_what_a_cut_short_submission_never_sent(
    engine: EngineHandle, tmp_path: Path
) -> None:
    profile = gated_profile(tmp_path, tmp_path / "open")
    (tmp_path / "open").touch()
    # one of the three, as a run cut short after its first job was sent would have left it
    group = f"p@x.1.{profile_tag(load_profile(profile))}"
    spec = JobSpec(name="long#1", command=("true",), workdir=str(tmp_path), group=group)
    engine.api.submit([spec])
    done = gpudesk("run", str(profile), "--attach")
    assert done.returncode == 1, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert "2 of the profile's 3 jobs were never submitted" in text
    assert "p: 1 succeeded in " in text


def test_attach_with_nothing_to_follow_is_one_paragraph(
    engine: EngineHandle, tmp_path: Path
) -> None:
    profile = gated_profile(tmp_path, tmp_path / "gate")
    nothing = gpudesk("run", str(profile), "--attach")
    assert nothing.returncode == 1 and "Traceback" not in nothing.stderr
    assert f"error: --attach: you have no run of {profile} to follow" in nothing.stderr
    assert engine.client.request("jobs")["jobs"] == []
    both = gpudesk("run", str(profile), "--attach", "--apply-station")
    assert both.returncode == 2 and "leave out --apply-station" in both.stderr
    selection = Path(__file__).resolve().parents[2] / "profiles" / "selection-costly.toml"
    # a profile whose runs start with pre-passes is followed as any (a detached run's are
    # queued with its jobs): none here either
    prepass = gpudesk("run", str(selection), "--attach")
    assert prepass.returncode == 1, prepass.stdout + prepass.stderr
    assert "error: --attach: you have no run of " in prepass.stderr, prepass.stderr
    assert engine.client.request("jobs")["jobs"] == []


def test_a_detached_run_is_submitted_at_once_and_attach_reports_it(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """`--detach` returns once the run is queued (as sbatch does), saying its jobs and how to
    follow it; the jobs run on the engine; `--attach` then reports that run, nothing submitted
    twice."""
    gate = tmp_path / "gate"
    profile = gated_profile(tmp_path, gate)
    done = gpudesk("run", str(profile), "--detach")
    assert done.returncode == 0, done.stderr
    jobs = engine.client.request("jobs")["jobs"]
    assert len(jobs) == 3 and not any(j["state"] == "succeeded" for j in jobs)  # gate shut
    group, ids = jobs[0]["group"], sorted(j["id"] for j in jobs)
    text = " ".join(done.stdout.split())
    assert f"submitted run {group}, 3 job(s): {ids[0]}-{ids[-1]}" in text, text
    for line in (
        f"its jobs: gpudesk queue --all --group {group}",
        f"wait for it: gpudesk wait --group {group}",
        f"cancel it: gpudesk cancel --group {group}",
        f"its report: gpudesk run {profile} --attach",
    ):
        assert line in text, text
    as_json = gpudesk("run", str(profile), "--detach", "--json")
    assert as_json.returncode == 0, as_json.stderr
    second = json.loads(as_json.stdout)
    assert second["profile"] == "p" and len(second["ids"]) == 3 and second["group"] != group

    waiting = gpudesk("wait", "--group", group, "--timeout", "0.3")  # the gate is shut
    assert waiting.returncode == 124, waiting.stdout + waiting.stderr
    gate.touch()
    waited = gpudesk("wait", "--group", group)  # every job of the run, and only those
    assert waited.returncode == 0, waited.stderr
    assert sorted(int(line.split()[1]) for line in waited.stdout.splitlines()) == ids
    attached = gpudesk("run", str(profile), "--attach", "--json")  # the newest: the second
    assert attached.returncode == 0, attached.stderr
    report = json.loads(attached.stdout)
    assert report["group"] == second["group"] and report["succeeded"]
    assert sorted(j["id"] for j in report["jobs"]) == second["ids"]
    assert len(engine.client.request("jobs")["jobs"]) == 6


def test_detach_with_what_it_cannot_go_with_is_one_paragraph(
    engine: EngineHandle, tmp_path: Path
) -> None:
    profile = gated_profile(tmp_path, tmp_path / "gate")
    # (a profile whose runs start with pre-passes is detached too: test_run_detach_prepass.py)
    for args, said in (
        ((str(profile), "--detach", "--attach"), "give one of them"),
        ((str(profile), "--detach", "--report", str(tmp_path / "r.txt")), "--attach --report"),
    ):
        refused = gpudesk("run", *args)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert said in refused.stderr and refused.stdout == "", refused.stdout
    assert engine.client.request("jobs")["jobs"] == []


def test_wait_for_a_run_takes_the_status_of_its_first_job_that_failed(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """`wait --group` waits for every job of the run, those ended before it too, and exits with
    the first one's status (in the order submitted) that did not succeed, as `wait ID...`."""
    specs = [
        JobSpec(name=f"j{k}", command=("sh", "-c", f"exit {code}"), group="r@1.1")
        for k, code in enumerate((0, 3, 5))
    ]
    ids = engine.api.submit_jobs(specs).ids
    engine.wait_all_done(list(ids))
    done = gpudesk("wait", "-q", "--group", "r@1.1")
    assert (done.returncode, done.stdout) == (3, ""), done.stderr
    for args, said in (
        (("wait",), "which jobs? name them, or give one run's with --group RUN"),
        (("wait", str(ids[0]), "--group", "r@1.1"), "(not both)"),
        (("wait", "--group", "r@9.9"), "no job is in the run 'r@9.9'"),
    ):
        refused = gpudesk(*args)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr


def test_attach_follows_only_a_run_of_its_own_file(engine: EngineHandle, tmp_path: Path) -> None:
    """Two files that say the same `name =`: attaching with the second never follows (and
    reports as its own) the run of the first, which succeeded; it says it has none of its
    own. A run of the file itself is then followed, not the other's newer one."""
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    one.write_text('name = "sweep"\n[[jobs]]\nname = "a"\ncommand = ["true"]\n')
    two.write_text('name = "sweep"\n[[jobs]]\nname = "b"\ncommand = ["false"]\n')
    assert gpudesk("run", str(one)).returncode == 0
    other = gpudesk("run", str(two), "--attach")
    assert other.returncode == 1 and "Traceback" not in other.stderr
    said = " ".join(other.stderr.split())
    assert f"you have no run of {two} to follow" in said, said
    assert "sweep: 1 succeeded" not in other.stdout
    assert gpudesk("run", str(two)).returncode == 1  # b fails
    assert gpudesk("run", str(one)).returncode == 0  # the newer run is one.toml's
    followed = gpudesk("run", str(two), "--attach", "--json")
    assert followed.returncode == 1, followed.stderr
    report = json.loads(followed.stdout)
    assert [j["name"] for j in report["jobs"]] == ["b"]


def test_a_profile_read_from_a_pipe_runs_its_jobs_in_the_current_folder(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """`cat p.toml | gpudesk run /dev/stdin` ran its jobs in the profile's "folder", /dev,
    where a job's relative file cannot be written, and its --detach said to follow it with
    `gpudesk run /dev/stdin --attach`, which cannot read it again: they run in the current
    folder, as a bundled example's do, and no such line is said (an --attach from a pipe is
    refused, exit 2)."""
    here = tmp_path / "here"
    here.mkdir()
    text = 'name = "w"\n[[jobs]]\nname = "a"\ncommand = ["sh", "-c", "echo hi > out.txt"]\n'

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GPUDESK, "run", "/dev/stdin", *args],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=here,
        )

    followed = run()
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert (here / "out.txt").read_text() == "hi\n"
    (here / "out.txt").unlink()
    detached = run("--detach")
    assert detached.returncode == 0, detached.stderr
    assert "--attach  (follows" not in detached.stdout
    assert "its report:   none: the profile was read from a pipe" in detached.stdout
    jobs = engine.client.request("jobs", archived=True)["jobs"]
    assert {j["spec"]["workdir"] for j in jobs} == {str(here)}
    assert gpudesk("wait", "--group", jobs[-1]["group"]).returncode == 0
    assert (here / "out.txt").read_text() == "hi\n"
    attach = run("--attach")
    assert attach.returncode == 2 and "is a pipe or a device" in attach.stderr, attach.stderr


def test_a_bundled_examples_pre_pass_runs_in_the_current_folder_as_its_jobs_do(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """`gpudesk run selection` from any folder: its training jobs ran there, its pre-pass in
    the installed package's folder (site-packages, root's on a system install)."""
    run = subprocess.Popen(
        [*GPUDESK, "run", "selection"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        (prepass,) = wait_for(
            lambda: engine.client.request("jobs")["jobs"] or None, what="the pre-pass job"
        )
    finally:
        run.send_signal(signal.SIGINT)  # the run cancels its jobs as it leaves
        run.wait(60)
    assert prepass["spec"]["workdir"] == str(tmp_path), prepass


def test_wait_for_a_run_waits_too_for_the_jobs_it_gains_meanwhile(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A run still submitting when `wait --group` lists it (its later parts, a script adding to
    its group) is waited for to its last job, as `pueue wait --group` does."""
    gates = [tmp_path / f"gate{k}" for k in range(3)]

    def gated(k: int) -> JobSpec:
        script = f"while [ ! -e {gates[k]} ]; do sleep 0.02; done; exit {k}"
        return JobSpec(name=f"j{k}", command=("sh", "-c", script), group="r@2.2")

    (first, second) = engine.api.submit_jobs([gated(0), gated(1)]).ids
    waiting = subprocess.Popen(
        [*GPUDESK, "wait", "--group", "r@2.2"], stdout=subprocess.PIPE, text=True
    )
    try:
        gates[0].touch()
        assert waiting.stdout is not None
        said = [waiting.stdout.readline()]  # the first job's end: the run was listed before
        assert said[0].split()[1] == str(first), said
        (late,) = engine.api.submit_jobs([gated(2)]).ids
        gates[1].touch()  # the jobs it listed have all ended now; the late one has not
        gates[2].touch()
        out, _ = waiting.communicate(timeout=60)
    finally:
        for gate in gates:
            gate.touch()
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    said += out.splitlines()
    assert [int(line.split()[1]) for line in said] == [first, second, late], said
    assert waiting.returncode == 1  # the first that failed, in the order submitted: j1's exit 1
