"""The checks a name or any field's error message needs first, shared by the job model
(core.jobs) and the specs it holds (core.tracking_spec): `describe` a value as found,
`check_name`, and a job's name (`check_job_name`: not one a job reference reads as an id or
as an array's task), with how a job reference reads (`reads_as_job_id`, `array_task_ref`)."""

from __future__ import annotations

import re
from typing import Any

from gpudesk.core.submit_options import MAX_ARRAY_TASKS, parse_array
from gpudesk.text import one_line_refusal

MAX_NAME_LEN = 200


def describe(value: Any) -> str:
    """A short, type-revealing rendering of a value for error messages; JSON's null is null."""
    if value is None:
        return "null"
    kind = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "table",
    }.get(type(value), type(value).__name__)
    try:
        # a boolean as TOML and JSON write it (`true`), not as Python does (`True`)
        text = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    except ValueError:  # an int too long for str() (Python's 4300-digit limit)
        text = "<a huge number>"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({kind})"


def check_name(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, found {describe(value)}")
    name = value.strip()
    if not name:
        raise ValueError("expected a non-empty name")
    if len(name) > MAX_NAME_LEN:
        raise ValueError(f"expected at most {MAX_NAME_LEN} characters, found {len(name)}")
    refusal = one_line_refusal(name, "a name", "it is shown on one line of plain text")
    if refusal is not None:
        raise ValueError(refusal)
    return name


def reads_as_job_id(ref: str) -> bool:
    """Does a job reference (`gpudesk show 12`, `--after 12`) name a job by its id? ASCII digits
    do ("12", not "²"); anything else is a name."""
    return ref.isascii() and ref.isdigit()


# Slurm's JOBID_TASK (`144_2`: task 2 of array job 144), and its task ranges (`144_[0-2]`)
_ARRAY_TASK = re.compile(r"([0-9]+)_([0-9]+)", re.ASCII)
_TASK_RANGE = re.compile(r"[0-9]+_\[", re.ASCII)
_MOST_DIGITS = 18  # within SQLite's integers (and int()'s 4300-digit limit)


def array_task_ref(ref: str) -> tuple[int, int] | None:
    """A job reference that names one task of an array as Slurm does (`144_2`: the job of
    array 144 whose task index is 2) as (array id, task index); None for any other reference
    (`sw_0`, a task's name, is a name; so is one whose numbers are too long for an id)."""
    match = _ARRAY_TASK.fullmatch(ref)
    if match is None or max(len(digits) for digits in match.groups()) > _MOST_DIGITS:
        return None
    return int(match[1]), int(match[2])


def task_range_refusal(ref: str) -> str | None:
    """Why `ref` is refused as one job's reference: Slurm's range of an array's tasks
    (`144_[0-2]`), which names several (the commands that act on many expand it first:
    `task_range_refs`); None for any other reference."""
    if _TASK_RANGE.match(ref) is None:
        return None
    array = ref.split("_", 1)[0]
    return f"{ref}: a range of an array's tasks names several jobs; name one task here ({array}_0)"


def task_range_refs(refs: list[str]) -> list[str]:
    """`refs` with each range of an array's tasks spelled out as Slurm's scancel reads it
    (`144_[0-2,5]`: 144_0 144_1 144_2 144_5; the indices as sbatch --array takes them, without
    a throttle), or ValueError saying in one sentence what is wrong with one."""
    spelled: list[str] = []
    for ref in refs:
        if _TASK_RANGE.match(ref) is None:
            spelled.append(ref)
            continue
        array, _, indexes = ref.partition("_")
        if not indexes.endswith("]") or "%" in indexes or len(array) > _MOST_DIGITS:
            raise ValueError(
                f"{ref}: a range of an array's tasks is ID_[INDEXES], the indexes as --array "
                "takes them (144_[0-2,5], 144_[0-20:4])"
            )
        try:
            tasks = parse_array(indexes[1:-1]).tasks
        except ValueError as exc:
            raise ValueError(f"{ref}: {exc}") from None
        if len(spelled) + len(tasks) > MAX_ARRAY_TASKS:
            raise ValueError(f"{ref}: at most {MAX_ARRAY_TASKS:,} jobs are named at once")
        spelled.extend(f"{array}_{task}" for task in tasks)
    return spelled


def reads_as_job_number(ref: str) -> bool:
    """Does a job reference name a job by number: its id (`144`) or its array task (`144_2`,
    or a range of them)? Such a reference is never read as a name."""
    return reads_as_job_id(ref) or bool(_TASK_RANGE.match(ref)) or array_task_ref(ref) is not None


def check_job_name(value: Any) -> str:
    """A job's name: a name (`check_name`) that a job reference would not read as an id or an
    array's task, or the job could never be named by it."""
    name = check_name(value)
    if reads_as_job_id(name):
        raise ValueError(
            f"a job's name cannot be all digits (found {name!r}): a job is named by its id "
            "or its name, and digits are read as an id, so the job could not be named by it; "
            "put a letter in it"
        )
    if reads_as_job_number(name):
        raise ValueError(
            f"a job's name cannot read as an array's task (found {name!r}): 144_2 names task 2 "
            "of array job 144, as in Slurm, so the job could not be named by it; put a letter "
            "before its first _"
        )
    return name
