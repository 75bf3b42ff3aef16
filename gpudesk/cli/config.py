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
and a value is checked as if typed. An unknown command or option, or a file that is not TOML,
is one paragraph naming the file and the key, and the command does not run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpudesk.cli.common import CliError
from gpudesk.cli.exit_codes import EXIT_USAGE

CONFIG_ENV = "GPUDESK_CONFIG"
DefaultMap = dict[str, Any]


def config_path() -> Path | None:
    """The config file to read (it may not exist), or None when GPUDESK_CONFIG is empty."""
    named = os.environ.get(CONFIG_ENV)
    if named is not None:
        return Path(named).expanduser() if named.strip() else None
    from platformdirs import user_config_dir

    return Path(user_config_dir("gpudesk")) / "config.toml"


def _read(path: Path) -> dict[str, Any]:
    from gpudesk.toml_lines import tomllib

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CliError(
            f"cannot read the config file {path}: {exc.strerror or exc}", EXIT_USAGE
        ) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CliError(f"the config file {path} is not UTF-8 text", EXIT_USAGE) from None
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"the config file {path} is not valid TOML: {exc}", EXIT_USAGE) from None
    except RecursionError:  # tomllib recurses once per level of nesting: `a = [[[[…`
        raise CliError(
            f"the config file {path} is not valid TOML: arrays or inline tables are nested too "
            "deeply",
            EXIT_USAGE,
        ) from None
    except ValueError as exc:  # tomllib lets Python's int() digit limit through as ValueError
        reason = (
            "a number is too long (integers must fit in 64 bits)"
            if "integer string conversion" in str(exc)
            else str(exc)
        )
        raise CliError(f"the config file {path} is not valid TOML: {reason}", EXIT_USAGE) from None


def sections(path: Path) -> list[str]:
    """The names of the file's top-level tables (the commands it sets options for)."""
    return list(_read(path))


def default_map(command: Any, path: Path | None = None) -> DefaultMap:
    """click's default_map for `command` (the root click group) from the config file, every
    command and option in it checked to exist; {} without a file."""
    path = path if path is not None else config_path()
    if path is None:
        return {}
    document = _read(path)
    result: DefaultMap = {}
    for section, table in document.items():
        if not isinstance(table, dict):
            raise CliError(
                f"{path}: {section} = … is not a table; write options under [COMMAND], "
                'e.g. [submit] then time = "2h"',
                EXIT_USAGE,
            )
        _fill(command, [section], table, result, path)
    return result


def _fill(
    group: Any, words: list[str], table: dict[str, Any], into: DefaultMap, path: Path
) -> None:
    # typer may carry its own copy of click, so parameters are told apart by what they are,
    # not by click's classes
    name = words[-1]
    commands = getattr(group, "commands", {})
    command = commands.get(name)
    where = ".".join(words)
    if command is None:
        known = ", ".join(sorted(commands)) or "none"
        raise CliError(
            f"{path}: [{where}]: gpudesk has no command {name!r} here (it has: {known})", EXIT_USAGE
        )
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
            _fill(command, [*words, key], value, own, path)
            continue
        param = options.get(key.replace("-", "_"))
        if param is None or param.name is None:
            known = ", ".join(sorted(k.replace("_", "-") for k in options)) or "none"
            raise CliError(
                f"{path}: [{where}] {key}: `gpudesk {' '.join(words)}` has no option --"
                f"{key.replace('_', '-')} (it has: {known})",
                EXIT_USAGE,
            )
        own[param.name] = value
