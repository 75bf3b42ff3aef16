"""Rules every parameter of a kind obeys, in whichever command it stands: each float option
refuses NaN and infinity, each path refuses an empty value. One walk over the command tree
gives every such parameter a type that checks its rule, config-file defaults included (click
converts those with the same type), so that an option added later obeys it too.

- **Floats.** Click reads `nan`, `inf` and `1e400` as floats, and a range check lets NaN
  through (every comparison with NaN is false): `gpudesk engine stop --timeout nan` was a
  traceback from the socket, `gpudesk top --interval nan` and `gpudesk calibrate --seconds nan`
  ran. Options with checks of their own (`submit --mem`, gpudesk.core.submit_options) said so
  already.
- **Paths.** Python reads `Path("")` as `.`, the current folder: `gpudesk simulate --truth "$T"`
  with T unset said "--truth: cannot read .: Is a directory", `gpudesk export slurm P "$DIR"`
  was about to write into the current folder, and `gpudesk engine print-unit --state-dir ""`
  printed a service unit whose state folder was `.`. An empty path is a slip (a variable that is
  not set), never a way to name the current folder, which is `.`. The commands whose paths are
  typed as text (`simulate TRACE`, `run PROFILE`, `examples INTO`, `--plot`) refuse an empty one
  themselves.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

FLOAT_TYPE_NAMES = ("float", "float range")  # click's FloatParamType and FloatRange
PATH_TYPE_NAME = "path"  # click's Path (typer's TyperPath is one)

Convert = Callable[[Any], Any]


class _Refused(Exception):
    """A value the rule refuses; its message is click's usage error."""


def _finite(value: Any, convert: Convert) -> Any:
    number = convert(value)
    if isinstance(number, float) and not math.isfinite(number):
        raise _Refused(f"{value!r} is not a finite number.")
    return number


def _not_empty(value: Any, convert: Convert) -> Any:
    if isinstance(value, (str, bytes)) and not value:
        raise _Refused(
            "the path is empty (an unset variable?): give one ('.' names the current folder)."
        )
    return convert(value)


# click's type name -> its rule: the value, and the type's own conversion of it
RULES: dict[str, Callable[[Any, Convert], Any]] = {
    **dict.fromkeys(FLOAT_TYPE_NAMES, _finite),
    PATH_TYPE_NAME: _not_empty,
}


def apply_rules(command: Any) -> None:
    """Give each parameter of `command` and its subcommands that a rule covers a type that
    checks it, with click's own usage error (exit 2). Commands and types are Any: typer may
    carry its own copy of click (gpudesk.cli.main._click_error)."""
    for param in command.params:
        kind = param.type
        name = getattr(kind, "name", None)
        if name in RULES:
            ruled = copy.copy(kind)  # click.FLOAT is one object every float option shares
            ruled.__class__ = _ruled_class(type(kind), name)
            param.type = ruled
    for sub in getattr(command, "commands", {}).values():
        apply_rules(sub)


_RULED: dict[tuple[Any, str], type] = {}  # (click's type, its name) -> its subclass with the rule


def _ruled_class(base: Any, name: str) -> type:
    """`base` whose conversion obeys the rule for `name`; a subclass, so that click still shows
    a range in the help and shell completion still sees a path."""
    if (base, name) not in _RULED:
        rule = RULES[name]

        def convert(self: Any, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return rule(value, lambda v: base.convert(self, v, param, ctx))
            except _Refused as exc:
                self.fail(str(exc), param, ctx)

        _RULED[(base, name)] = type(f"Ruled{base.__name__}", (base,), {"convert": convert})
    return _RULED[(base, name)]
