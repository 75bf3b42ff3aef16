"""`gpudesk submit`'s work, step by step: the job's fields from its options, its time limit and
MLflow tracking, all checked into a `JobSpec` (each problem named by the option that caused it),
the jobs it runs `--after` named by id, the job submitted and reported.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudesk.cli.common import engine_client, fail, print_json
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.core.submit_options import option_of
from gpudesk.text import quoted

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.errors import EngineError
    from gpudesk.api.models import SubmitResult
    from gpudesk.cli.submit_extras import Extras
    from gpudesk.core.cluster import ClusterSpec
    from gpudesk.core.jobs import JobSpec


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            fail(f"--env takes NAME=VALUE, found {quoted(pair)}", EXIT_USAGE)
        env[key] = value
    return env


def job_fields(
    command: list[str],
    *,
    name: str | None,
    shell: bool,
    cwd: Path,
    env: list[str],
    gpus: int,
    mem: float | None,
    sm: float | None,
    dataset: str | None,
    selection: str | None,
    priority: int,
    max_attempts: int,
    cluster: ClusterSpec | None,
) -> dict[str, Any]:
    """The job's fields as `JobSpec.from_dict` takes them, from submit's options."""
    return {
        "name": name or _program_name(command[0]),
        "command": [" ".join(command)] if shell else command,
        "shell": shell,
        "workdir": str(cwd),
        "env": parse_env(env),
        "gpus": gpus,
        "memory_gb": mem,
        "sm_pct": sm,
        "dataset": dataset,
        "selection": selection,
        "priority": priority,
        "max_attempts": max_attempts,
        "cluster": cluster,
    }


def tell_selection(raw: dict[str, Any]) -> None:
    """A job sent to Slurm alone with a data selection (`--on slurm --dataset D --selection
    P`): told it (GPUDESK_SELECTION in its env) from the dataset the engine has registered, so
    that its loader's fallback reads the selection, as a profile's job on Slurm does
    (docs/slurm.md). A dataset the engine does not know: one paragraph, exit 2."""
    from gpudesk.api.submit import told_selection

    dataset, selection = raw.get("dataset"), raw.get("selection")
    if raw.get("cluster") is None or not dataset or selection in (None, "full"):
        return
    try:
        with engine_client() as client:
            told = told_selection(client, dataset, selection)
    except ValueError:  # not a preset: `checked_spec` says so, at its option
        return
    if told is None:
        fail(
            f"--selection on Slurm: the engine knows no dataset {quoted(dataset)} (a profile's "
            "[datasets] table registers one, when it runs or with `gpudesk loader register "
            "PROFILE`), and a job on Slurm, with no shared loader producer there, needs its "
            "factory to read the selection; register it, or run the profile. Nothing was "
            "submitted",
            EXIT_USAGE,
        )
    raw["env"] = {**raw["env"], **told}


def _program_name(program: str) -> str:
    """The job's name where --name gives none: its program's file name, unless that is all
    digits or reads as an array's task (`12_3`): a job reference of digits is read as an id,
    so the job could not be named by it."""
    from gpudesk.core.field_checks import check_name, reads_as_job_number
    from gpudesk.text import safe_text

    # a program whose file name is not UTF-8 runs as it is; its name only shows it
    name = safe_text(Path(program).name)
    if reads_as_job_number(name.strip()):
        fail(
            f"the job would be named after its program, {quoted(name)}, but a job's name cannot be "
            "all digits, nor read as an array's task (12_3): give it one with --name",
            EXIT_USAGE,
        )
    try:
        check_name(name)
    except ValueError as exc:  # a program with an ESC in it: said as the program's, not --name's
        fail(
            f"the job would be named after its program, {quoted(name)}, but {exc}: give it a "
            "name with --name",
            EXIT_USAGE,
        )
    return name


def add_limit_and_tracking(
    raw: dict[str, Any], time_limit: str | None, mlflow_uri: str | None, experiment: str | None
) -> None:
    """--time as seconds, and --mlflow-uri / --experiment as the job's tracking."""
    if time_limit is not None:
        from gpudesk.core.jobs import MAX_TIME_LIMIT_S
        from gpudesk.units import no_time_limit, parse_duration

        try:
            # `--time none` (or 0, UNLIMITED): no limit, over a config's [submit] time
            seconds = None if no_time_limit(time_limit) else parse_duration(time_limit)
        except ValueError as exc:
            fail(f"--time: {exc}", EXIT_USAGE)
        if seconds is not None and not 1 <= seconds <= MAX_TIME_LIMIT_S:
            fail(
                f"--time: a time limit is 1 s to 366 days; {time_limit} is "
                + ("more than 366 days" if seconds > MAX_TIME_LIMIT_S else f"{seconds:g} s"),
                EXIT_USAGE,
            )
        raw["time_limit_s"] = seconds
    if experiment is not None and mlflow_uri is None:
        fail("--experiment names an MLflow experiment: give --mlflow-uri too", EXIT_USAGE)
    if mlflow_uri is not None:
        from gpudesk.core.tracking_spec import resolve_mlflow_uri

        # a relative sqlite path means one here, as a relative --workdir does
        raw["tracking"] = {
            "mlflow_uri": resolve_mlflow_uri(mlflow_uri.strip(), str(Path.cwd())),
            "experiment": experiment,
        }


def add_preemption(
    raw: dict[str, Any], preemptible: bool, signal: str | None, grace: float | None
) -> None:
    """--preemptible, --preempt-signal and --preempt-grace; the last two only with the first
    (they would change nothing)."""
    if not preemptible and (signal is not None or grace is not None):
        fail("--preempt-signal and --preempt-grace apply to a --preemptible job", EXIT_USAGE)
    if preemptible:
        raw["preemptible"] = True
    if signal is not None:
        raw["preempt_signal"] = signal
    if grace is not None:
        raw["preempt_grace_s"] = grace


def check_gpu_hints(spec: JobSpec) -> None:
    """--mem and --sm say how a job uses its GPU: refused without --gpus (0 by default, as
    sbatch gives none unless asked; core.jobs.gpu_hints_without_gpus says why)."""
    from gpudesk.core.jobs import gpu_hints_without_gpus

    hinted = gpu_hints_without_gpus(spec)
    if hinted:
        given = " and ".join(option_of(key) for key in hinted)
        fail(
            f"{given} describe{'s' if ' and ' not in given else ''} the job's use of a GPU, "
            "but it asks for none (--gpus is 0 unless given), so it would run with no GPU: "
            "add --gpus N, or leave them out for a CPU job",
            EXIT_USAGE,
        )


def checked_spec(raw: dict[str, Any]) -> JobSpec:
    """The job's spec, told its selection where it goes to Slurm with one (`tell_selection`);
    a field it refuses is reported as the option that gave it."""
    from gpudesk.core.jobs import JobSpec, SpecError

    tell_selection(raw)
    try:
        spec = JobSpec.from_dict(raw)
    except SpecError as exc:
        if exc.key == "tracking":  # "mlflow_uri: …" or "experiment: …"
            field, _, message = exc.message.partition(": ")
            fail(f"--{field.replace('_', '-')}: {message}", EXIT_USAGE)
        # submit's command is what follows `--`, not an option (edit's is --command)
        where = "the command (after --)" if exc.key == "command" else option_of(exc.key)
        fail(f"{where}: {keys_as_options(exc.message)}", EXIT_USAGE)
    return spec


# Where an engine's refusal of an edit names a field: `fields.memory_gb` (a submit's job:
# gpudesk.api.errors.job_refusal)
_EDIT_FIELD = re.compile(r"fields\.(?P<field>[a-z_]+): (?P<rest>.*)", re.DOTALL)
_KEY = re.compile(r"`([a-z_]+)`")  # a field said as a key: gpudesk.core.jobs.as_key


def as_option(exc: EngineError) -> tuple[str, int] | None:
    """The engine's refusal of a field of the job `gpudesk submit` or `edit` sent (`jobs[0]
    ('x').priority: …`, `jobs[0].after: there is no job 999 …`, `fields.memory_gb: …`) said
    as the option that gave it (`--priority: …`), with its exit code (bad input: 2; a refusal
    of a valid request, such as a member's raised priority: 1); None where it names no field.
    Only for the CLI's options: a profile's jobs are its keys (`gpudesk run`)."""
    from gpudesk.api.errors import job_refusal

    refused = job_refusal(exc)
    if refused is not None and refused.field is not None:
        field, rest = refused.field, refused.rest
    else:
        match = _EDIT_FIELD.fullmatch(str(exc))
        if match is None:
            return None
        field, rest = match["field"], match["rest"]
    code = EXIT_USAGE if exc.code in ("invalid_args", "unknown_job") else EXIT_FAILED
    return f"{option_of(field)}: {keys_as_options(rest)}", code


def keys_as_options(text: str) -> str:
    """`text` (a refusal's words) with each JobSpec field it names as a key (`after_notok`:
    gpudesk.core.jobs.as_key) said as the option that gives it (--after-notok)."""
    from gpudesk.core.jobs import JobSpec

    fields = set(JobSpec.__struct_fields__)
    return _KEY.sub(lambda key: option_of(key[1]) if key[1] in fields else key[0], text)


def after_refs(after: list[str]) -> list[str]:
    """--after's jobs, ids or names, from its comma-separated or repeated values."""
    from gpudesk.cli.submit_extras import job_refs

    return job_refs(after, "--after")


def submit_and_report(
    raw: dict[str, Any],
    spec: JobSpec,
    refs: list[str],
    *,
    to_cluster: bool,
    json_out: bool,
    parsable: bool = False,
    hold: bool = False,
    extras: Extras | None = None,
) -> None:
    """Submit the job, or its array's jobs (their --after names made ids first), and say what
    became of it: a line, its JSON, or (`parsable`) its id alone (an array's first)."""
    from gpudesk.api.submit import change_lines
    from gpudesk.cli.submit_extras import Extras, array_line, job_ids, specs_of
    from gpudesk.policy import job_gates

    extras = extras or Extras()
    with engine_client() as client:
        if refs:  # names become ids here: the job waits for those jobs, not later namesakes
            raw = {**raw, "after": job_ids(client, refs, first=extras.first_tasks)}
        specs = specs_of(raw, extras, client)
        spec = specs[0]
        # what the engine would refuse of these options (--on slurm --array): said as them
        problem = job_gates.submit_problem(0, spec, named=option_of)
        if problem:
            fail(problem, EXIT_USAGE)
        submitted = _queued(client, specs, hold, extras)
        job_id = submitted.ids[0]
        # a Slurm job: say the id Slurm gave it, as sbatch would, and if the engine could
        # not save it yet (a full disk: it is in Slurm all the same)
        shown = client.show(job_id).job if to_cluster else None
        slurm = shown.slurm if shown is not None and not json_out else None
        # after a job that already failed (--after) or was cancelled: the engine takes it
        # and cancels it in the same turn, as Slurm's kill_invalid_depend; said, not "held"
        dead = _cancelled_at_once(client, job_id) if spec.dependencies else None
    change = submitted.waits_for_change.get(job_id)
    if dead is not None:
        hold = False
        print(f"note: job {job_id} was cancelled at once: {dead}", file=sys.stderr)
    if parsable:
        print(job_id)
        if submitted.simulated:
            print(f"note: the station is SIMULATED ({submitted.simulated})", file=sys.stderr)
        for line in change_lines(submitted.waits_for_change):
            print(f"note: {line}", file=sys.stderr)
    elif json_out:
        print_json(
            {
                "id": job_id,
                "name": spec.name,
                "simulated": submitted.simulated,
                "waits_for_change": change,
                "held": hold,
                "state": "cancelled" if dead is not None else "queued",
                **({"ids": submitted.ids} if extras.array else {}),
            }
        )
    else:
        where = f" as Slurm job {slurm.job_id} on {slurm.cluster}" if slurm else ""
        if submitted.simulated and slurm is None:
            where = f" on a SIMULATED station ({submitted.simulated}: its GPUs are not real)"
        what = array_line(submitted.ids, extras.array) if extras.array else f"job {job_id}"
        print(f"submitted {what} ({spec.name}){where}")
        if hold:
            print(f"held: {_release_hint(submitted.ids if extras.array else [job_id])}")
        # queued, but no GPU will drain for it: say so now, not at the next `queue`
        for line in change_lines(submitted.waits_for_change):
            print(f"note: {line}", file=sys.stderr)
    if shown is not None and shown.unsaved:
        print(f"note: sent to Slurm, {shown.unsaved}", file=sys.stderr)


def _queued(client: Client, specs: list[JobSpec], hold: bool, extras: Extras) -> SubmitResult:
    """The engine's answer to the submission, a refusal of an option's value said as that
    option's; what it queued kept for the line of a write of the output that fails (a full
    disk: cli/std_streams.py), since the jobs are queued whatever becomes of this command."""
    from gpudesk.api.errors import EngineError
    from gpudesk.cli.std_streams import already_done

    try:
        alone = extras.first_tasks.alone
        submitted = client.submit_jobs(specs, hold=hold, first_tasks_alone=alone)
    except EngineError as exc:
        said = as_option(exc)  # --after 999: no such job; --priority 5 by a member
        if said:
            fail(*said)
        raise
    ids = submitted.ids
    what = f"array job {ids[0]} ({len(ids):,} tasks)" if extras.array else f"job {ids[0]}"
    already_done(f"{what} was queued all the same: gpudesk queue lists it")
    return submitted


def _cancelled_at_once(client: Client, job_id: int) -> str | None:
    """Why the job just submitted is already cancelled (a job it runs after has ended as it
    must not), or None."""
    job = client.show(job_id).job
    if job.state != "cancelled":
        return None
    return job.reason or "a job it runs after has ended as it must not"


def check_workdir_usable(cwd: Path) -> None:
    """--workdir (or the current folder) as the job will find it, checked by your own process
    before anything is submitted: missing, or not a folder, is one paragraph, exit 2 (the
    runner checks again when the job starts)."""
    from gpudesk.core.jobs import workdir_problem

    unusable = workdir_problem(str(cwd))
    if unusable is not None:
        fail(f"--workdir: {unusable}", EXIT_USAGE)


def _release_hint(ids: list[int]) -> str:
    """How to let held jobs start: release the job, or the array by its id (its first job's),
    which names every task of it (docs/jobs.md)."""
    return f"`gpudesk release {ids[0]}` lets {'it' if len(ids) == 1 else 'them'} start"
