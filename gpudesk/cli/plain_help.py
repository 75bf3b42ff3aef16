"""Plain `--help`: every bracket of the help text shown, option values named as people name them
(N, TEXT, PATH), usage lines as in a man page (`gpudesk submit [OPTIONS] [--] COMMAND [ARGS]...`).

Typer's Rich help reads help texts as Rich markup (so `[[jobs]]` and `[datasets]` vanish), shows
`<bool>` next to flags and `<list[str]>` next to repeatable options, and writes a required
argument as `{NAME}`. The commands here format their help with click's plain formatter instead:
no markup to escape, no colour (help is read over SSH and in dumb terminals as `top` is), and
rich is not imported for it. Only typer at module level: every `gpudesk` command imports this.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# A value's name by its Python type (typer 0.2x) or click type (older typer).
_METAVARS = {
    "int": "N",
    "integer": "N",
    "int range": "N",  # an option with min= or max= (click's IntRange, FloatRange)
    "float": "NUM",
    "float range": "NUM",
    "str": "TEXT",
    "text": "TEXT",
    "path": "PATH",
    "file": "FILE",
    "directory": "DIR",
    "datetime": "DATE",
    "bool": "BOOL",
    "boolean": "BOOL",
}


def _choices(param: Any) -> list[str] | None:
    desc = getattr(param, "type_descriptor", None)
    if desc is not None:
        if not desc.is_choice or desc.choices is None:
            return None
        return [str(getattr(c, "value", c)) for c in desc.choices]
    choices = getattr(getattr(param, "type", None), "choices", None)
    return [str(getattr(c, "value", c)) for c in choices] if choices else None


def _type_name(param: Any) -> str:
    desc = getattr(param, "type_descriptor", None)
    if desc is None:  # older typer: click's own types
        return str(getattr(param.type, "name", "text")).lower()
    if desc.is_path:
        return str(desc.path_type).lower()
    if desc.is_datetime:
        return "datetime"
    annotation = desc.annotation
    if desc.is_list:
        args = getattr(annotation, "__args__", ())
        annotation = args[0] if args else str
    return getattr(annotation, "__name__", "text").lower()


def option_metavar(param: Any) -> str:
    """What an option's value is called in help: its own metavar, its choices, or a plain name
    for its type."""
    if param.metavar:
        return str(param.metavar)
    choices = _choices(param)
    if choices:
        return "[" + "|".join(choices) + "]"
    return _METAVARS.get(_type_name(param), "TEXT")


def argument_metavar(param: Any) -> str:
    """An argument as the usage line writes it: NAME, [NAME], NAME..., [NAME]..."""
    name = str(param.metavar or (param.name or "arg").upper())
    variadic = param.nargs != 1 and not name.endswith("...")
    if not param.required:
        name = f"[{name}]"
    return name + ("..." if variadic else "")


def _usage_pieces(command: Any, ctx: Any) -> list[str]:
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if param.param_type_name != "argument":
            continue
        if param.nargs == -1 and not ctx.allow_interspersed_args:
            pieces.append("[--]")  # a command of its own follows; `--` keeps its dashes its own
        pieces.append(argument_metavar(param))
    return pieces


def param_rows(command: Any, ctx: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A command's arguments and options as help lists them: (name with its value, help text)
    each, hidden ones left out (the man pages, gpudesk.cli.manpages, list the same)."""
    arguments: list[tuple[str, str]] = []
    options: list[tuple[str, str]] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:  # hidden
            continue
        help_text = record[1] or ""
        if param.param_type_name == "argument":
            arguments.append((argument_metavar(param), help_text))
            continue
        names = []
        for opts in (param.opts, param.secondary_opts):
            if opts:
                # short forms first, as in `-n, --name TEXT`
                joined = ", ".join(sorted(opts, key=lambda o: o.startswith("--")))
                if not param.is_flag and not param.count:
                    joined += " " + option_metavar(param)
                names.append(joined)
        options.append((" / ".join(names), help_text))
    return arguments, options


def _write_params(command: Any, ctx: Any, formatter: Any) -> None:
    arguments, options = param_rows(command, ctx)
    for title, rows in (("Arguments", arguments), ("Options", options)):
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)


class PlainCommand(TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rich_markup_mode = None  # click's plain formatter, and no rich import

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage_pieces(self, ctx)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _write_params(self, ctx, formatter)


class PlainGroup(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rich_markup_mode = None

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*_usage_pieces(self, ctx), self.subcommand_metavar or "COMMAND [ARGS]..."]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _write_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)


def _replaceable(cls: object, default: type) -> bool:
    """Typer's own class (or its unset placeholder): one a command did not choose itself."""
    return not isinstance(cls, type) or cls is default


def plain_help(group: typer.Typer) -> None:
    """Every command and group of `group` (registered by now) formats its help plainly."""
    if _replaceable(group.info.cls, TyperGroup):
        group.info.cls = PlainGroup
    for command in group.registered_commands:
        if _replaceable(command.cls, TyperCommand):
            command.cls = PlainCommand
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            plain_help(sub.typer_instance)
