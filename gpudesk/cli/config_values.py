"""Whether a value a config file gives an option (`[submit] after = 5`) is of the kind the
option takes, read from the option itself (click's parameter: a flag, its type, `multiple`).

click is given the file's values as the options' defaults (`default_map`) and checks them as if
typed, but only text is typed: it iterated a number given to a repeatable option (`after = 5`:
a TypeError traceback), took `float([1])` for a number (another), and `int(1.5)`, silently 1,
for a whole number. So each value is checked here first, and a wrong kind is said as the file's
(gpudesk.cli.config). Text stands for what would be typed (`limit = "5"`), and click checks it
as such; a number stands for its digits where the option takes text (`time = 3600`).
"""

from __future__ import annotations

from typing import Any

# What each click type takes from TOML, by the type's name (typer may carry its own copy of
# click, so types are told apart by name, not class), and how it is said. A type not named here
# takes text, as click's string type does.
_WHOLE = ("a whole number", (int, str))
_NUMBER = ("a number", (int, float, str))
_TEXT = ("text", (str, int, float))
_KINDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "int": _WHOLE,
    "integer": _WHOLE,
    "int range": _WHOLE,
    "integer range": _WHOLE,
    "float": _NUMBER,
    "float range": _NUMBER,
    "boolean": ("true or false", (bool, str)),
}


def expected_value(param: Any, value: Any) -> str | None:
    """What option `param` takes, said for the user ("an array of text, one item for each
    --env: env = ["..."]"), where `value` from a config file is not of that kind; None where it
    is (click then checks it as if typed)."""
    if getattr(param, "is_flag", False):
        return None if isinstance(value, bool) else "true or false"
    words, kinds = _KINDS.get(getattr(param.type, "name", ""), _TEXT)
    if getattr(param, "multiple", False) or getattr(param, "nargs", 1) != 1:
        option = max(param.opts, key=len)
        if isinstance(value, list) and all(_is_kind(item, kinds) for item in value):
            return None
        name = option.lstrip("-")
        return f'an array of {words}, one item for each {option} typed ({name} = ["..."])'
    return None if _is_kind(value, kinds) else words


def _is_kind(value: Any, kinds: tuple[type, ...]) -> bool:
    # TOML's true is a bool, which Python also counts an int: a whole number is not true
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds)
