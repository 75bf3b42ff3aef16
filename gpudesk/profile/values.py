"""The keys a profile may hold, the checks of their values, and how keys and values are shown
in problems (`jobs[2].gpus`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpudesk.core.datasets import LOADER_KEYS
from gpudesk.core.jobs import check_bool, check_name, describe
from gpudesk.core.tracking_spec import MLFLOW_MAX_PARAM_VALUE
from gpudesk.profile.model import MAX_REPEAT
from gpudesk.results import Goal
from gpudesk.toml_lines import BARE_KEY, Key

# A key path inside the document: ("jobs", 2, "gpus") is rendered "jobs[2].gpus".

TOP_KEYS = (
    "name",
    "description",
    "station",
    "defaults",
    "datasets",
    "report",
    "tracking",
    "cluster",
    "jobs",
    "sweeps",
)
REPORT_KEYS = ("metric", "goal")
TRACKING_KEYS = ("mlflow_uri", "experiment")  # [tracking] (docs/tracking.md)
MAX_METRIC_CHARS = 100
JOB_KEYS = (
    "name",
    "command",
    "shell",
    "workdir",
    "env",
    "gpus",
    "memory_gb",
    "sm_pct",
    "dataset",
    "selection",
    "priority",
    "max_attempts",
    "time_limit",
    "preemptible",
    "preempt_signal",
    "preempt_grace_s",
    "after",
    "repeat",
    "begin",
    "comment",
    "notify",
    "after_any",  # Slurm's afterany: once the named tables' jobs have ended, however
    "after_notok",  # afternotok: once they have ended without succeeding
)
# The keys naming the tables whose jobs a table's jobs run after, each a kind of dependency.
AFTER_KEYS = ("after", "after_any", "after_notok")
SWEEP_KEYS = (*JOB_KEYS, "grid")
# [defaults] may set every job key but those that make a job what it is.
DEFAULT_KEYS = tuple(
    key for key in JOB_KEYS if key not in ("name", "command", "repeat", *AFTER_KEYS)
)
DATASET_KEYS = ("factory", *LOADER_KEYS)
# Resource fields that go straight from the table (or [defaults]) into the JobSpec.
_RESOURCE_KEYS = (
    "gpus",
    "memory_gb",
    "sm_pct",
    "dataset",
    "selection",
    "priority",
    "max_attempts",
    "time_limit",  # a [defaults] one was accepted and dropped: it counts as the others do
    "preemptible",
    "preempt_signal",
    "preempt_grace_s",
    "begin",
    "comment",
    "notify",
)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `{name}` not preceded by `$`, so that shell `${HOME}` passes through untouched.
_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FACTORY = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


_INVALID: Any = object()  # a value that failed its check (the problem is already recorded)


# --- validation --------------------------------------------------------------------------------


def _render_key(key: Key) -> str:
    text = ""
    for part in key:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
            text += f".{name}" if text else name
    return text


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; expected one of: {', '.join(choices)}"


def _found(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return "an array of tables"
    if isinstance(value, dict):
        return "a table"
    return describe(value)


def _render_value(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _substitute(template: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _check_time_limit(value: Any) -> float:
    """`time_limit = "2h"` (or "1:30:00", "2-12:00:00", as sbatch --time) or a whole number
    of minutes, as sbatch takes a bare number."""
    from gpudesk.core.jobs import MAX_TIME_LIMIT_S
    from gpudesk.units import parse_duration

    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(
            f'expected a duration such as "2h", "1:30:00" or a whole number of minutes, '
            f"found {describe(value)}"
        )
    seconds = parse_duration(str(value))
    if not 1 <= seconds <= MAX_TIME_LIMIT_S:
        raise ValueError(f"a time limit is 1 s to 366 days, found {seconds:g} s")
    return seconds


def _check_after_names(value: Any) -> tuple[str, ...]:
    """`after = ["prep"]` (after_any, after_notok alike): the names of [[jobs]] or [[sweeps]]
    tables of the same profile."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ValueError(
            f'expected the names of jobs or sweeps of this profile, e.g. after = ["prep"], '
            f"found {describe(value)}"
        )
    return tuple(dict.fromkeys(check_name(item) for item in items))


def _check_begin(value: Any) -> float:
    """`begin = "now+10min"` (or "22:00", "2026-12-24T18:00", as sbatch --begin takes it, read
    when the profile is) or a TOML date-time (local time where it names no offset)."""
    import datetime as dt
    import time

    from gpudesk.core.submit_options import check_begin_at, parse_begin

    if isinstance(value, dt.datetime):
        return check_begin_at(value.astimezone().timestamp())
    if not isinstance(value, str):
        raise ValueError(
            f'expected a time such as "now+10min", "22:00" or 2026-12-24T18:00:00, '
            f"found {describe(value)}"
        )
    return check_begin_at(parse_begin(value, time.time()))


_KEY_CHECKS: dict[str, Callable[[Any], Any]] = {
    "shell": check_bool,
    "time_limit": _check_time_limit,
    "begin": _check_begin,
}


def _check_repeat(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPEAT:
        raise ValueError(f"expected a whole number from 1 to {MAX_REPEAT}, found {describe(value)}")
    return value


def _check_factory(value: Any) -> str:
    if not isinstance(value, str) or not _FACTORY.fullmatch(value):
        raise ValueError(f'expected "package.module:callable", found {describe(value)}')
    return value


def _check_metric(value: Any) -> str:
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_METRIC_CHARS
        or not value.isprintable()
    ):
        raise ValueError(
            "expected the name of a metric in the jobs' `result {json}` line, such as "
            f'"val_acc" (printable, at most {MAX_METRIC_CHARS} characters), '
            f"found {describe(value)}"
        )
    return value


def _check_goal(value: Any) -> Goal:
    if value == "max":
        return "max"
    if value == "min":
        return "min"
    raise ValueError(
        f'expected "max" (larger is better) or "min" (smaller is better), found {describe(value)}'
    )


def _param_value(text: str) -> str:
    """A value cut to MLflow's limit on a param's value, saying so."""
    if len(text) <= MLFLOW_MAX_PARAM_VALUE:
        return text
    note = " … (cut to MLflow's limit)"
    return text[: MLFLOW_MAX_PARAM_VALUE - len(note)] + note


def _check_description(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, found {describe(value)}")
    return value


_DEFAULT_HINTS = {
    key: f"{key} cannot have a default; set it in each [[jobs]] or [[sweeps]] table"
    for key in ("name", "command", "repeat", "grid")
}
_TOP_HINTS = {
    key: f"unknown key; {key} belongs in a [[jobs]] or [[sweeps]] table"
    + (", or in [defaults]" if key in DEFAULT_KEYS else "")
    for key in SWEEP_KEYS
    if key not in TOP_KEYS
}
_TOP_HINTS["grid"] = "unknown key; grid belongs in a [[sweeps]] table"
_JOB_HINTS = {"grid": "unknown key; a grid is only allowed in [[sweeps]] tables"}
