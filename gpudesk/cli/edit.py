"""`gpudesk edit JOB`: change a job that has not started (pueue's `edit` and `env set`, Slurm's
`scontrol update` of a pending job), with submit's option names and checks. The engine checks
the new spec as it checks a new submission's, and changes it only while the job is queued."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpudesk.cli import submit_extras
from gpudesk.cli.common import ONE_JOB_HELP, complete_job, fail, print_json
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.cli.no_engine import acting_client
from gpudesk.cli.std_streams import already_done
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from gpudesk.api.client import Client

edit_app = typer.Typer()

_COMMAND = typer.Option(
    None,
    "--command",
    metavar="CMD",
    help="The new command line, split into words as a shell would (quotes kept together); "
    "with --shell, run by /bin/sh as one string.",
)


_TIME = typer.Option(
    None,
    "--time",
    "-t",
    metavar="TIME",
    help="The new wall-clock limit, as submit --time takes it (90 is 90 minutes; 1:30:00; 2h; "
    "none for no limit).",
)
_AFTER = typer.Option(
    [],
    "--after",
    metavar="JOB",
    autocompletion=complete_job,
    help="Start only once these jobs have succeeded (ids or names, comma-separated or "
    "repeated; an array's id: every task of it, 144_2: one task): they replace the jobs it "
    "ran after.",
)
_NO_DEPS = typer.Option(
    False,
    "--no-deps",
    help="Run after no job: drop the jobs it waited for (--after, --after-any, --after-notok).",
)


@edit_app.command()
def edit(
    job: str = typer.Argument(..., help=ONE_JOB_HELP, autocompletion=complete_job),
    command: str | None = _COMMAND,
    shell: bool | None = typer.Option(
        None, "--shell/--no-shell", help="Run the command with /bin/sh (or not)."
    ),
    name: str | None = typer.Option(None, "--name", "-n", help="The job's new name."),
    env: list[str] = typer.Option(
        [], "--env", "-e", metavar="NAME=VALUE", help="Set a variable (repeatable)."
    ),
    unset_env: list[str] = typer.Option(
        [], "--unset-env", metavar="NAME", help="Remove a variable (repeatable)."
    ),
    workdir: Path | None = typer.Option(
        None, "--workdir", "-C", metavar="DIR", help="The new working directory."
    ),
    time_limit: str | None = _TIME,
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs the job needs."),
    mem: float | None = typer.Option(None, "--mem", help="GPU memory the job needs, in GiB."),
    sm: float | None = typer.Option(
        None,
        "--sm",
        help="Share of a GPU's SMs the job keeps busy on average over its run, % (a hint).",
    ),
    max_attempts: int | None = typer.Option(
        None, "--max-attempts", help="Retry a failed job up to this many attempts in all."
    ),
    after: list[str] = _AFTER,
    after_any: list[str] = submit_extras.AFTER_ANY,
    after_notok: list[str] = submit_extras.AFTER_NOTOK,
    no_deps: bool = _NO_DEPS,
    json_out: bool = typer.Option(False, "--json", help="Print what changed as JSON."),
    begin: str | None = submit_extras.BEGIN,
    comment: str | None = submit_extras.COMMENT,
) -> None:
    """Change a job that has not started (queued, held, or waiting for the jobs it runs after).

    The options are submit's; what you leave out stays. The engine checks the result as a new
    submission, and edits the job only if it has not started meanwhile; it keeps its id and
    its place in the queue, and `gpudesk show JOB` lists the edit among its events. Only
    the job's owner or an admin may edit it; a Slurm job is changed with `scontrol update`.
    Each of --after, --after-any and --after-notok replaces the jobs of its kind, checked as
    at submit (the jobs exist, none would wait for this one)."""
    from gpudesk.cli import submit_job

    if (after or after_any or after_notok) and no_deps:
        fail(
            "--after, --after-any and --after-notok name the jobs to run after and --no-deps "
            "drops them all: give one or the other",
            EXIT_USAGE,
        )
    fields = _fields(command, shell, name, workdir, time_limit, gpus, mem, sm, max_attempts)
    if no_deps:
        fields.update(after=[], after_any=[], after_notok=[])
    # --begin, --comment, and the other kinds of dependency
    extras = submit_extras.apply(fields, begin, comment, None, after_any, after_notok)
    if after:
        extras.after["after"] = submit_job.after_refs(after)
    set_env = submit_job.parse_env(env)
    if not fields and not set_env and not unset_env and not extras.after:
        fail("nothing to change: give the options to change (gpudesk edit --help)", EXIT_USAGE)
    with acting_client([job]) as client:
        for key, refs in extras.after.items():
            fields[key] = submit_extras.job_ids(client, refs, key, extras.first_tasks)
        alone = extras.first_tasks.alone
        result = _edited(client, job, fields, set_env, unset_env, alone)
    if result.changes:
        already_done(f"job {result.id} was edited all the same: gpudesk show {result.id} shows it")
    if json_out:
        print_json({"id": result.id, "name": result.name, "changes": result.changes})
    elif result.changes:
        name = printable_line(result.name)
        print(f"edited job {result.id} ({name}): {'; '.join(result.changes)}")
    else:
        name = printable_line(result.name)
        print(f"job {result.id} ({name}): nothing to change", file=sys.stderr)


def _fields(
    command: str | None,
    shell: bool | None,
    name: str | None,
    workdir: Path | None,
    time_limit: str | None,
    gpus: int | None,
    mem: float | None,
    sm: float | None,
    max_attempts: int | None,
) -> dict[str, Any]:
    """The spec's fields the options change, as the engine's `edit` takes them."""
    from gpudesk.cli import submit_job

    fields: dict[str, Any] = {}
    if command is not None:
        fields["command"] = _command_words(command, shell)
    if shell is not None:
        fields["shell"] = shell
    if workdir is not None:
        cwd = workdir.expanduser().absolute()
        if not cwd.is_dir():
            fail(f"--workdir: {cwd} is not a directory", EXIT_USAGE)
        fields["workdir"] = str(cwd)
    given = {"name": name, "gpus": gpus, "memory_gb": mem, "sm_pct": sm}
    given["max_attempts"] = max_attempts
    fields.update({key: value for key, value in given.items() if value is not None})
    submit_job.add_limit_and_tracking(fields, time_limit, None, None)
    return fields


def _command_words(command: str, shell: bool | None) -> list[str]:
    """--command as the job's words: one string for the shell, else split as a shell does."""
    import shlex

    if shell:
        return [command]
    try:
        words = shlex.split(command)
    except ValueError as exc:  # an unclosed quote
        fail(f"--command: {exc}", EXIT_USAGE)
    if not words:
        fail("--command: the command is empty", EXIT_USAGE)
    return words


def _edited(
    client: Client,
    job: str,
    fields: dict[str, Any],
    set_env: dict[str, str],
    unset: list[str],
    first_tasks_alone: list[int],
) -> Any:
    """The engine's edit; a field it refuses is reported as the option that gave it.
    `first_tasks_alone`: the dependencies' ids that name an array's first job alone."""
    from gpudesk.api.errors import EngineError

    try:
        return client.edit_job(
            job, fields, set_env=set_env, unset_env=unset, first_tasks_alone=first_tasks_alone
        )
    except EngineError as exc:
        from gpudesk.cli.submit_job import as_option

        said = as_option(exc)  # `fields.memory_gb: ...` as `--mem: ...`; --after 999
        if said:
            fail(*said)
        option = {"set_env": "--env", "unset_env": "--unset-env"}
        where, sep, rest = str(exc).partition(": ")
        if exc.code == "invalid_args" and sep and where in option:
            fail(f"{option[where]}: {rest}", EXIT_USAGE)
        raise
