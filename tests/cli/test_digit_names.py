"""A job's name that is all digits: a job reference of digits is read as an id, so such a job
could not be named by it. Refused at submit, edit and profile load (one `error:` line, exit 2),
against a real engine; a job stored with one before still shows and is acted on by its id."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import EngineHandle, Run
from store_fill import fill_jobs
from test_edit_cli import one_error

from gpudesk.cli.exit_codes import EXIT_USAGE

ALL_DIGITS = "a job's name cannot be all digits"


def test_an_all_digit_name_is_refused_at_submit_edit_and_profile_load(
    engine: EngineHandle, gpudesk: Run, tmp_path: Path
) -> None:
    one_error(
        *gpudesk("submit", "--name", "123", "--", "true")[::2],
        EXIT_USAGE,
        f"--name: {ALL_DIGITS} (found '123')",
        "put a letter in it",
    )
    # no --name: the program's file name would be the job's
    program = tmp_path / "42"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    one_error(
        *gpudesk("submit", "--", str(program))[::2],
        EXIT_USAGE,
        "named after its program, '42'",
        "give it one with --name",
    )
    assert engine.api.jobs(states=["queued", "running"]) == []
    code, _, err = gpudesk("submit", "--hold", "--name", "job-42", "--", str(program))
    assert code == 0, err
    (job,) = [j.id for j in engine.api.jobs(states=["queued"])]
    one_error(
        *gpudesk("edit", str(job), "--name", "0042")[::2], EXIT_USAGE, f"--name: {ALL_DIGITS}"
    )
    assert engine.job(job).name == "job-42"
    # a profile: its file, line and key; a sweep's name made all digits by its grid too, while
    # one that only starts with digits ("2024[seed=1]") is a name
    profile = tmp_path / "digits.toml"
    profile.write_text(
        '[[jobs]]\nname = "7"\ncommand = ["true"]\n\n'
        '[[sweeps]]\nname = "{seed}"\ncommand = ["true"]\ngrid.seed = [1, 2]\n\n'
        '[[sweeps]]\nname = "2024"\ncommand = ["echo", "{seed}"]\ngrid.seed = [1, 2]\n'
    )
    code, _, err = gpudesk("run", str(profile))
    assert code == EXIT_USAGE, err
    assert f"digits.toml:2: jobs[0].name: {ALL_DIGITS} (found '7')" in err
    assert f"digits.toml:6: sweeps[0].name: with seed=1: {ALL_DIGITS} (found '1')" in err
    assert "sweeps[1]" not in err and "Traceback" not in err
    assert [j.id for j in engine.api.jobs(states=["queued", "running"])] == [job]


def test_a_job_stored_with_an_all_digit_name_still_shows_and_is_acted_on_by_id(
    engine: EngineHandle, gpudesk: Run
) -> None:
    engine.stop()  # a job from before the rule, as the store has it
    (job,) = fill_jobs(engine.home.db, queued=1, held=True, name="123")
    engine.start()
    code, out, err = gpudesk("show", str(job), "--json")
    assert code == 0, err
    assert json.loads(out)["job"]["name"] == "123"
    assert "123" in gpudesk("queue")[1]
    # its other fields are edited; the name it has is kept, not refused
    code, out, err = gpudesk("edit", str(job), "--time", "10")
    assert (code, out) == (0, f"edited job {job} (123): time none -> 00:10:00\n"), err
    code, out, err = gpudesk("cancel", str(job))
    assert (code, out) == (0, f"job {job} (123): cancelled\n"), err
