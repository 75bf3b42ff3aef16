"""`gpudesk edit JOB` against a real engine: submit's option names, what changed in one line,
and one `error:` paragraph with a non-zero exit for bad input, a started job or an unknown one."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import EngineHandle, Run
from test_completion import complete_in_bash

from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE


def one_error(code: int, err: str, expected_code: int, *phrases: str) -> None:
    assert code == expected_code, err
    message = err.strip()
    assert message.startswith("error: ") and "\n" not in message, message
    assert "Traceback" not in err
    for phrase in phrases:
        assert phrase in message, message


def test_edit_changes_a_queued_job_with_submits_options(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    engine.occupy_the_only_slot(tmp_path / "gate")
    first, job = engine.submit(
        {"name": "prep", "command": ["true"]},
        {"name": "train", "command": ["true"], "after": []},
    )
    code, out, err = gpudesk(
        "edit",
        str(job),
        "--name",
        "train-2",
        "--command",
        "python train.py --lr '3e-4'",
        "--time",
        "1:30:00",
        "-e",
        "SEED=7",
        "--after",
        "prep",
        "--workdir",
        str(tmp_path),
    )
    assert code == 0, err
    assert out == (
        f"edited job {job} (train-2): name train -> train-2; "
        f"command true -> python train.py --lr 3e-4; workdir {engine.home.root} -> {tmp_path}; "
        f"time none -> 01:30:00; after none -> {first}; env SEED=…\n"
    )
    spec = engine.job(job).spec
    assert spec.command == ["python", "train.py", "--lr", "3e-4"]
    assert (spec.after, spec.time_limit_s) == ([first], 5400)
    # and lifted again, said as --time takes it
    code, out, err = gpudesk("edit", str(job), "--time", "none")
    assert (code, out) == (0, f"edited job {job} (train-2): time 01:30:00 -> none\n"), err
    assert engine.job(job).spec.time_limit_s is None
    code, out, _ = gpudesk("edit", "train-2", "--no-deps", "--json")
    assert code == 0 and json.loads(out) == {
        "id": job,
        "name": "train-2",
        "changes": [f"after {first} -> none"],
    }
    code, out, err = gpudesk("edit", str(job), "--name", "train-2")
    assert (code, out) == (0, "") and "nothing to change" in err
    assert "edited by user: name train -> train-2" in gpudesk("show", str(job))[1]


def test_edit_changes_after_any_and_after_notok_with_the_cycle_check(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    engine.occupy_the_only_slot(tmp_path / "gate")
    prep, train = engine.submit(
        {"name": "prep", "command": ["true"]}, {"name": "train", "command": ["true"]}
    )
    code, out, err = gpudesk("edit", "train", "--after-any", "prep", "--after-notok", str(prep))
    assert code == 0, err
    assert out == (
        f"edited job {train} (train): after-any none -> {prep}; after-notok none -> {prep}\n"
    )
    spec = engine.job(train).spec
    assert (spec.after, spec.after_any, spec.after_notok) == ([], [prep], [prep])
    # prep after train, of any kind, would have them wait for each other
    for option in ("--after", "--after-any", "--after-notok"):
        one_error(
            *gpudesk("edit", "prep", option, "train")[::2],
            EXIT_USAGE,
            f"{option}: the jobs would wait for each other for ever: job {prep} runs after "
            f"job {train} runs after job {prep}",
        )
    assert engine.job(prep).spec.after_notok == []
    # train runs after prep only if prep does not succeed: --after prep too could never be met
    # (the job named by both can do only one; Slurm's DependencyNeverSatisfied)
    one_error(
        *gpudesk("edit", "train", "--after", "prep")[::2],
        EXIT_USAGE,
        f"--after: --after and --after-notok both name job {prep}: ",
        "so this job could never start",
    )
    assert engine.job(train).spec.after == []
    code, out, _ = gpudesk("edit", "train", "--no-deps", "--json")
    assert code == 0 and json.loads(out)["changes"] == [
        f"after-any {prep} -> none",
        f"after-notok {prep} -> none",
    ]
    one_error(*gpudesk("edit", "train", "--after-any", "1", "--no-deps")[::2], EXIT_USAGE, "one")


def test_edit_refuses_bad_values_a_running_job_and_an_unknown_one(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    blocker = engine.occupy_the_only_slot(tmp_path / "gate")
    (job,) = engine.submit({"name": "queued", "command": ["true"]})
    one_error(*gpudesk("edit", str(job), "--mem", "-3")[::2], EXIT_USAGE, "--mem: ")
    # a hint of GPU use for a job with no GPU: refused, as submit refuses it
    for option in ("--mem", "--sm"):
        said = f"{option}: it describes the job's use of a GPU, but the job asks for none"
        one_error(*gpudesk("edit", str(job), option, "8")[::2], EXIT_USAGE, said)
    one_error(*gpudesk("edit", str(job), "--time", "soon")[::2], EXIT_USAGE, "--time: ")
    one_error(*gpudesk("edit", str(job), "--max-attempts", "0")[::2], EXIT_USAGE, "--max-attempts")
    one_error(*gpudesk("edit", str(job), "-e", "NOEQUALS")[::2], EXIT_USAGE, "--env")
    one_error(*gpudesk("edit", str(job), "--unset-env", "NOPE")[::2], EXIT_USAGE, "--unset-env")
    one_error(*gpudesk("edit", str(job), "--command", "'unclosed")[::2], EXIT_USAGE, "--command")
    one_error(*gpudesk("edit", str(job))[::2], EXIT_USAGE, "nothing to change")
    one_error(*gpudesk("edit", str(job), "--after", "1", "--no-deps")[::2], EXIT_USAGE, "give one")
    missing = tmp_path / "missing"
    one_error(*gpudesk("edit", str(job), "-C", str(missing))[::2], EXIT_USAGE, "not a directory")
    # a job to run after that does not exist: bad input, said as the option that named it
    for option, ref, said in (
        ("--after", "999", "--after: there is no job 999 to run after"),
        ("--after-any", "998", "--after-any: there is no job 998 to run after"),
        ("--after", "nosuchjob", "--after: there is no job named 'nosuchjob' to run after"),
    ):
        one_error(*gpudesk("edit", str(job), option, ref)[::2], EXIT_USAGE, said)
    assert engine.job(job).spec.after == []
    one_error(
        *gpudesk("edit", str(blocker), "--name", "x")[::2],
        EXIT_FAILED,
        f"job {blocker} (blocker) is running",
    )
    one_error(*gpudesk("edit", "no-such-job", "--name", "x")[::2], EXIT_FAILED, "no-such-job")
    assert engine.job(job).name == "queued"


def test_edit_completes_job_ids_names_and_its_options(engine: EngineHandle) -> None:
    (job,) = engine.submit({"name": "alpha", "command": ["true"]})
    engine.wait_state(job, "succeeded")
    assert complete_in_bash("gpudesk edit al") == ["alpha"]
    assert complete_in_bash("gpudesk edit alpha --after al") == ["alpha"]
    assert "--unset-env" in complete_in_bash("gpudesk edit alpha --un")
