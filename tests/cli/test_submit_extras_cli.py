"""`gpudesk submit`'s Slurm and pueue verbs as a user types them (issue 41, item 5): in --help,
in shell completion (job ids and names for the dependency options, begin forms for --begin),
and queue's --long on the fast path as with typer."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import EngineHandle
from test_completion import complete_in_bash

from gpudesk.cli.fast_path import plain_queue_options


def test_each_new_option_is_in_help() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "gpudesk", "submit", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=60,
    ).stdout
    for option in ("--begin", "--comment", "--label", "--array", "--after-any", "--after-notok"):
        assert option in shown, option
    assert "--notify" in shown and "GPUDESK_JOB_STATE" in shown
    queue = subprocess.run(
        [sys.executable, "-m", "gpudesk", "queue", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=60,
    ).stdout
    assert "--long" in queue and "comment" in queue


def test_the_dependency_options_complete_job_names_and_begin_its_forms(
    engine: EngineHandle,
) -> None:
    (job_id,) = engine.submit({"name": "alpha", "command": ["true"]})
    engine.wait_state(job_id, "succeeded")
    assert complete_in_bash("gpudesk submit --after-any al") == ["alpha"]
    assert complete_in_bash("gpudesk submit --after-notok al") == ["alpha"]
    assert complete_in_bash("gpudesk submit --begin now+") == ["now+10min", "now+1hour"]
    assert "--after-notok" in complete_in_bash("gpudesk submit --after-n")


def test_queue_long_is_read_the_same_on_the_fast_path() -> None:
    options = plain_queue_options(["--long", "--all"])
    assert options is not None and options.long and options.all_jobs
    short = plain_queue_options(["-l"])
    assert short is not None and short.long


def test_a_program_whose_name_cannot_name_a_job_is_said_as_the_programs(
    gpudesk, home: object
) -> None:
    """The job is named after its program where --name gives none: a program with an ESC in
    its file name was refused as `--name: a name cannot contain control characters`, an option
    the user never gave."""
    code, _, err = gpudesk("submit", "--", "/bin/ec\x1b[31mho", "hi")
    assert code == 2
    assert err.startswith(
        "error: the job would be named after its program, 'ec\\x1b[31mho', but a name cannot "
        "contain control characters"
    ), err
    assert err.rstrip().endswith("give it a name with --name") and "--name:" not in err


def test_an_empty_program_is_said_as_the_command_not_an_option(gpudesk, home: object) -> None:
    """submit's command follows `--`: an empty program was said as `--command: ...`, an
    option submit does not have (edit's)."""
    code, _, err = gpudesk("submit", "--name", "x", "--", "")
    assert (code, err) == (
        2,
        "error: the command (after --): the program (first argument) is empty\n",
    ), err
