"""The checks a name or any field's error message needs first, shared by the job model
(core.jobs) and the specs it holds (core.tracking_spec): `describe` a value as found,
`check_name`, and a job's name (`check_job_name`: not one a job reference reads as an id)."""

from __future__ import annotations

from typing import Any

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


def check_job_name(value: Any) -> str:
    """A job's name: a name (`check_name`) that a job reference would not read as an id, or
    the job could never be named by it."""
    name = check_name(value)
    if reads_as_job_id(name):
        raise ValueError(
            f"a job's name cannot be all digits (found {name!r}): a job is named by its id "
            "or its name, and digits are read as an id, so the job could not be named by it; "
            "put a letter in it"
        )
    return name
