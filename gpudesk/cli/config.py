"""The user's defaults for command options: `~/.config/gpudesk/config.toml` (platformdirs'
user config folder; `GPUDESK_CONFIG=FILE` names another, `GPUDESK_CONFIG=` none).

One table per command, keyed by its name as typed (`[submit]`, `[top]`, `[engine.start]`), each
key an option's long name with or without dashes (`time = "2h"`, `max-attempts = 2`):

    [submit]
    time = "4h"          # every job gets a time limit unless --time says otherwise
    max_attempts = 2
    [queue]
    me = true
    [top]
    interval = 2

Values go to click as the option's default (`default_map`), so the command line always wins
and a value is checked as if typed (a bad one's paragraph names the file, its line, the
table and key: `default_source`), as is one that gpudesk's own checks refuse. A value of the
wrong kind for its option (`after = 5` for a repeatable one), one its number, range or choice
refuses (`mem = "lots"`, `interval = 0`: gpudesk.cli.config_values), an unknown command or
option, is a line naming the file, its line, the table and the key, every one of both files
said at once (one paragraph: no fix, run, fix, run); a file that is not TOML
or cannot be read is one paragraph naming it. Either way the command does not run.

Under it lies the site's file, `/etc/gpudesk/config.toml` (gpudesk.cli.site_config), with the
same tables: gpudesk's own defaults < the site's < the user's < the command line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from gpudesk.cli.common import CliError
from gpudesk.cli.config_values import expected_value, refused_value
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.core.field_checks import describe
from gpudesk.named_file import FileTooLarge, read_named
from gpudesk.text import quoted

CONFIG_ENV = "GPUDESK_CONFIG"
DefaultMap = dict[str, Any]
Problems = list[tuple[Path, str]]  # each problem found in a config file, and the file


def config_path() -> Path | None:
    """The config file to read (it may not exist), or None when GPUDESK_CONFIG is empty."""
    named = os.environ.get(CONFIG_ENV)
    if named is not None:
        return Path(named).expanduser() if named.strip() else None
    from platformdirs import user_config_dir

    return Path(user_config_dir("gpudesk")) / "config.toml"


# The most a config file may hold, as a profile (assumption: a few KiB are ever written)
MAX_CONFIG_BYTES = 1024 * 1024
SITE = "the site config file"  # how its messages name the site's file
SITE_HINT = " (the site's defaults for every user: its admin can fix it)"


def _read(path: Path) -> tuple[dict[str, Any], str]:
    """The user's config file's tables and text ({} and "" when there is none)."""
    data = _user_bytes(path)
    return ({}, "") if data is None else (_parse(path, data), data.decode("utf-8"))


def _user_bytes(path: Path) -> bytes | None:
    """The user's config file's bytes, None when there is none. One that cannot be read (its
    mode, or a home folder no one may enter: then whether there is one is not known either) is
    an error, not skipped: the command would run without the defaults it sets (a time limit,
    say) and no one would know; GPUDESK_CONFIG= runs without it."""
    try:
        return read_named(path, MAX_CONFIG_BYTES, "a config file")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise CliError(
            f"cannot read the config file {path}: {exc.strerror or exc}. Make it readable, "
            f"or run without it: {CONFIG_ENV}= gpudesk …",
            EXIT_USAGE,
        ) from None
    except FileTooLarge as exc:
        raise CliError(f"cannot read the config file {path}: {exc}", EXIT_USAGE) from None


def read_site(path: Path) -> tuple[dict[str, Any], str]:
    """The site config file's tables and text ({} and "" when there is none), read only if it
    can be trusted (gpudesk.cli.site_config)."""
    data = _site_bytes(path)
    if data is None:
        return {}, ""
    return _parse(path, data, SITE, SITE_HINT), data.decode("utf-8")


def _site_bytes(path: Path) -> bytes | None:
    from gpudesk.cli.site_config import SiteConfigRefused, read_site_bytes

    try:
        return read_site_bytes(path)
    except SiteConfigRefused as exc:
        raise CliError(
            f"{SITE} {path} is not read: {exc}. gpudesk reads it only where no one but root "
            f"could have written it, and does not run without it{SITE_HINT}",
            EXIT_USAGE,
        ) from None
    except OSError as exc:
        raise CliError(f"cannot read {SITE} {path}: {exc.strerror or exc}", EXIT_USAGE) from None


def _parse(
    path: Path, data: bytes, what: str = "the config file", hint: str = ""
) -> dict[str, Any]:
    from gpudesk.toml_lines import tomllib

    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CliError(f"{what} {path} is not UTF-8 text{hint}", EXIT_USAGE) from None
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"{what} {path} is not valid TOML: {exc}{hint}", EXIT_USAGE) from None
    except RecursionError:  # tomllib recurses once per level of nesting: `a = [[[[…`
        raise CliError(
            f"{what} {path} is not valid TOML: arrays or inline tables are nested too deeply{hint}",
            EXIT_USAGE,
        ) from None
    except ValueError as exc:  # tomllib lets Python's int() digit limit through as ValueError
        reason = (
            "a number is too long (integers must fit in 64 bits)"
            if "integer string conversion" in str(exc)
            else str(exc)
        )
        raise CliError(f"{what} {path} is not valid TOML: {reason}{hint}", EXIT_USAGE) from None


class ConfigOrigin(msgspec.Struct, frozen=True):
    """Where a config file set an option's default: `[submit] time`, on a line of `path`."""

    path: Path
    table: str  # as its header names it: "submit", "engine.stop"
    key: str  # as the file writes it: "max-attempts" or "max_attempts"
    line: int | None

    def __str__(self) -> str:
        """`FILE:3: [submit] time`, as a profile's problems are said."""
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: [{self.table}] {self.key}"


def default_source(command: Any, words: list[str], param: Any) -> ConfigOrigin | None:
    """Which config file set the default of option `param` (a click parameter) of the command
    `words` (`["engine", "start"]`) in `command`, the whole click tree, and where in it: the
    user's file where it sets it (it wins), else the site's; None where neither does. Read
    again, for an error's words only."""
    from gpudesk.cli.site_config import site_config_path
    from gpudesk.toml_lines import KeyLines

    found = None
    for path, read in ((site_config_path(), _site_bytes), (config_path(), _user_bytes)):
        data = read(path) if path is not None and os.path.lexists(path) else None
        if path is None or data is None:
            continue
        document = _parse(path, data)
        table: Any = defaults_of(command, document, path, data.decode("utf-8"))
        raw: Any = document
        for word in words:
            table = table.get(word) if isinstance(table, dict) else None
            raw = raw.get(word) if isinstance(raw, dict) else None
        if isinstance(table, dict) and param.name in table:
            found = (path, data, raw)
    if found is None:
        return None
    path, data, raw = found
    names = {opt.lstrip("-").replace("-", "_") for opt in param.opts if opt.startswith("--")}
    # the key the value was taken from: the last of those naming the option (as _fill reads)
    key = [k for k in raw if k.replace("-", "_") in names][-1]
    line = KeyLines(data.decode("utf-8")).line((*words, key))
    return ConfigOrigin(path, ".".join(words), key, line)


def default_map(command: Any, path: Path | None = None) -> DefaultMap:
    """click's default_map for `command` (the root click group) from the config file, every
    command and option in it checked to exist; {} without a file."""
    path = path if path is not None else config_path()
    if path is None:
        return {}
    document, text = _read(path)
    return defaults_of(command, document, path, text)


def defaults_of(command: Any, document: dict[str, Any], path: Path, text: str = "") -> DefaultMap:
    """click's default_map for `command` from a config file's tables (read from `path`; its
    `text` places a wrong value at its line). Every problem in the file is said at once."""
    problems: Problems = []
    result = _defaults_of(command, document, path, text, problems)
    _refuse(problems)
    return result


def _defaults_of(
    command: Any, document: dict[str, Any], path: Path, text: str, problems: Problems
) -> DefaultMap:
    """As defaults_of, each problem added to `problems` (one line, naming the file, its line,
    the table and the key), the reading going on: a checker that stops at the first makes the
    user fix, run, fix and run again."""
    result: DefaultMap = {}
    lines = _Lines(path, text)
    for section, table in document.items():
        if not isinstance(table, dict):
            problems.append(
                (
                    path,
                    f"{lines.at((section,))}: {section} = … is not a table; write options under "
                    '[COMMAND], e.g. [submit] then time = "2h"',
                )
            )
            continue
        _fill(command, [section], table, result, lines, problems)
    return result


def _refuse(problems: Problems) -> None:
    """One paragraph for every problem found, one a line; nothing when there is none."""
    if len(problems) == 1:
        raise CliError(problems[0][1], EXIT_USAGE)
    if problems:
        files = "files" if len({path for path, _ in problems}) > 1 else "file"
        said = "\n".join(f"  {problem}" for _, problem in problems)
        raise CliError(f"{len(problems)} problems in the config {files}:\n{said}", EXIT_USAGE)


class _Lines(msgspec.Struct):
    """Where a config file writes a key: `FILE:3` (the file alone when its text is not known)."""

    path: Path
    text: str

    def at(self, key: tuple[str, ...]) -> str:
        from gpudesk.toml_lines import KeyLines

        line = KeyLines(self.text).line(key) if self.text else None
        return f"{self.path}:{line}" if line else str(self.path)


def layered(under: DefaultMap, over: DefaultMap) -> DefaultMap:
    """Two default maps as one, `over`'s values winning, table by table (a user's `[submit]
    time` over the site's, the site's `[submit] mem` kept)."""
    result = dict(under)
    for key, value in over.items():
        below = result.get(key)
        is_table = isinstance(value, dict) and isinstance(below, dict)
        result[key] = layered(below, value) if is_table else value  # type: ignore[arg-type]
    return result


def _fill(
    group: Any,
    words: list[str],
    table: dict[str, Any],
    into: DefaultMap,
    lines: _Lines,
    problems: Problems,
) -> None:
    # typer may carry its own copy of click, so parameters are told apart by what they are,
    # not by click's classes
    name = words[-1]
    commands = getattr(group, "commands", {})
    command = commands.get(name)
    where = ".".join(words)
    if command is None:
        known = ", ".join(sorted(commands)) or "none"
        problems.append(
            (
                lines.path,
                f"{lines.at(tuple(words))}: [{where}]: gpudesk has no command {quoted(name)} here "
                f"(it has: {known})",
            )
        )
        return
    own: DefaultMap = {}
    into[name] = own
    options = {
        opt.lstrip("-").replace("-", "_"): param
        for param in command.params
        if getattr(param, "param_type_name", "") == "option"
        for opt in param.opts
        if opt.startswith("--")
    }
    for key, value in table.items():
        if isinstance(value, dict) and hasattr(command, "commands"):
            _fill(command, [*words, key], value, own, lines, problems)
            continue
        param = options.get(key.replace("-", "_"))
        said = f"{lines.at((*words, key))}: [{where}] {key}"
        if param is None or param.name is None:
            known = ", ".join(sorted(k.replace("_", "-") for k in options)) or "none"
            problems.append(
                (
                    lines.path,
                    f"{said}: `gpudesk {' '.join(words)}` has no option --{key.replace('_', '-')} "
                    f"(it has: {known})",
                )
            )
            continue
        expected = expected_value(param, value)
        if expected is not None:  # click would iterate or convert it, and fail or truncate
            problems.append((lines.path, f"{said}: expected {expected}, found {describe(value)}"))
            continue
        if refused := refused_value(param, value):
            problems.append((lines.path, f"{said}: {refused}"))
            continue
        own[param.name] = value


def option_defaults(command: Any, every_command: Callable[[], Any] | None = None) -> DefaultMap:
    """The option defaults of the site's and the user's config files, the user's winning,
    checked against `command` (the click tree this run uses), or against `every_command()`
    when `command` holds only some commands and a file names one it lacks."""
    from gpudesk.cli.site_config import site_config_path

    files: list[tuple[Path, dict[str, Any], str]] = []
    site = site_config_path()
    if site is not None and os.path.lexists(site):
        files.append((site, *read_site(site)))
    user = config_path()
    if user is not None:  # read, not asked whether it exists: see _user_bytes
        files.append((user, *_read(user)))
    named = {section for _, document, _ in files for section in document}
    if every_command is not None and not named <= set(getattr(command, "commands", {})):
        command = every_command()
    result: DefaultMap = {}
    problems: Problems = []  # the site's and the user's, said together
    for path, document, text in files:
        result = layered(result, _defaults_of(command, document, path, text, problems))
    _refuse(problems)
    return result
