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

from gpudesk.core.field_checks import describe

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


# The click types whose check depends on the value alone (a path's would ask the file system
# at every command's start, for a table of another command): checked when the file is read, so
# that every wrong value of the file is said at once, not one a run (`mem = "lots"`, then
# `priority = "high"`). Text and what gpudesk's own code checks are checked as the command runs.
_PURE = frozenset(["int", "integer", "int range", "integer range", "float", "float range"])
_PURE |= {"boolean", "choice"}


def refused_value(param: Any, value: Any) -> str | None:
    """What click would say of `value` (of the kind `expected_value` accepts) given to option
    `param` as if typed ("'lots' is not a valid float."), where its type's check needs only the
    value; None where it takes it, or where its check is left to the command's run."""
    kind = getattr(param.type, "name", "")
    if getattr(param, "is_flag", False) or kind not in _PURE:
        return None
    for item in value if isinstance(value, list) else [value]:
        try:
            param.type.convert(item, param, None)
        except Exception as exc:  # click's BadParameter (typer may carry its own copy of click)
            if not hasattr(exc, "format_message"):
                raise
            message = str(getattr(exc, "message", exc)).rstrip(".")
            if "is not a valid" in message:  # click's "'x' is not a valid float range"
                words = _KINDS.get(kind, _TEXT)[0]
                return f"expected {words}, found {describe(item)}"
            # a range's or a choice's own words; the line names the key, not "--interval"
            return message
    return None


def _is_kind(value: Any, kinds: tuple[type, ...]) -> bool:
    # TOML's true is a bool, which Python also counts an int: a whole number is not true
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds)
