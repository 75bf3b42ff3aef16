"""The sbatch scripts gpudesk submits (and `gpudesk export slurm` writes for people to read).

A submission is one Slurm job or one job array: the jobs of one [[sweeps]] table that ask for
the same resources become one array, task i running the i-th of them (a `case` on
SLURM_ARRAY_TASK_ID), so `squeue` shows one line per sweep and `scancel` stops it whole. Every
`#SBATCH` line has a comment saying where it came from.

An `#SBATCH` line is read by sbatch's own tokenizer, not by a shell: `get_argument` in Slurm's
src/sbatch/opt.c takes a backslash as an escape of the next character inside quotes too, `'` or
`"` as quotes anywhere in a word, and an unquoted `#` as the start of a comment. `sbatch_word`
writes a value so that tokenizer gives it back exactly.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

import msgspec

from gpudesk.core.cluster import ClusterSpec
from gpudesk.core.jobs import JobSpec
from gpudesk.core.umask import umask_text
from gpudesk.slurm.request import (
    GresOffer,
    SbatchOption,
    SlurmMappingError,
    preempt_options,
    sbatch_options,
)

ARRAY_TASK = "%a"  # sbatch's file-name pattern for an array task's index
_CONTROL = re.compile("[\x00-\x1f\x7f]")
# A name the shell's `export` takes (an environment may hold others: bash's exported functions)
_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# bash's read-only variables: an `export` of one fails (and says so in the job's log)
_READ_ONLY = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"})
# What an #SBATCH word may hold unquoted: sbatch's tokenizer gives these back as they are.
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_.,:/@%+=-]+$")
# A sweep's placeholder, as gpudesk.profile.values reads one ({lr}; ${HOME} is the shell's).
_PLACEHOLDER = re.compile(r"(?<!\$)\{[A-Za-z_][A-Za-z0-9_]*\}")
_SEPARATORS = "-_.,:=+ "


def one_line(text: str) -> str:
    """`text` with every control character spelled out (`\\x0a`): what a `#` comment of the
    script may hold. Names are refused with one at validation (cluster.has_control); this is the
    renderer's own guard, since a newline in a comment would start a shell line of its own."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def sbatch_word(option: SbatchOption) -> str:
    """`--flag=value` as an `#SBATCH` line must spell it for sbatch to read `value` back
    exactly: as it is when every character is plain, else in double quotes with each `\\` and
    `"` escaped by a backslash (sbatch's get_argument, src/sbatch/opt.c, copies the character
    after a backslash whatever it is, inside quotes too). A newline ends the line and a NUL the
    string, so a value with one cannot be written: SlurmMappingError."""
    value = option.value
    if "\n" in value or "\x00" in value:
        what = "a newline" if "\n" in value else "a NUL character"
        raise SlurmMappingError(
            f"{option.flag} would be {value!r}, which holds {what}: an #SBATCH line ends at a "
            "newline (and sbatch reads no NUL), so sbatch cannot be given this value in a "
            "script; rename it or choose another path"
        )
    if option.flag == "--output" and "\\" in value:
        raise SlurmMappingError(
            f"the job's output file {value!r} has a backslash in its path: Slurm takes a "
            "backslash in --output to mean that the file name has no %j/%A/%a patterns (and "
            "drops it), so the jobs' logs could not be named per job; use a folder whose path "
            "has no backslash"
        )
    if not value or _PLAIN_WORD.match(value):
        return option.arg
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{option.flag}="{escaped}"'


def array_job_name(sweep: str) -> str:
    """An array's --job-name: its sweep's name without the placeholders only its jobs fill
    ("digits-lr{lr}-h{hidden}" -> "digits-lr-h"), what `squeue` shows for every task."""
    name = _PLACEHOLDER.sub("", sweep)
    name = re.sub(f"([{re.escape(_SEPARATORS)}])[{re.escape(_SEPARATORS)}]+", r"\1", name)
    return name.strip(_SEPARATORS) or "sweep"


def literal(path: str) -> str:
    """A path as it must stand in an sbatch file-name pattern (--output): sbatch reads `%j`,
    `%a` and the like in it, so a `%` of the path itself is doubled."""
    return path.replace("%", "%%")


class Task(msgspec.Struct, frozen=True):
    """One job of a submission: its spec, and gpudesk's id for it (None: not submitted by
    gpudesk, as in `gpudesk export slurm`)."""

    spec: JobSpec
    job_id: int | None = None


class Submission(msgspec.Struct, frozen=True):
    """One sbatch: a job, or an array of jobs (one task each, in order)."""

    tasks: tuple[Task, ...]
    options: tuple[SbatchOption, ...]  # the first task's; the same for all, but the name
    array_name: str | None = None  # an array's sweep (its name as written); None: not an array

    @property
    def is_array(self) -> bool:
        return self.array_name is not None


def _same_request(a: list[SbatchOption], b: list[SbatchOption]) -> bool:
    return [o for o in a if o.flag != "--job-name"] == [o for o in b if o.flag != "--job-name"]


def plan(
    specs: Sequence[JobSpec],
    cluster: ClusterSpec,
    offer: GresOffer,
    job_ids: Sequence[int | None] | None = None,
) -> list[Submission]:
    """Group jobs, in order, into submissions: neighbours from one sweep (same sweep, group and
    `after`) that ask for the same resources form an array; every other job is one of its own.
    A preemptible job asks for --requeue and --signal (request.preempt_options). Raises
    SlurmMappingError for a job this cluster cannot be asked for, or whose name or folder an
    #SBATCH line cannot hold (sbatch_word)."""
    ids = list(job_ids) if job_ids is not None else [None] * len(specs)
    submissions: list[Submission] = []
    current: list[Task] = []
    current_options: list[SbatchOption] = []

    def close() -> None:
        if not current:
            return
        first = current[0].spec
        name = first.sweep if len(current) > 1 else None
        options = current_options
        if name is not None:
            options = [
                SbatchOption(
                    "--job-name",
                    array_job_name(name),
                    "the sweep's name, without its placeholders: one array task per job",
                )
                if o.flag == "--job-name"
                else o
                for o in options
            ]
        workdirs = {t.spec.workdir for t in current}
        for option in options:
            sbatch_word(option)
        if len(workdirs) == 1 and first.workdir is not None:  # the script's --chdir
            sbatch_word(SbatchOption("--chdir", first.workdir, ""))
        submissions.append(Submission(tuple(current), tuple(options), name))
        current.clear()

    for spec, job_id in zip(specs, ids, strict=True):
        options = sbatch_options(spec, cluster, offer) + preempt_options(spec)
        if current:
            first = current[0].spec
            joins = (
                spec.sweep is not None
                and spec.sweep == first.sweep
                and spec.group == first.group
                and spec.after == first.after
                and _same_request(options, current_options)
            )
            if not joins:
                close()
        if not current:
            current_options = options
        current.append(Task(spec, job_id))
    close()
    return submissions


def _comment(text: str) -> list[str]:
    return [f"#   {one_line(line)}" for line in text.split("\n")]


def _task_lines(task: Task, chdir: str | None, indent: str) -> list[str]:
    spec = task.spec
    lines = []
    if task.job_id is not None:
        lines.append(
            f"export GPUDESK_JOB_ID={task.job_id} GPUDESK_JOB_NAME={shlex.quote(spec.name)} "
            # Slurm runs a job once, or again from the start once it requeued it
            'GPUDESK_ATTEMPT="$((${SLURM_RESTART_COUNT:-0} + 1))"'
        )
    for key, value in spec.env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    if spec.umask is not None:  # its submitter's: sbatch ran under the 077 of SUBMIT_SCRIPT
        lines.append(f"umask {umask_text(spec.umask)}")
    if spec.preemptible:
        lines.extend(_preempt_lines(spec))
    if spec.workdir is not None and spec.workdir != chdir:
        lines.append(f"cd {shlex.quote(spec.workdir)} || exit 1")
    if spec.shell:
        lines.append(f"exec /bin/sh -c {shlex.quote(spec.command[0])}")
    else:
        lines.append(f"exec {shlex.join(spec.command)}")
    return [indent + line for line in lines]


def render(
    submission: Submission,
    *,
    output: str,
    header: Sequence[str] = (),
    dependency: SbatchOption | None = None,
    environment: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
) -> str:
    """The script: `#SBATCH` lines with their reasons, then the job (or a `case` over the
    array's tasks). `output` is the --output file (with %a for an array).

    `environment` (the engine's submissions): the submitter's environment, written into the
    script and set by it (after unsetting `unset`: what sbatch's own environment has and hers
    has not), so that sbatch itself runs with an environment the engine built and hers reaches
    only the job. None (`gpudesk export slurm`): the environment of whoever runs sbatch."""
    tasks = submission.tasks
    workdirs = {t.spec.workdir for t in tasks}
    chdir = next(iter(workdirs)) if len(workdirs) == 1 else None
    options = _script_options(submission, chdir, output, environment, dependency)
    lines = ["#!/bin/bash", *(f"# {one_line(h)}" if h else "#" for h in header)]
    for option in options:
        lines.append(f"#SBATCH {sbatch_word(option)}")
        lines.extend(_comment(option.why))
    lines.append("")
    if environment is not None:
        lines.extend(_environment_lines(environment, unset))
    lines.extend(_THREADS_LINES)
    if submission.is_array:
        lines.extend(_array_lines(tasks, chdir))
    else:
        lines.extend(_task_lines(tasks[0], chdir, ""))
    return "\n".join(lines) + "\n"


def _script_options(
    submission: Submission,
    chdir: str | None,
    output: str,
    environment: Mapping[str, str] | None,
    dependency: SbatchOption | None,
) -> list[SbatchOption]:
    """The submission's own options, then the script's: the array, the workdir, the output,
    the environment sbatch passes on, and the dependency."""
    tasks = submission.tasks
    options: list[SbatchOption] = list(submission.options)
    if submission.is_array:
        options.append(
            SbatchOption(
                "--array",
                f"0-{len(tasks) - 1}",
                f"the {len(tasks)} jobs of the sweep, task i running the i-th below",
            )
        )
    if chdir is not None:
        options.append(SbatchOption("--chdir", chdir, "the job's workdir"))
    options.append(
        SbatchOption(
            "--output",
            output,
            "stdout and stderr together, as gpudesk logs show them"
            + (" (%a: the array task)" if submission.is_array else ""),
        )
    )
    options.append(
        SbatchOption(
            "--open-mode", "append", "a requeued job adds to its output, as on the station"
        )
    )
    options.append(
        SbatchOption(
            "--export",
            "ALL",
            "the environment sbatch runs in"
            + (
                " (one gpudesk built), then the submitter's, set below"
                if environment is not None
                else ", and the job's own env below"
            ),
        )
    )
    if dependency is not None:
        options.append(dependency)
        options.append(
            SbatchOption(
                "--kill-on-invalid-dep",
                "yes",
                "a parent that fails or is cancelled cancels this job, not leaves it pending",
            )
        )
    return options


def _array_lines(tasks: Sequence[Task], chdir: str | None) -> list[str]:
    """An array's tasks: a `case` on SLURM_ARRAY_TASK_ID, task i running the i-th job."""
    lines = ['case "$SLURM_ARRAY_TASK_ID" in']
    for index, task in enumerate(tasks):
        who = f"gpudesk job {task.job_id}: " if task.job_id is not None else ""
        lines.append(f"  {index})  # {one_line(who + task.spec.name)}")
        lines.extend(_task_lines(task, chdir, "    "))
        lines.append("    ;;")
    lines.append('  *) echo "gpudesk: no job for array task $SLURM_ARRAY_TASK_ID" >&2; exit 1 ;;')
    lines.append("esac")
    return lines


def _preempt_lines(spec: JobSpec) -> list[str]:
    """What a preemptible job is told on the station (engine/attempts.py): its signal and grace,
    and, once Slurm requeued it (SLURM_RESTART_COUNT), that an earlier run was stopped."""
    grace = f"{spec.preempt_grace_s:g}"
    return [
        "# preemptible: the signal to catch and its grace; requeued, it resumes (docs/slurm.md)",
        f"export GPUDESK_PREEMPT_SIGNAL={spec.preempt_signal} GPUDESK_PREEMPT_GRACE_S={grace}",
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
        '  export GPUDESK_PREEMPTED=1 GPUDESK_PREEMPTIONS="$SLURM_RESTART_COUNT"',
        "fi",
    ]


# OpenMP and torch start a thread per core they see, not per CPU Slurm gave the task: tasks
# sharing a node would each spin on every core. One thread per CPU of the task, as the station
# sets one per slot (the submitter's or the job's own OMP_NUM_THREADS wins, as on the station).
_THREADS_LINES = [
    "# one OpenMP/torch thread per CPU of the task (unless OMP_NUM_THREADS is set)",
    'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}"',
]


def _environment_lines(environment: Mapping[str, str], unset: Sequence[str]) -> list[str]:
    """The submitter's environment as the script sets it, before the job's own `env`."""
    lines = ["# the submitter's environment (sbatch ran in one gpudesk built)"]
    names = sorted(k for k in unset if _SHELL_NAME.match(k) and k not in environment)
    if names:
        lines.append(f"unset {' '.join(names)}")
    for key, value in sorted(environment.items()):
        if _SHELL_NAME.match(key) and key not in _READ_ONLY:
            lines.append(f"export {key}={shlex.quote(value)}")
    lines.append("")
    return lines


def job_environment(base: Mapping[str, str], conf: str | None) -> dict[str, str]:
    """The submitter's environment as the job gets it: without the SLURM_/SBATCH_ variables
    of a Slurm job it may itself be running in (SLURM_JOB_ID would mislead the job), with
    SLURM_CONF set to the job's cluster's."""
    env = {
        k: v
        for k, v in base.items()
        if not (k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")))
    }
    if conf is not None:
        env["SLURM_CONF"] = conf
    return env
