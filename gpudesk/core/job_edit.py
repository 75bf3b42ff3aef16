"""Editing a job that has not started (`gpudesk edit`, as pueue's `edit`/`env set` and Slurm's
`scontrol update` of a pending job): which of its fields may change, the spec they make (checked
whole by `JobSpec.from_dict`, as a new submission's is: no second copy of any check), and what
changed, in words for its event.

Fields outside `EDITABLE_FIELDS` stay as submitted: `priority` has its own op and rules
(`gpudesk priority`), `cluster` is where it was sent, `group`, `sweep` and `tracking` tie it to
its run, and `dataset`/`selection` to a shared loader registered for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from gpudesk.core.jobs import (
    DEPENDENCY_FIELDS,
    JobSpec,
    JobState,
    SpecError,
    TasksOf,
    check_env,
    describe,
    gpu_hints_without_gpus,
    never_met,
)
from gpudesk.core.records import JobRecord
from gpudesk.core.submit_options import option_of
from gpudesk.text import printable_line, safe_text

EDITABLE_FIELDS = (
    "name",
    "command",
    "shell",
    "workdir",
    "gpus",
    "memory_gb",
    "sm_pct",
    "time_limit_s",
    "max_attempts",
    "after",
    "preemptible",
    "preempt_signal",
    "preempt_grace_s",
    "begin_at",  # scontrol update BeginTime= (gpudesk edit --begin)
    "comment",  # scontrol update Comment= (gpudesk edit --comment)
    "after_any",  # scontrol update Dependency=afterany: (gpudesk edit --after-any)
    "after_notok",  # Dependency=afternotok: (gpudesk edit --after-notok)
)
# Every kind of dependency (core/jobs.py's DEPENDENCY_FIELDS): an edit that changes one is
# checked as `after` is (its jobs exist, no cycle through any kind).
# What the job runs and where: changed by anyone but its owner (or root, who may become her
# anyway), it would be another's code run as her. An admin may change how it is scheduled.
RUNS_AS_OWNER_FIELDS = ("command", "shell", "workdir")


class JobEdit(msgspec.Struct, frozen=True):
    """An edit of a job, checked whole: its new spec, what changed in words (its event's), and
    the environment it was submitted from where that changes."""

    spec: JobSpec
    changes: tuple[str, ...]
    base_env: dict[str, str] | None = None

    @property
    def message(self) -> str:
        return "edited by user: " + "; ".join(self.changes)


def edit_refusal(job: JobRecord) -> str | None:
    """Why `job` cannot be edited whoever asks (it started: its state named), or None. A
    tracked job whose MLflow run is made already is refused by the engine, which knows."""
    if job.state is not JobState.QUEUED:
        state = f"already {job.state.value}" if job.state.terminal else job.state.value
        return (
            f"job {job.id} ({job.name}) is {state}: only a job that has not started (queued, "
            "held, or waiting for the jobs it runs after) can be edited; `gpudesk requeue` "
            "runs a finished one again, and a requeued job can be edited"
        )
    return None


def others_code_refusal(
    job: JobRecord,
    caller_uid: int,
    fields: Mapping[str, Any],
    set_env: Mapping[str, str],
    unset_env: Sequence[str],
) -> str | None:
    """Why an admin who is not root may not make this edit of another's job: it changes what
    the job runs or where (RUNS_AS_OWNER_FIELDS, its environment), which then runs as her."""
    if caller_uid in (0, job.owner.uid):
        return None
    asked = [key for key in RUNS_AS_OWNER_FIELDS if key in fields]
    asked += ["environment"] if set_env or unset_env else []
    if not asked:
        return None
    return (
        f"refused: job {job.id} belongs to {job.user} and runs as her; its {', '.join(asked)} "
        "may be changed only by her (or root): an admin may change how it is scheduled "
        "(name, time limit, GPUs, memory, SM, dependencies, attempts), not what it runs"
    )


def tracked_refusal(job: JobRecord) -> str:
    """Why a tracked job whose MLflow run is made cannot be edited (the engine knows when)."""
    return (
        f"job {job.id} ({job.name}) is tracked and its MLflow run is made already (it was "
        "placed, or ran before): the run records its spec as params, which MLflow never "
        "changes; cancel it and submit it again as it should be"
    )


def job_edit(
    spec: JobSpec,
    base_env: Mapping[str, str],
    fields: Mapping[str, Any],
    set_env: Mapping[str, str],
    unset_env: Sequence[str],
    tasks_of: TasksOf = lambda _job_id: {},
) -> JobEdit:
    """The edit of a job of `spec`, submitted from `base_env`: its new spec (`edited_spec`),
    and `unset_env` taken off the submitted environment too; an array's id among the
    dependencies it gives names the array's tasks too (`tasks_of`: JobSpec.with_array_tasks).
    Raises SpecError ("unset_env" for a variable the job does not have)."""
    unknown = [name for name in unset_env if name not in spec.env and name not in base_env]
    if unknown:
        raise SpecError("unset_env", f"the job has no variable {safe_text(unknown[0])!r} to unset")
    given = [key for key in DEPENDENCY_FIELDS if key in fields]
    new = edited_spec(spec, fields, set_env, unset_env).with_array_tasks(tasks_of, given)
    # as submit refuses them: hints this edit gives a job left with no GPU (`--gpus 0` alone
    # moves a hinted job to the CPU)
    given = [key for key, value in fields.items() if value is not None]
    hinted = gpu_hints_without_gpus(new, given)
    if hinted:
        raise SpecError(
            hinted[0],
            "it describes the job's use of a GPU, but the job asks for none (gpus 0), so it "
            "would run with no GPU: give the GPUs it needs with it (--gpus N)",
        )
    said = changes(spec, new)
    dropped = [name for name in unset_env if name in base_env]
    said += [f"env -{printable_line(name)}" for name in dropped if name not in spec.env]
    kept = {k: v for k, v in base_env.items() if k not in dropped} if dropped else None
    return JobEdit(new, tuple(said), kept)


def dependency_cycle(
    job_id: int, after: Iterable[int], jobs_of: Callable[[set[int]], Iterable[JobRecord]]
) -> str | None:
    """Why job `job_id` cannot run after `after`: the jobs would wait on each other ("... job 5
    runs after job 7 runs after job 5"), or None. `jobs_of` gives those of a set of ids that
    exist; every state counts (a finished job may be requeued and wait again), and every kind
    of dependency (after, after_any, after_notok: each waits for its jobs to end)."""
    came_from: dict[int, int] = {ref: job_id for ref in after}
    frontier = set(came_from)
    while frontier and job_id not in frontier:
        nxt: set[int] = set()
        for dependent in jobs_of(frontier):
            for ref in dependent.spec.dependencies:
                if ref not in came_from:
                    came_from[ref] = dependent.id
                    nxt.add(ref)
        frontier = nxt
    if job_id not in frontier:
        return None
    path, step = [job_id], came_from[job_id]
    while step != job_id:
        path.append(step)
        step = came_from[step]
    cycle = [job_id, *reversed(path[1:]), job_id]
    return "the jobs would wait for each other for ever: " + " runs after ".join(
        f"job {ref}" for ref in cycle
    )


def edited_spec(
    spec: JobSpec,
    fields: Mapping[str, Any],
    set_env: Mapping[str, str],
    unset_env: Sequence[str],
) -> JobSpec:
    """`spec` with `fields` replaced (a null clears a field to its default: no time limit),
    `set_env` laid on its own environment and `unset_env` taken off it, checked whole as a
    submit's spec is. Raises SpecError naming the field at fault."""
    refused = sorted(set(fields) - set(EDITABLE_FIELDS))
    if refused:
        raise SpecError(
            refused[0],
            "cannot be edited"
            + (
                " (gpudesk priority changes it)"
                if refused[0] == "priority"
                else f"; the fields that can: {', '.join(EDITABLE_FIELDS)}"
            ),
        )
    for key in DEPENDENCY_FIELDS:
        refs = fields.get(key)
        if isinstance(refs, (list, tuple)) and any(
            isinstance(item, int) and not isinstance(item, bool) and item < 0 for item in refs
        ):
            raise SpecError(key, "expected job ids (whole numbers from 1)")
    try:
        added = check_env(dict(set_env))
    except ValueError as exc:
        raise SpecError("env", str(exc)) from None
    env = {k: v for k, v in spec.env.items() if k not in unset_env}
    env.update(added)
    edited = {**spec.to_dict(), **fields, "env": env}
    # The dependencies the edit leaves are kept as they are: an array's id named its tasks
    # too, which may be more than a client may name (MAX_AFTER).
    kept = {key: getattr(spec, key) for key in DEPENDENCY_FIELDS if key not in fields}
    edited.update(dict.fromkeys(kept, ()))
    if "name" in fields:
        new = msgspec.structs.replace(JobSpec.from_dict(edited), **kept)
    else:
        # A name the edit leaves is kept as it is: one stored before a rule refused it (all
        # digits: check_job_name) does not stop the job's other fields from being edited.
        new = msgspec.structs.replace(
            JobSpec.from_dict({**edited, "name": "job"}), name=spec.name, **kept
        )
    # checked with the kinds the edit leaves: `edit --after-notok 1` of a job after job 1
    if problem := never_met(new.after, new.after_notok):
        raise SpecError("after_notok" if "after_notok" in fields else "after", problem)
    return new


def changes(old: JobSpec, new: JobSpec) -> list[str]:
    """What an edit changed, a phrase per field, in `EDITABLE_FIELDS`' order then the
    environment's names (never its values: an environment can hold secrets); each field
    named as the option that edits it (`mem none -> 8`, not the wire's `memory_gb`)."""
    said: list[str] = []
    for key in EDITABLE_FIELDS:
        before, after = getattr(old, key), getattr(new, key)
        label = option_of(key).removeprefix("--")
        if before != after and key == "begin_at":  # a time, not seconds since 1970
            said.append(f"{label} {_clock(before)} -> {_clock(after)}")
        elif before != after and key == "time_limit_s":  # as --time takes it back
            said.append(f"{label} {_limit(before)} -> {_limit(after)}")
        elif before != after:
            said.append(f"{label} {_shown(before)} -> {_shown(after)}")
    for name in sorted(set(old.env) | set(new.env)):
        if name not in new.env:
            said.append(f"env -{printable_line(name)}")
        elif old.env.get(name) != new.env[name]:
            said.append(f"env {printable_line(name)}=…")
    return said


def _limit(seconds: float | None) -> str:
    from gpudesk.units import sbatch_time

    return "none" if seconds is None else sbatch_time(seconds)


def _clock(value: float | None) -> str:
    import time

    return "none" if value is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))


def _shown(value: Any) -> str:
    """A field's value in an event's words, cut to 80 characters; a control character in it
    (a command's ESC) spelled out, as every reader of the event shows it to a terminal."""
    if value is None:
        return "none"
    if isinstance(value, tuple):
        text = " ".join(printable_line(str(part)) for part in value) if value else "none"
    elif isinstance(value, str):
        text = printable_line(value)
    elif isinstance(value, float):
        text = f"{value:g}"
    else:
        text = describe(value) if not isinstance(value, (int, bool)) else str(value).lower()
    return text if len(text) <= 80 else text[:79] + "…"
