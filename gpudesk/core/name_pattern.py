"""A job-name pattern (`gpudesk queue --name 'lr-*'`, `cancel --name`, the `jobs` request's
`name`): a shell pattern as Python's `fnmatch.fnmatchcase` reads it, case-sensitive on every
platform. `*` any run of characters, `?` one, `[seq]` / `[!seq]` one in (not in) the set; a `[`
with no `]` after it is itself; no escapes.

The store filters by it in SQL (engine/store/listing.py), so that a listing's pages and count are
of the matching jobs only. SQLite's GLOB reads `*`, `?` and a pattern's other characters as
fnmatchcase does (case-sensitive, one character per code point), but not its sets: `[!a]` is
`[^a]` there, `[^a]` a set holding `^`, an unclosed `[` matches nothing, and their ranges'
corners differ. So `sqlite_glob` gives GLOB's exact words for a pattern without a set, and for one
with sets a GLOB every match also matches (each set as `?`), which the store pairs with
fnmatchcase itself, called only on the rows the GLOB lets through.
"""

from __future__ import annotations

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


def sqlite_glob(pattern: str) -> tuple[str, bool]:
    """`pattern` for SQLite's GLOB, and whether that GLOB is exact (matches the names
    fnmatchcase does, no more). Not exact where the pattern has a set: each set is then `?`
    (one character, as a set always is), a superset the caller narrows with fnmatchcase."""
    out: list[str] = []
    exact = True
    index = 0
    while index < len(pattern):
        char = pattern[index]
        end = _set_end(pattern, index) if char == "[" else None
        if end is not None:
            out.append("?")
            exact = False
            index = end + 1
            continue
        # an unclosed `[` is a character to fnmatch; to GLOB, a set holding it is
        out.append("[[]" if char == "[" else char)
        index += 1
    return "".join(out), exact
