"""Every number option of the command tree refuses NaN and infinity.

Click reads `nan`, `inf` and `1e400` as floats, and a range check lets NaN through (every
comparison with NaN is false): `gpudesk engine stop --timeout nan` was a traceback from the
socket, `gpudesk top --interval nan` and `gpudesk calibrate --seconds nan` ran. Options with
checks of their own (`submit --mem`, gpudesk.core.submit_options) said so already; this is the
rule for all of them, config-file defaults included (click converts those with the same type),
so that a float option added later has it too.
"""

from __future__ import annotations

import copy
import math
from typing import Any

FLOAT_TYPE_NAMES = ("float", "float range")  # click's FloatParamType and FloatRange


def refuse_non_finite(command: Any) -> None:
    """Give each float option of `command` and its subcommands a type that refuses a value that
    is not a finite number, with click's own usage error (exit 2). Commands and types are Any:
    typer may carry its own copy of click (gpudesk.cli.main._click_error)."""
    for param in command.params:
        kind = param.type
        if getattr(kind, "name", None) in FLOAT_TYPE_NAMES:
            finite = copy.copy(kind)  # click.FLOAT is one object every float option shares
            finite.__class__ = _finite_class(type(kind))
            param.type = finite
    for sub in getattr(command, "commands", {}).values():
        refuse_non_finite(sub)


_FINITE: dict[Any, type] = {}  # click's float type or range -> its finite subclass


def _finite_class(base: Any) -> type:
    """`base` (click's float type, or its range) whose conversion refuses NaN and infinity;
    a subclass, so that click still shows a range in the help."""
    if base not in _FINITE:

        def convert(self: Any, value: Any, param: Any, ctx: Any) -> Any:
            number = base.convert(self, value, param, ctx)
            if isinstance(number, float) and not math.isfinite(number):
                self.fail(f"{value!r} is not a finite number.", param, ctx)
            return number

        _FINITE[base] = type(f"Finite{base.__name__}", (base,), {"convert": convert})
    return _FINITE[base]
