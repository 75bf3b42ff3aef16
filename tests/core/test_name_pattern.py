"""gpudesk.core.name_pattern: the GLOB the store asks SQLite for a job-name pattern matches
every name fnmatchcase matches, and no other where it says it is exact; a pattern is refused in
one line where it could never match a job's name. SQLite itself answers the GLOBs here."""

from __future__ import annotations

import fnmatch
import sqlite3
from contextlib import closing

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudesk.core.name_pattern import MAX_NAME_PATTERN, name_pattern_refusal, sqlite_glob
from gpudesk.core.wire.requests import ArgsError, JobsArgs, decode_args

# the characters where GLOB and fnmatch part ways, and a few plain ones (é: two bytes, one char)
PIECES = st.text(alphabet="abz09[]!^-*?\\é", min_size=0, max_size=8)


@settings(max_examples=3000, deadline=None)
@given(pattern=PIECES.filter(bool), name=PIECES.filter(bool))
def test_the_glob_matches_every_match_and_only_them_where_exact(pattern: str, name: str) -> None:
    glob, exact = sqlite_glob(pattern)
    with closing(sqlite3.connect(":memory:")) as conn:
        globbed = bool(conn.execute("SELECT ? GLOB ?", (name, glob)).fetchone()[0])
    matched = fnmatch.fnmatchcase(name, pattern)
    assert globbed or not matched, f"GLOB {glob!r} misses {name!r}"
    if exact:
        assert globbed == matched, f"GLOB {glob!r} is not {pattern!r} for {name!r}"


@pytest.mark.parametrize(
    ("pattern", "glob", "exact"),
    [
        ("sweep-*", "sweep-*", True),
        ("lr-?", "lr-?", True),
        ("a[b", "a[[]b", True),  # an unclosed `[` is itself
        ("a]b", "a]b", True),
        ("lr-[0-9]?", "lr-[0-9]?", True),  # a plain set: GLOB's own
        ("[!a-cx]y", "[^a-cx]y", True),
        ("[z-a]x", "?x", False),  # a range downwards: fnmatch's own reading
        ("[^a]x", "?x", False),
        ("[a-]x", "?x", False),
        ("[]a]*", "?*", False),  # a `]` first is the set's own
        ("[!]]", "?", False),
        ("[é]", "?", False),
    ],
)
def test_a_pattern_as_glob(pattern: str, glob: str, exact: bool) -> None:
    assert sqlite_glob(pattern) == (glob, exact)


def test_a_pattern_that_could_never_match_a_name_is_refused_in_one_line() -> None:
    assert name_pattern_refusal("lr-*") is None
    assert name_pattern_refusal("é[0-9]?") is None
    for bad, words in [
        ("", "cannot be empty"),
        ("a\nb", "(found \\x0a)"),
        ("\x1b[2J", "(found \\x1b)"),
        ("a\u200bb", "(found \\u200b)"),
        ("x" * (MAX_NAME_PATTERN + 1), f"at most {MAX_NAME_PATTERN:,} characters"),
        ("\udce9", "must be text (UTF-8)"),
    ]:
        refusal = name_pattern_refusal(bad)
        assert refusal is not None and words in refusal, refusal
        assert "\n" not in refusal and "\x1b" not in refusal


def test_jobs_args_take_a_name_and_leave_it_out_when_absent() -> None:
    args = decode_args(JobsArgs, {"name": "lr-*", "states": ["queued"]})
    assert isinstance(args, JobsArgs) and args.name == "lr-*" and args.text_problem() is None
    absent = decode_args(JobsArgs, {})
    assert isinstance(absent, JobsArgs) and absent.name is None
    # an older client's request has no `name`; a newer client's without one sends none
    assert b"name" not in msgspec.json.encode(JobsArgs(group="g"))
    with pytest.raises(ArgsError, match="'name' must be a name pattern of at most 1000"):
        decode_args(JobsArgs, {"name": "x" * (MAX_NAME_PATTERN + 1)})
    with pytest.raises(ArgsError, match="'name'"):
        decode_args(JobsArgs, {"name": ["lr-*"]})
    bad = decode_args(JobsArgs, {"name": "lr-\x07"})
    assert isinstance(bad, JobsArgs)
    assert bad.text_problem() == (
        "'name': a name pattern cannot contain control characters or invisible formatting "
        "(found \\x07): a job's name never holds one, so it could match nothing"
    )
