"""What a job asks for beyond its resources, as Slurm and pueue users spell it (issue 41, item 5):
a begin time (`sbatch --begin`, `pueue add --delay`), a comment (`sbatch --comment`, pueue's
labels), its place in an array and the array's throttle (`sbatch --array 0-9%2`), and the
dependencies beside `after` (afterok): `after_any` (Slurm's afterany) and `after_notok`
(afternotok). Pure checks and parsing; `JobSpec` (core/jobs.py) holds the fields."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import msgspec

from gpudesk.text import one_line_refusal

MAX_COMMENT_LEN = 1000
MAX_ARRAY_TASKS = 10_000  # as many jobs as one submit request may carry
MAX_ARRAY_INDEX = 4_000_000  # Slurm's MaxArraySize is at most 4,000,001
# A begin time more than this far ahead is a typo (a year written wrong), not a plan.
MAX_BEGIN_AHEAD_S = 366 * 86400.0

# sbatch --begin's units after now+N (seconds when none is given)
TIME_UNITS = {
    **dict.fromkeys(("", "s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86400.0),
}
_RELATIVE = re.compile(r"(?:now)?\s*\+\s*(\d+(?:\.\d+)?)\s*([a-z]*)|now")
CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[t ](\d{1,2}):(\d{2})(?::(\d{2}))?)?")
_ARRAY = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")

# a JobSpec field's option where the two names differ (submit's and edit's)
SPEC_OPTIONS = {
    "memory_gb": "--mem",
    "sm_pct": "--sm",
    "max_attempts": "--max-attempts",
    "time_limit_s": "--time",
    "preempt_signal": "--preempt-signal",
    "preempt_grace_s": "--preempt-grace",
    "begin_at": "--begin",
    "array_task": "--array",
    "array_limit": "--array",
    "array_job": "--array",
}


def option_of(field: str) -> str:
    """The option that gives a JobSpec field: "--mem" for memory_gb."""
    return SPEC_OPTIONS.get(field, f"--{field.replace('_', '-')}")


BEGIN_FORMS = (
    "now+90s, now+10min, +2h, now+1day (Slurm's units; a bare number is seconds), "
    "HH:MM[:SS] (today, or tomorrow once that time has passed, as sbatch takes it), "
    "YYYY-MM-DD[THH:MM[:SS]] (a time past means now), today, tomorrow, midnight or noon, "
    "in the local time zone"
)


def parse_begin(text: str, now: float) -> float:
    """The wall-clock time (seconds since the epoch) `text` names, as sbatch --begin reads it:
    `now+90s`, `+2h`, `HH:MM[:SS]`, `YYYY-MM-DD[THH:MM[:SS]]`, `today`, `tomorrow`,
    `midnight`, `noon`, in the local time zone. Raises ValueError saying what is taken."""
    value = text.strip().lower()
    local = dt.datetime.fromtimestamp(now).astimezone()
    today = local.replace(hour=0, minute=0, second=0, microsecond=0)
    try:
        if match := _RELATIVE.fullmatch(value):
            count, unit = match.group(1), match.group(2) or ""
            if count is None:
                return now
            if unit not in TIME_UNITS:
                raise ValueError(f"{unit!r} is not a unit (s, min, h, days, weeks)")
            return now + float(count) * TIME_UNITS[unit]
        named = {
            "today": today,
            "midnight": today + dt.timedelta(days=1),
            "tomorrow": today + dt.timedelta(days=1),
            "noon": today.replace(hour=12),
        }
        if value in named:
            moment = named[value]
            if value == "noon" and moment.timestamp() <= now:
                moment += dt.timedelta(days=1)
            return moment.timestamp()
        if match := CLOCK.fullmatch(value):
            hour, minute, second = (int(g or 0) for g in match.groups())
            moment = _at(today, hour, minute, second)
            if moment.timestamp() <= now:  # sbatch: a time of day already past is tomorrow's
                moment = _at(today + dt.timedelta(days=1), hour, minute, second)
            return moment.timestamp()
        if match := _DATE.fullmatch(value):
            year, month, day, hour, minute, second = (int(g or 0) for g in match.groups())
            naive = dt.datetime(year, month, day, hour, minute, second)
            return naive.astimezone().timestamp()  # the local zone, its DST on that day
    except (ValueError, OverflowError) as exc:
        detail = f" ({exc})" if str(exc) else ""
        raise ValueError(f"{text!r} is not a begin time{detail}; give {BEGIN_FORMS}") from None
    raise ValueError(f"{text!r} is not a begin time; give {BEGIN_FORMS}")


def _at(day: dt.datetime, hour: int, minute: int, second: int) -> dt.datetime:
    """`day` at that time of day, in the local zone as it is on that day."""
    naive = dt.datetime(day.year, day.month, day.day, hour, minute, second)
    return naive.astimezone()


def check_begin_at(value: Any) -> float:
    """A begin time on the wire: seconds since the epoch (a past one means now)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected seconds since the epoch, found {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"expected seconds since the epoch, found {value!r}")
    import time

    if number > time.time() + MAX_BEGIN_AHEAD_S:
        raise ValueError("a begin time is at most 366 days ahead")
    return number


def check_comment(value: Any) -> str:
    """A job's comment or label: text of at most MAX_COMMENT_LEN characters, with no control
    character (it is shown in tables and on terminals: an escape sequence is refused, not kept)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, found {value!r}")
    text = value.strip()
    if len(text) > MAX_COMMENT_LEN:
        raise ValueError(f"expected at most {MAX_COMMENT_LEN} characters, found {len(text)}")
    refusal = one_line_refusal(text, "a comment", "write it on one line of plain text")
    if refusal is not None:
        raise ValueError(refusal)
    return text


MAX_NOTIFY_LEN = 4096


def check_notify(value: Any) -> str:
    """A job's --notify: one shell command line (run by /bin/sh -c as the job's owner when the
    job ends), no control character but a tab."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a shell command, found {value!r}")
    if len(value) > MAX_NOTIFY_LEN:
        raise ValueError(f"expected at most {MAX_NOTIFY_LEN} characters, found {len(value)}")
    refusal = one_line_refusal(value, "a command to notify with", "give one line", allowed="\t")
    if refusal is not None:
        raise ValueError(refusal)
    return value


def check_array_limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ARRAY_TASKS:
        raise ValueError(f"expected a whole number from 1 to {MAX_ARRAY_TASKS}, found {value!r}")
    return value


def check_array_task(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ARRAY_INDEX:
        raise ValueError(f"expected a whole number from 0 to {MAX_ARRAY_INDEX}, found {value!r}")
    return value


def check_array_job(value: Any) -> int:
    """The array's first job: its id, or -k for the k-th job of the same request."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value == 0
        or not -MAX_ARRAY_TASKS <= value < 2**63
    ):
        raise ValueError(
            f"expected a job id (or -k: the k-th job of the request), found {str(value)[:40]}"
        )
    return value


class ArrayRange(msgspec.Struct, frozen=True):
    """`--array 0-9%2`: the task indices, and at most how many run at once (None: no limit)."""

    tasks: tuple[int, ...]
    limit: int | None

    @property
    def text(self) -> str:
        """The indices as Slurm prints them: `0-9%2`, `1,3,5`."""
        tasks = self.tasks
        whole = tasks == tuple(range(tasks[0], tasks[-1] + 1))
        shown = f"{tasks[0]}-{tasks[-1]}" if whole and len(tasks) > 1 else ",".join(map(str, tasks))
        return shown + (f"%{self.limit}" if self.limit is not None else "")


ARRAY_FORMS = "0-9, 1,3,5, 0-20:4 (every 4th), each optionally with %N: at most N running at once"


def parse_array(text: str) -> ArrayRange:
    """sbatch --array's indices: `0-9`, `1,3,5-7`, `0-15:4`, then `%N` for the throttle."""
    spec, sep, limit_text = text.strip().partition("%")
    tasks: list[int] = []
    for part in spec.split(","):
        match = _ARRAY.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"{text!r} is not an array's indices; give {ARRAY_FORMS}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if last > MAX_ARRAY_INDEX:
            raise ValueError(f"{part.strip()!r}: an index is 0 to {MAX_ARRAY_INDEX}")
        if last < first or step < 1:
            raise ValueError(f"{part.strip()!r}: a range goes up (first-last, step 1 or more)")
        if (last - first) // step + 1 + len(tasks) > MAX_ARRAY_TASKS:
            raise ValueError(f"an array has at most {MAX_ARRAY_TASKS} tasks")
        tasks.extend(range(first, last + 1, step))
    limit: int | None = None
    if sep:
        if not limit_text.strip().isdigit() or not 1 <= int(limit_text) <= MAX_ARRAY_TASKS:
            raise ValueError(
                f"%{limit_text}: the throttle is a whole number from 1 to {MAX_ARRAY_TASKS} (%2)"
            )
        limit = int(limit_text)
    return ArrayRange(tuple(sorted(set(tasks))), limit)


# The JobSpec fields these are (issue 41 item 5), each's check: a request and the store carry
# them only where set (JobSpec.to_dict), so a job using none is one an older engine takes.
SUBMIT_OPTION_CHECKS = {
    "begin_at": check_begin_at,
    "comment": check_comment,
    "array_job": check_array_job,
    "array_task": check_array_task,
    "array_limit": check_array_limit,
    "notify": check_notify,
}
SUBMIT_OPTION_FIELDS = (*SUBMIT_OPTION_CHECKS, "after_any", "after_notok")
