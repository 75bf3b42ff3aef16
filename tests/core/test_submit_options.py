"""sbatch's --begin and --array forms as gpudesk reads them, and the checks of the fields they
fill (gpudesk.core.submit_options), against a fixed clock in a fixed zone."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator

import pytest

from gpudesk.core.jobs import JobSpec, SpecError
from gpudesk.core.submit_options import check_comment, parse_array, parse_begin


@pytest.fixture
def in_paris(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    """Local time Europe/Paris; 'now' is 2026-12-01 10:00:00 there (09:00 UTC)."""
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield dt.datetime(2026, 12, 1, 9, 0, 0, tzinfo=dt.timezone.utc).timestamp()
    monkeypatch.delenv("TZ")
    time.tzset()


def test_relative_begin_times_count_from_now_in_slurms_units(in_paris: float) -> None:
    now = in_paris
    assert parse_begin("now", now) == now
    assert parse_begin("now+90", now) == now + 90  # seconds when no unit is given, as sbatch
    assert parse_begin("now+90s", now) == now + 90
    assert parse_begin("now+10min", now) == now + 600
    assert parse_begin("+2h", now) == now + 7200
    assert parse_begin("NOW + 1day", now) == now + 86400
    assert parse_begin("now+1weeks", now) == now + 7 * 86400


def test_absolute_begin_times_are_local_and_a_passed_time_of_day_is_tomorrows(
    in_paris: float,
) -> None:
    now = in_paris
    utc = dt.timezone.utc

    def at(*fields: int) -> float:
        return dt.datetime(*fields, tzinfo=utc).timestamp()

    assert parse_begin("14:30", now) == at(2026, 12, 1, 13, 30)  # Paris is UTC+1 in December
    assert parse_begin("09:15:30", now) == at(2026, 12, 2, 8, 15, 30)  # passed today: tomorrow
    assert parse_begin("2026-12-24T18:00", now) == at(2026, 12, 24, 17, 0)
    assert parse_begin("2026-07-01T18:00:00", now) == at(2026, 7, 1, 16, 0)  # summer time: +2
    assert parse_begin("2026-12-24", now) == at(2026, 12, 23, 23, 0)
    assert parse_begin("tomorrow", now) == at(2026, 12, 1, 23, 0)
    assert parse_begin("midnight", now) == at(2026, 12, 1, 23, 0)
    assert parse_begin("noon", now) == at(2026, 12, 1, 11, 0)


@pytest.mark.parametrize(
    "text", ["tomorow", "now+3parsecs", "25:00", "2026-13-01", "now-5min", "", "12:5"]
)
def test_a_bad_begin_time_says_what_is_taken(in_paris: float, text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a begin time.*now\+90s.*HH:MM"):
        parse_begin(text, in_paris)


def test_array_indexes_and_the_throttle_as_sbatch_takes_them() -> None:
    assert parse_array("0-9%2").tasks == tuple(range(10))
    assert parse_array("0-9%2").limit == 2
    assert parse_array("1,3,5-7").tasks == (1, 3, 5, 6, 7)
    assert parse_array("0-20:5").tasks == (0, 5, 10, 15, 20)
    assert parse_array("4").limit is None
    assert parse_array("0-9%2").text == "0-9%2"
    assert parse_array("1,3").text == "1,3"
    for bad in ("9-2", "a-b", "0-3%0", "0-3%x", "1,,2", "0-3:0", "0-99999999"):
        with pytest.raises(ValueError):
            parse_array(bad)


def test_a_comment_is_one_line_of_text() -> None:
    assert check_comment("  lr 3e-4, warm-up  ") == "lr 3e-4, warm-up"
    for bad in ("red\x1b[31m", "two\nlines", "c1\x9b", "x" * 1001, 5, "a\u202eb", "a\u2029b"):
        with pytest.raises(ValueError):
            check_comment(bad)


def test_names_comments_and_notify_commands_share_one_rule() -> None:
    from gpudesk.core.jobs import check_name
    from gpudesk.core.submit_options import check_notify

    for bad in ("\x07", "\x9b", "\u202e", "\u200f", "\u2028"):
        for check in (check_name, check_comment, check_notify):
            with pytest.raises(ValueError, match="control characters or invisible formatting"):
                check(f"a{bad}b")
    assert check_notify("notify-send\tdone") == "notify-send\tdone"  # a tab is a notify's own
    # ... and say it in one wording (gpudesk.text.one_line_refusal), each with what it is
    for check, what, why in (
        (check_name, "a name", "it is shown on one line of plain text"),
        (check_comment, "a comment", "write it on one line of plain text"),
        (check_notify, "a command to notify with", "give one line"),
    ):
        with pytest.raises(ValueError) as info:
            check("red\x1b[31m")
        assert str(info.value) == (
            f"{what} cannot contain control characters or invisible formatting (found \\x1b): {why}"
        )
        with pytest.raises(ValueError) as info:
            check("caf\udce9")  # the byte 0xE9 of a file name that is not UTF-8
        assert (  # the byte spelled as everywhere (not as Python's repr: 'caf\\\\xe9')
            str(info.value) == f"{what} must be text (UTF-8); 'caf\\xe9' holds bytes that are not"
        )


def test_the_spec_checks_each_new_field_by_its_name() -> None:
    base = {"name": "a", "command": ["true"]}
    spec = JobSpec.from_dict(
        {**base, "begin_at": 1.0, "comment": "x", "array_task": 3, "array_job": -1}
    )
    assert (spec.begin_at, spec.comment, spec.array_task, spec.array_job) == (1.0, "x", 3, -1)
    assert JobSpec.from_dict({**base, "after_any": [4], "after_notok": [5, 5]}).dependencies == (
        4,
        5,
    )
    for field, value in (
        ("begin_at", "soon"),
        ("begin_at", -1),
        ("begin_at", time.time() + 400 * 86400),
        ("comment", "\x07"),
        ("array_limit", 0),
        ("after_notok", [0]),
    ):
        with pytest.raises(SpecError) as caught:
            JobSpec.from_dict({**base, "array_task": 0, field: value})
        assert caught.value.key == field
    for key in ("array_job", "array_limit"):
        with pytest.raises(SpecError, match="needs array_task") as caught:
            JobSpec.from_dict({**base, key: 2 if key == "array_limit" else -1})
        assert caught.value.key == key
    assert os.environ.get("TZ") != "Europe/Paris"


def test_a_ref_of_digits_underscore_digits_is_an_arrays_task_and_never_a_name() -> None:
    """Slurm's JOBID_TASK (docs/jobs.md): `144_2` is task 2 of array 144; a task's name
    (`sw_0`) stays a name; a job may not be named so that a reference would read it as a
    task, as it may not be named all digits; a range of tasks is refused, saying why."""
    from gpudesk.core.field_checks import (
        array_task_ref,
        check_job_name,
        task_range_refs,
        task_range_refusal,
    )

    assert array_task_ref("144_2") == (144, 2)
    assert [array_task_ref(ref) for ref in ("sw_0", "144", "144_", "_2", "1_2_3", "١_٢")] == [
        None
    ] * 6
    assert array_task_ref("1" * 19 + "_2") is None  # past any id: a name that names no job
    assert task_range_refusal("sw_0") is None and task_range_refusal("144_2") is None
    assert "144_[0-2]: a range of an array's tasks names several jobs" in str(
        task_range_refusal("144_[0-2]")
    )
    # spelled out where a command acts on many (scancel 144_[0-2,5]), other refs as they are
    assert task_range_refs(["7", "144_[0-2,5]", "sw_0", "9_[0-8:4]"]) == [
        "7",
        "144_0",
        "144_1",
        "144_2",
        "144_5",
        "sw_0",
        "9_0",
        "9_4",
        "9_8",
    ]
    for bad in ("144_[0-2%2]", "144_[", "144_[x]", "144_[0-20000]", "144_[3-1]"):
        with pytest.raises(ValueError, match=r"144_\["):
            task_range_refs([bad])
    with pytest.raises(ValueError, match="at most 10,000 jobs are named at once"):
        task_range_refs(["1_[0-9999]", "2_[0]"])
    assert check_job_name("sw_0") == "sw_0"
    for name in ("144_2", "144_[0-2]"):
        with pytest.raises(ValueError, match="cannot read as an array's task"):
            check_job_name(name)


def test_an_arrays_id_among_the_dependencies_names_its_tasks_too() -> None:
    arrays = {144: {0: 144, 1: 145, 2: 146}}
    spec = JobSpec(name="total", command=("true",), after=(7, 144), after_any=(145,))
    tasks_of = lambda job_id: arrays.get(job_id, {})  # noqa: E731
    expanded = spec.with_array_tasks(tasks_of)
    assert (expanded.after, expanded.after_any) == ((7, 144, 145, 146), (145,))
    assert spec.with_array_tasks(tasks_of, ["after_any"]) is spec  # only the fields named
    many = {1: {task: 1 + task for task in range(10_001)}}
    with pytest.raises(SpecError, match="come to 10,001 jobs with their tasks"):
        JobSpec(name="x", command=("true",), after=(1,)).with_array_tasks(lambda i: many[i])
