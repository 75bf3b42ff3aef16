"""`gpudesk submit`'s options from pueue's and Slurm's everyday verbs (issue 41, item 5):
`--begin` (sbatch --begin, pueue --delay), `--comment`/`--label` (sbatch --comment, pueue's
labels), `--array 0-9%2` (sbatch --array with its throttle), `--after-any` and
`--after-notok` (Slurm's afterany and afternotok). Parsed here into the job's fields
(gpudesk.core.submit_options checks them); an array becomes one request of jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import typer

from gpudesk.cli.common import complete_job, consecutive, fail
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.text import quoted

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.core.jobs import JobSpec
    from gpudesk.core.submit_options import ArrayRange


def _complete_begin(incomplete: str) -> list[str]:
    return [
        w for w in ("now+10min", "now+1hour", "tomorrow", "midnight") if w.startswith(incomplete)
    ]


BEGIN = typer.Option(
    None,
    "--begin",
    metavar="TIME",
    autocompletion=_complete_begin,
    help="Start no sooner than TIME, as sbatch --begin takes it: now+90s, now+10min, +2h, "
    "HH:MM[:SS] (the next time the clock shows it), YYYY-MM-DDTHH:MM[:SS], tomorrow, "
    "midnight; local time. It waits as (BeginTime) until then.",
)
COMMENT = typer.Option(
    None,
    "--comment",
    "--label",
    metavar="TEXT",
    help="A comment kept with the job and shown by show, queue --long and history "
    "(sbatch --comment; pueue's label): one line, at most 1000 characters.",
)
ARRAY = typer.Option(
    None,
    "--array",
    metavar="INDEXES",
    help="Submit an array of jobs, one per index (0-9, 1,3,5, 0-20:4), each named NAME_INDEX "
    "and given GPUDESK_ARRAY_TASK_ID and GPUDESK_ARRAY_JOB_ID; %N after the indexes (0-9%2) "
    "runs at most N of them at once, as sbatch --array does. Each task is a job of its own; "
    "the array's id (its first task's) names them all, as Slurm's does (cancel, hold, wait, "
    "--after ...), and ID_TASK one task (144_0: the first).",
)
AFTER_ANY = typer.Option(
    [],
    "--after-any",
    metavar="JOB",
    autocompletion=complete_job,
    help="Start once these jobs have ended, however they ended (Slurm's afterany).",
)
AFTER_NOTOK = typer.Option(
    [],
    "--after-notok",
    metavar="JOB",
    autocompletion=complete_job,
    help="Start once these jobs have ended without succeeding: failed, cancelled or timed out "
    "(Slurm's afternotok). If one succeeds, this job is cancelled "
    "(DependencyNeverSatisfied).",
)
NOTIFY = typer.Option(
    None,
    "--notify",
    metavar="CMD",
    help="A shell command run as you when the job ends, however it ends (pueue's callback; "
    "sbatch --mail-type=END), with GPUDESK_JOB_ID, GPUDESK_JOB_NAME, GPUDESK_JOB_STATE, "
    "GPUDESK_JOB_EXIT_CODE and GPUDESK_JOB_OWNER set; killed after 30 s, its output in the "
    "engine's hooks.log.",
)


class FirstTasks(msgspec.Struct):
    """The dependencies' ids that name an array's first job alone (`--after 144_0`, or the
    first task's name, `sw_0`), where the engine reads an id as the whole array (docs/jobs.md):
    the request's `first_tasks_alone`. An id also given as digits names the array."""

    named: set[int] = msgspec.field(default_factory=set)
    by_id: set[int] = msgspec.field(default_factory=set)

    @property
    def alone(self) -> list[int]:
        return sorted(self.named - self.by_id)


class Extras(msgspec.Struct):
    """What the job's fields alone do not say: its array, the jobs its other dependencies
    name (ids or names, made ids when the engine is asked), and which of them name an
    array's first job alone."""

    array: ArrayRange | None = None
    after: dict[str, list[str]] = msgspec.field(default_factory=dict)
    first_tasks: FirstTasks = msgspec.field(default_factory=FirstTasks)


def apply(
    raw: dict[str, Any],
    begin: str | None,
    comment: str | None,
    array: str | None,
    after_any: list[str],
    after_notok: list[str],
    notify: str | None = None,
) -> Extras:
    """--begin, --comment and --notify into the job's fields; --array and the dependencies
    checked."""
    import time

    from gpudesk.core.submit_options import check_comment, check_notify, parse_array, parse_begin

    if begin is not None:
        try:
            raw["begin_at"] = parse_begin(begin, time.time())
        except ValueError as exc:
            fail(f"--begin: {exc}", EXIT_USAGE)
    if comment is not None:
        try:
            raw["comment"] = check_comment(comment)
        except ValueError as exc:
            fail(f"--comment: {exc}", EXIT_USAGE)
    if notify is not None:
        try:
            raw["notify"] = check_notify(notify)
        except ValueError as exc:
            fail(f"--notify: {exc}", EXIT_USAGE)
    extras = Extras()
    if array is not None:
        try:
            extras.array = parse_array(array)
        except ValueError as exc:
            fail(f"--array: {exc}", EXIT_USAGE)
        raw["array_task"] = extras.array.tasks[0]  # checked with the rest of the job
        if extras.array.limit is not None:
            raw["array_limit"] = extras.array.limit
    for key, refs in (("after_any", after_any), ("after_notok", after_notok)):
        if refs:
            extras.after[key] = job_refs(refs, _option(key))
    return extras


def job_refs(values: list[str], option: str) -> list[str]:
    """A dependency option's jobs, ids or names, from its comma-separated or repeated values."""
    refs = [ref.strip() for value in values for ref in value.split(",")]
    if any(not ref for ref in refs):
        fail(
            f"{option}: expected job ids or names separated by commas, e.g. {option} 3,prep",
            EXIT_USAGE,
        )
    return refs


def job_ids(
    client: Client, refs: list[str], key: str = "after", first: FirstTasks | None = None
) -> list[int]:
    """Ids, array tasks (`144_2`) and names, made ids now: the job waits for those jobs, not
    later namesakes. A name no job has is bad input, said as the option (`key`'s) that gave
    it; an id is checked by the engine (`gpudesk.cli.submit_job.as_option` says its refusal as
    the option), which reads an array's id as all its tasks: one that names an array's first
    job alone (`144_0`, `sw_0`) is put in `first`."""
    from gpudesk.api.errors import EngineError
    from gpudesk.core.field_checks import array_task_ref, reads_as_job_id

    ids = []
    for ref in refs:
        if reads_as_job_id(ref):
            ids.append(int(ref))
            if first is not None:
                first.by_id.add(ids[-1])
            continue
        try:
            job = client.show(ref).job
        except EngineError as exc:
            if exc.code != "unknown_job":
                raise
            what = ref if array_task_ref(ref) else f"named {quoted(ref)}"  # 144_9: no such task
            fail(
                f"{_option(key)}: there is no job {what} to run after (gpudesk queue --all lists "
                "the jobs)",
                EXIT_USAGE,
            )
        ids.append(job.id)
        if job.array_head and first is not None:
            first.named.add(job.id)
    return ids


def _option(key: str) -> str:
    """A dependency field's option: --after-any for after_any."""
    return f"--{key.replace('_', '-')}"


def specs_of(raw: dict[str, Any], extras: Extras, client: Client) -> list[JobSpec]:
    """The job, or its array's jobs (the first, then each naming it as -1: the first job of
    the request), with its dependencies as ids."""
    from gpudesk.core.jobs import JobSpec, SpecError, never_met

    fields = dict(raw)
    for key, refs in extras.after.items():
        fields[key] = job_ids(client, refs, key, extras.first_tasks)
    # said as the options, once the names are ids (`--after prep --after-notok 3`: job 3)
    if problem := never_met(fields.get("after", ()), fields.get("after_notok", ()), _option):
        fail(problem, EXIT_USAGE)
    array = extras.array
    tasks = array.tasks if array is not None else (None,)
    specs = []
    for number, task in enumerate(tasks):
        one = dict(fields)
        if task is not None:
            one.update(name=f"{raw['name']}_{task}", array_task=task)
            if number:
                one["array_job"] = -1
        try:
            specs.append(JobSpec.from_dict(one))
        except SpecError as exc:
            option = {"after_any": "--after-any", "after_notok": "--after-notok"}
            fail(f"{option.get(exc.key, '--' + exc.key)}: {exc.message}", EXIT_USAGE)
    return specs


def array_line(ids: list[int], array: ArrayRange) -> str:
    """`submitted array job 12 (tasks 0-9%2: jobs 12-21, at most 2 at once); 12 names them
    all, 12_0 task 0` (as Slurm reads an array's id and JOBID_TASK)."""
    jobs = f"jobs {ids[0]}-{ids[-1]}" if consecutive(ids) else "jobs"
    throttle = f", at most {array.limit} at once" if array.limit is not None else ""
    named = f"{ids[0]} names them all, {ids[0]}_{array.tasks[0]} task {array.tasks[0]}"
    return f"array job {ids[0]} (tasks {array.text}: {jobs}{throttle}); {named}"
