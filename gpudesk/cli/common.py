"""What every command module shares: exit codes, the error a command fails with, JSON output,
the home and the engine client, and the help reflow.

Only the standard library at module level: every `gpudesk` command, `--help` included, imports
this module, and `gpudesk queue`'s fast path (gpudesk.cli.fast_path) runs without typer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.text import json_text, quoted

if TYPE_CHECKING:
    import typer

    from gpudesk.api.client import Client
    from gpudesk.api.models import ActionOutcome
    from gpudesk.core.cluster import ClusterSpec
    from gpudesk.paths import Home


class CliError(Exception):
    """A command's failure: `main` prints `error: MESSAGE` (no traceback) and exits `code`.
    `ctx`: the click context of the command that raised it (None outside one), where main
    finds whether the option a message starts with (`--time: …`) came from a config file."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
        self.ctx = _running_command()


def _running_command() -> Any:
    """The click context of the command running now, or None: outside one, or without typer
    (the queue's fast path). Found through the click typer uses (its own copy, from 0.2x)."""
    import sys

    typer_module = sys.modules.get("typer")
    if typer_module is None:
        return None
    click_package = typer_module.BadParameter.__module__.rpartition(".")[0]
    click_globals = sys.modules.get(f"{click_package}.globals")
    return None if click_globals is None else click_globals.get_current_context(silent=True)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    raise CliError(message, code)


def consecutive(ids: Sequence[int]) -> bool:
    """Whether `ids` (increasing, as an engine hands a submission's out) run on without a gap,
    so `FIRST-LAST` names them all: another client's submission can come between."""
    return bool(ids) and ids[-1] - ids[0] + 1 == len(ids)


def simulated_banner(backend: str, width: int | None = None) -> str:
    """The line a listing or report of a SIMULATED station starts with (`sim:MODEL`); folded
    into `width` columns where one is given (SIMULATED stays first), whole for a pipe."""
    from gpudesk import render

    return render.fold(f"SIMULATED station ({backend}): its GPUs are not real", width)


def print_json(data: Any) -> None:
    """A command's `--json` output: JSON a strict reader accepts (`gpudesk.text.json_text`)."""
    print(json_text(data, indent=2))


def complete_signal(incomplete: str) -> list[str]:
    """`cancel --signal`'s signals (gpudesk.core.job_signals.JOB_SIGNALS), without SIG, for shell
    completion."""
    from gpudesk.core.job_signals import JOB_SIGNALS

    names = [name.removeprefix("SIG") for name in JOB_SIGNALS]
    return [name for name in names if name.startswith(incomplete.upper().removeprefix("SIG"))]


def report_outcomes(
    results: list[ActionOutcome], json_out: bool, unknown: Sequence[str] = ()
) -> None:
    """Print what a job-control request did to each job, and which refs named no job (those
    named acted on all the same, as scancel does: gpudesk.cli.job_refs), one line each on
    stderr (`unknown` in the JSON); exits 1 if the engine refused any job, or one was
    unknown."""
    import sys

    from gpudesk.api.models import to_builtins
    from gpudesk.text import printable_line

    if json_out:
        print_json({"results": to_builtins(results), "unknown": list(unknown)})
    else:
        for r in results:
            print(f"job {r.id} ({printable_line(r.name)}): {r.outcome}")
    from gpudesk.core.field_checks import array_task_ref, reads_as_job_id

    for ref in unknown:  # as the engine says it: an id by its number, a name quoted
        what = f"id {ref}" if reads_as_job_id(ref) else f"id or name {quoted(ref)}"
        said = f"no job {ref}" if array_task_ref(ref) else f"no job with {what}"  # 144_9
        print(f"error: {said}", file=sys.stderr)
    if unknown or any(not r.ok for r in results):
        raise SystemExit(EXIT_FAILED)


def current_home() -> Home:
    from gpudesk.paths import Home

    return Home.from_env()


def engine_client(*, autostart: bool = True, timeout: float | None = None) -> Client:
    """A client of this home's engine, started if none runs (unless not `autostart`)."""
    from gpudesk.api.client import Client

    return Client.connect(current_home(), autostart=autostart, timeout=timeout)


# How a command's job arguments read (docs/jobs.md), in each command's --help
JOB_REFS_HELP = (
    "Job ids or names (a name: your newest job of it, else anyone's); an array's id names "
    "every task of the array, ID_TASK (144_2) one task, "
    "ID_[INDEXES] (144_[0-3,7]) those tasks, as in Slurm."
)
ONE_JOB_HELP = (
    "Job id, array task (ID_TASK: 144_2), or name (your newest job of that name, else anyone's "
    "newest); an array's id is its first task here."
)

COMPLETION_TIMEOUT_S = 0.5  # a shell waits on this at each Tab: an engine that is slow is none


def complete_job(incomplete: str) -> list[tuple[str, str]]:
    """Job ids and names that start with `incomplete`, for shell completion, newest first, each
    with its state. Asked of a running engine only: completion never starts one, and with none
    running (or one too slow to answer) it offers nothing and returns at once."""
    try:
        from gpudesk.api.client import Client
        from gpudesk.api.connection import engine_pid

        home = current_home()
        if not home.is_system and engine_pid(home) is None:
            return []
        with Client.connect(home, autostart=False, timeout=COMPLETION_TIMEOUT_S) as client:
            jobs = client.jobs(limit=200)  # one page: a Tab press waits on it
    except Exception:  # whatever went wrong, a Tab press must not print a traceback
        return []
    found: dict[str, str] = {}
    for job in reversed(jobs):
        for word in (str(job.id), job.name):
            if word.startswith(incomplete) and word not in found:
                found[word] = f"{job.name} ({job.state})" if word != job.name else job.state
    return list(found.items())


def say_damaged(damaged: Any) -> None:
    """One line on stderr for the job rows the engine skipped because its store cannot read
    them (`JobList.damaged`): the listing goes on without them, but never silently."""
    import sys

    if damaged:
        shown = "; ".join(f"job {d.id}: {d.reason}" for d in damaged[:3])
        others = f" (and {len(damaged) - 3} more)" if len(damaged) > 3 else ""
        print(
            f"warning: {len(damaged)} job record(s) in the engine's store cannot be read and "
            f"are left out: {shown}{others}; the engine's log names them",
            file=sys.stderr,
        )


def print_model(model: Any) -> None:
    """A reply's model (or a list of them) as `--json`: the JSON the engine sent."""
    from gpudesk.api.models import to_builtins

    print_json(to_builtins(model))


def factory_kwargs(pairs: list[str]) -> dict[str, Any]:
    """key=value pairs for a dataset factory (--arg); values are JSON where they parse as JSON."""
    import typer

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise typer.BadParameter(f"{quoted(pair)}: expected key=value", param_hint="--arg")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
        except RecursionError:  # `[[[[…` nested past the stack: neither JSON nor meant as text
            raise typer.BadParameter(
                f"{quoted(key)}: its JSON value is nested too deeply to read", param_hint="--arg"
            ) from None
    return out


def reflow_help(group: typer.Typer) -> None:
    """Command help from docstrings, each paragraph one line: typer keeps a docstring's line
    breaks, which wrap raggedly at the terminal's width."""
    import inspect

    for command in group.registered_commands:
        doc = inspect.getdoc(command.callback) if command.callback else None
        if command.help is None and doc:
            command.help = "\n\n".join(" ".join(p.split()) for p in doc.split("\n\n"))
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            reflow_help(sub.typer_instance)


def owner_filter(user: str | None, me: bool) -> str | int | None:
    """Whose jobs `--user NAME` / `--me` ask for (a name, this uid, or everyone's: None)."""
    import os

    if me and user is not None:
        fail("--user and --me name two owners; give one of them", EXIT_USAGE)
    return os.getuid() if me else user


def target_cluster(
    on: str | None,
    profile_cluster: ClusterSpec | None,
    *,
    partition: str | None = None,
    account: str | None = None,
    qos: str | None = None,
) -> ClusterSpec | None:
    """Where `--on` (and a profile's [cluster]) send jobs: None for the station, else the
    Slurm cluster with --partition/--account/--qos laid over the profile's. A bad value is a
    usage error (exit 2)."""
    if on not in (None, "station", "slurm"):
        fail(f"--on: expected station or slurm, found {quoted(on)}", EXIT_USAGE)
    given = {"partition": partition, "account": account, "qos": qos}
    if on == "station" or (on is None and profile_cluster is None):
        named = [f"--{k}" for k, v in given.items() if v is not None]
        if named:
            what = "names a Slurm setting" if len(named) == 1 else "name Slurm settings"
            fail(f"{', '.join(named)} {what}: add --on slurm", EXIT_USAGE)
        return None
    return cluster_with_options(profile_cluster, given)


def cluster_with_options(
    profile_cluster: ClusterSpec | None, overrides: dict[str, str | None]
) -> ClusterSpec:
    """The profile's [cluster] (ClusterSpec() without one), the command line's options over it
    (`overrides`: [cluster] keys; None: not given). A bad option is a usage error naming it."""
    from gpudesk.core.cluster import ClusterSpec, check_cluster

    values: dict[str, Any] = profile_cluster.to_dict() if profile_cluster else {}
    for key, value in overrides.items():
        if value is None:
            continue
        try:
            check_cluster({key: value})
        except ValueError as exc:
            option = "--" + key.replace("_", "-")
            fail(f"{option}: {str(exc).removeprefix(f'{key}: ')}", EXIT_USAGE)
        values[key] = value
    try:
        return check_cluster(values) if values else ClusterSpec()
    except ValueError as exc:  # the profile's own table was checked when it was read
        fail(f"the cluster is not valid: {exc}", EXIT_USAGE)
