"""Every path option and argument of the command tree refuses an empty value.

Python reads `Path("")` as `.`, the current folder: `gpudesk simulate --truth "$T"` with T unset
said "--truth: cannot read .: Is a directory", `gpudesk export slurm P "$DIR"` was about to
write into the current folder, and `gpudesk engine print-unit --state-dir ""` printed a service
unit whose state folder was `.`. An empty path is a slip (a variable that is not set), never a
way to name the current folder, which is `.`. This is the rule for every path parameter (click's
path type: typer gives it to each `Path` annotation), config-file defaults included (click
converts those with the same type), so that a path option added later has it too. The commands
whose paths are typed as text (`simulate TRACE`, `run PROFILE`, `examples INTO`, `--plot`)
refuse an empty one themselves.
"""

from __future__ import annotations

import copy
from typing import Any

PATH_TYPE_NAME = "path"  # click's Path (typer's TyperPath is one)


def refuse_empty_paths(command: Any) -> None:
    """Give each path parameter of `command` and its subcommands a type that refuses an empty
    value, with click's own usage error (exit 2). Commands and types are Any: typer may carry
    its own copy of click (gpudesk.cli.main._click_error)."""
    for param in command.params:
        kind = param.type
        if getattr(kind, "name", None) == PATH_TYPE_NAME:
            named = copy.copy(kind)  # the type object may be shared; the copy alone is changed
            named.__class__ = _non_empty_class(type(kind))
            param.type = named
    for sub in getattr(command, "commands", {}).values():
        refuse_empty_paths(sub)


_NON_EMPTY: dict[Any, type] = {}  # click's path type -> its subclass that refuses ""


def _non_empty_class(base: Any) -> type:
    """`base` (click's path type) whose conversion refuses an empty value; a subclass, so that
    the help and shell completion still see a path."""
    if base not in _NON_EMPTY:

        def convert(self: Any, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, (str, bytes)) and not value:
                self.fail(
                    "the path is empty (an unset variable?): give one ('.' names the current "
                    "folder).",
                    param,
                    ctx,
                )
            return base.convert(self, value, param, ctx)

        _NON_EMPTY[base] = type(f"NonEmpty{base.__name__}", (base,), {"convert": convert})
    return _NON_EMPTY[base]
