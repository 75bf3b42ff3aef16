"""A job-name pattern (`gpudesk queue --name 'lr-*'`, `cancel --name`, the `jobs` request's
`name`): a shell pattern as Python's `fnmatch.fnmatchcase` reads it, case-sensitive on every
platform. `*` any run of characters, `?` one, `[seq]` / `[!seq]` one in (not in) the set; a `[`
with no `]` after it is itself; no escapes.

The store filters by it in SQL (engine/store/listing.py), so that a listing's pages and count are
of the matching jobs only. SQLite's GLOB reads `*`, `?` and a pattern's other characters as
fnmatchcase does (case-sensitive, one character per code point), but not all of its sets:
`[!a]` is `[^a]` there, `[^a]` a set holding `^`, an unclosed `[` matches nothing, and their
ranges' corners differ. So `sqlite_glob` gives GLOB's exact words for a pattern whose sets are
plain (ASCII letters, digits and upward ranges of them: `[0-9]`, `[!abc]`), and for one with
another set a GLOB every match also matches (that set as `?`), which the store pairs with
fnmatchcase itself, called only on the rows the GLOB lets through (a Python call a row: counting
100,000 names with `sweep1[0-9]*`, 73 ms so, 15 ms with GLOB's own words; docs/benchmarks.md,
"Session 54").
"""

from __future__ import annotations

import re

from gpudesk.text import one_line_refusal

# A name is at most 200 characters (core.field_checks.MAX_NAME_LEN); a pattern may spell each
# of them as a set, so it gets more room, yet a bounded one: GLOB's and fnmatch's work grows
# with it.
MAX_NAME_PATTERN = 1000


def name_pattern_refusal(pattern: str) -> str | None:
    """Why `pattern` cannot be a job-name pattern, one line naming the fault; None where it can."""
    if not pattern:
        return "a name pattern cannot be empty (a job's name never is): give one, e.g. 'lr-*'"
    if len(pattern) > MAX_NAME_PATTERN:
        return (
            f"a name pattern is at most {MAX_NAME_PATTERN:,} characters; this one has "
            f"{len(pattern):,}"
        )
    return one_line_refusal(
        pattern, "a name pattern", "a job's name never holds one, so it could match nothing"
    )


def _set_end(pattern: str, start: int) -> int | None:
    """The index of the `]` that closes the set opening at `pattern[start]` (a `[`), as
    fnmatch.translate finds it: a `!` then a `]` just after the `[` are the set's own; None
    where no `]` closes it (the `[` is then a character like any other)."""
    end = start + 1
    if end < len(pattern) and pattern[end] == "!":
        end += 1
    if end < len(pattern) and pattern[end] == "]":
        end += 1
    end = pattern.find("]", end)
    return None if end < 0 else end


# A set both read alike: ASCII letters and digits, and ranges of them (`a-z`, `0-9`)
_PLAIN_SET = re.compile(r"(?:[A-Za-z0-9](?:-[A-Za-z0-9])?)+", re.ASCII)
_RANGE = re.compile(r"([A-Za-z0-9])-([A-Za-z0-9])", re.ASCII)


def _plain_set(body: str) -> bool:
    """Is a set's body (inside its brackets, after its `!`) one GLOB reads as fnmatch does?
    Its ranges run upwards: fnmatch drops one that does not (`z-a`)."""
    return _PLAIN_SET.fullmatch(body) is not None and all(
        low <= high for low, high in _RANGE.findall(body)
    )


def sqlite_glob(pattern: str) -> tuple[str, bool]:
    """`pattern` for SQLite's GLOB, and whether that GLOB is exact (matches the names
    fnmatchcase does, no more). Not exact where the pattern has a set that is not plain
    (`_plain_set`): such a set is then `?` (one character, as a set always is), a superset the
    caller narrows with fnmatchcase."""
    out: list[str] = []
    exact = True
    index = 0
    while index < len(pattern):
        char = pattern[index]
        end = _set_end(pattern, index) if char == "[" else None
        if end is not None:
            body = pattern[index + 1 : end]
            negated = body.startswith("!")
            body = body[1:] if negated else body
            plain = _plain_set(body)
            out.append(f"[{'^' * negated}{body}]" if plain else "?")
            exact = exact and plain
            index = end + 1
            continue
        # an unclosed `[` is a character to fnmatch; to GLOB, a set holding it is
        out.append("[[]" if char == "[" else char)
        index += 1
    return "".join(out), exact
