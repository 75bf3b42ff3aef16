"""Reading `profile.toml`: parse, validate and expand a profile into job specs.

Every user-caused failure becomes a `ProfileError` listing *all* the problems found, each with
the file, the line, the key path (``jobs[2].gpus``) and what was expected versus found. Field
values are checked by the shared validators in `gpudesk.core.jobs` and `gpudesk.core.station`.

Placeholders: ``{repeat}`` (the 1-based repeat index) is substituted in [[jobs]]; in [[sweeps]]
every grid parameter is too. They are substituted in command arguments (or the shell string),
in the job's own ``env`` values and ``workdir``, and in a name that contains ``{``. Values
inherited from [defaults] are copied verbatim. ``${NAME}`` (shell syntax) is never touched.
Sweeps expand grid-major (first parameter slowest) with the repeat index varying fastest.

This module reads the file; `model` is what a profile reads as, `values` the keys and their
checks, `problems` the record of what is wrong, `tables` the profile's own tables, `entries`
its [[jobs]] and [[sweeps]], `build` the whole document read and expanded.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import stat
from pathlib import Path
from typing import Any

from gpudesk.examples import bundled
from gpudesk.named_file import FileTooLarge, not_utf8, read_named, too_large
from gpudesk.profile.build import _Builder
from gpudesk.profile.model import (
    MAX_JOBS,
    MAX_PROFILE_BYTES,
    DatasetConfig,
    Problem,
    Profile,
    ProfileError,
    ReportConfig,
)
from gpudesk.profile.values import _render_key
from gpudesk.text import quoted
from gpudesk.toml_lines import Key, KeyLines, tomllib

__all__ = [
    "MAX_JOBS",
    "MAX_PROFILE_BYTES",
    "DatasetConfig",
    "Problem",
    "Profile",
    "ProfileError",
    "ReportConfig",
    "load_profile",
    "parse_profile",
    "workdir_problems",
]


_TOML_POSITION = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")
_INT64 = (-(2**63), 2**63 - 1)


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and parse a profile file. Raises ProfileError for anything the user can fix.

    A path that does not exist but names a bundled example (`profiles/quickstart.toml`,
    `quickstart`) reads that example: installed from a wheel, the README's commands work in any
    folder. Its jobs run in the current folder, not inside the installed package; so do those
    of a profile read from a pipe or a device (`gpudesk run <(…)`: `Profile.streamed`)."""
    if not os.fspath(path):  # (not the current folder, as Path("") would make it)
        raise _file_error(
            "''",
            "the profile's name is empty: give the path of a profile .toml file, or the name of "
            "a bundled example (quickstart)",
        )
    example = bundled(path, "profiles")
    if example is not None:
        loaded = parse_profile(example.read_bytes(), example, base_dir=Path.cwd())
        return dataclasses.replace(loaded, bundled=True)
    shown = os.fsdecode(path)
    streamed = _streamed(path)
    try:
        data = read_named(path, MAX_PROFILE_BYTES, "a profile")
    except IsADirectoryError:
        raise _file_error(shown, "is a directory; give the path of a profile .toml file") from None
    except FileTooLarge as exc:
        raise _file_error(shown, str(exc)) from None
    except FileNotFoundError:
        raise _file_error(shown, _missing_file_message(shown)) from None
    except PermissionError:
        raise _file_error(shown, "permission denied: cannot read the file") from None
    except OSError as exc:
        raise _file_error(shown, f"cannot read the file: {exc.strerror or exc}") from None
    except ValueError:  # e.g. a NUL character in the path
        raise _file_error(shown, "is not a valid file path") from None
    if not streamed:
        return parse_profile(data, path)
    return dataclasses.replace(parse_profile(data, path, base_dir=Path.cwd()), streamed=True)


def _streamed(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a pipe or a device rather than a regular file (asked before it is
    read: a pipe's end is then still there to be asked of). Its jobs run in the current
    folder, not in its folder (/dev/fd), where a job's relative file cannot be written."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):  # reading it says why
        return False


def workdir_problems(profile: Profile) -> ProfileError | None:
    """The working directories the profile names that are missing or are not directories,
    each at the line that names it; None where there is none. For a profile whose jobs run on
    this machine, asked by the CLI of the user who submits them, before anything is submitted
    (a job would only fail at its start). Never in a system engine's daemon: it runs as root,
    and her folders are hers to look at (gpudesk.core.jobs.workdir_problem). The runner checks
    again when each job starts."""
    from gpudesk.core.jobs import workdir_problem

    problems = []
    for named in profile.workdirs:
        problem = workdir_problem(named.path)
        if problem is not None:
            problems.append(dataclasses.replace(named.where, message=problem))
    return ProfileError(problems) if problems else None


def parse_profile(
    data: bytes, path: str | os.PathLike[str], base_dir: Path | None = None
) -> Profile:
    """Parse profile bytes; `path` names the file in messages and anchors relative workdirs
    (`base_dir`, when given, anchors them instead)."""
    shown = os.fsdecode(path)
    try:
        if len(data) > MAX_PROFILE_BYTES:
            raise _file_error(shown, _too_big(len(data)))
        text = _decode(bytes(data), shown)
        document = _read_toml(text, shown)
        _check_integer_range(document, shown, text)
        builder = _Builder(shown, Path(os.path.abspath(shown)), KeyLines(text), base_dir)
        return builder.build(document)
    except RecursionError:
        raise _file_error(shown, "the profile is nested too deeply to read") from None


# --- reading the bytes -------------------------------------------------------------------------


def _file_error(shown: str, message: str, line: int | None = None) -> ProfileError:
    return ProfileError([Problem(shown, line, "", message)])


def _too_big(n: int) -> str:
    return too_large(n, MAX_PROFILE_BYTES, "a profile")


def _missing_file_message(shown: str) -> str:
    if os.path.islink(shown):
        try:
            target = os.readlink(shown)
        except (OSError, ValueError):
            return "is a symbolic link whose target is missing"
        return f"is a symbolic link whose target is missing ({quoted(target)})"
    message = "no such file"
    folder, base = os.path.split(shown)
    try:
        names = [n for n in os.listdir(folder or ".") if n.endswith(".toml")]
    except (OSError, ValueError):
        return message
    if f"{base}.toml" in names:
        guess = f"{base}.toml"
    else:
        others = [n for n in names if n != base]  # never the name itself (a link to nothing)
        close = difflib.get_close_matches(base, others, n=1)
        if not close:
            return message
        guess = close[0]
    return f"{message}; did you mean {quoted(os.path.join(folder, guess))}?"


def _decode(data: bytes, shown: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _file_error(
            shown,
            f"the file is not valid UTF-8: {not_utf8(exc)}; save the profile as UTF-8",
            data.count(b"\n", 0, exc.start) + 1,
        ) from None
    return text.removeprefix("\ufeff")  # tolerate a byte-order mark from Windows editors


def _read_toml(text: str, shown: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = _toml_error(exc, text)
        raise _file_error(shown, message, line) from None
    except RecursionError:
        message = "invalid TOML: arrays or inline tables are nested too deeply"
        raise _file_error(shown, message) from None
    except ValueError as exc:  # tomllib lets Python's int() limits through as plain ValueError
        if "integer string conversion" in str(exc):
            message = "invalid TOML: a number is too long (integers must fit in 64 bits)"
        else:
            message = f"invalid TOML: {exc}"
        raise _file_error(shown, message) from None


def _toml_error(exc: Exception, text: str) -> tuple[int | None, str]:
    raw = str(getattr(exc, "msg", None) or exc)
    line: int | None = getattr(exc, "lineno", None)
    column: int | None = getattr(exc, "colno", None)
    match = _TOML_POSITION.search(raw)
    if match:
        raw = raw[: match.start()]
        if match.group(1):
            line, column = int(match.group(1)), int(match.group(2))
        else:
            line = text.count("\n") + 1  # "at end of document"
            column = None
    where = f" (column {column})" if column is not None and line is not None else ""
    return line, f"invalid TOML{where}: {raw}"


def _check_integer_range(document: dict[str, Any], shown: str, text: str) -> None:
    """TOML integers are 64-bit; tomllib accepts longer hex/octal/binary ones. Refusing them here
    keeps huge ints away from validators and messages (str() of one can itself raise)."""
    bad: list[Key] = []
    stack: list[tuple[Key, Any]] = [((), document)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(((*key, k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*key, i), v) for i, v in enumerate(value))
        elif type(value) is int and not _INT64[0] <= value <= _INT64[1]:
            bad.append(key)
    if bad:
        locator = KeyLines(text)
        message = "integer out of range: TOML integers must fit in 64 bits"
        raise ProfileError(
            [Problem(shown, locator.line(k), _render_key(k), message) for k in sorted(bad, key=str)]
        )
