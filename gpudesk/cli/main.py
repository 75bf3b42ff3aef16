"""The `gpudesk` command line: the root command, every group registered, and `main`.

Commands are thin: they parse, call the engine client, print. Each group lives in a module of
its own; they share gpudesk.cli.common and never import this module. Heavy modules (zmq, rich,
textual, the profile parser, the engine) are imported inside the commands that use them and torch
is never imported here, so `gpudesk --help` starts at once.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import typer

from gpudesk.cli import completion_setup
from gpudesk.cli.common import CliError, reflow_help
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from gpudesk.cli.failures import reported_failures
from gpudesk.cli.first_answers import ROOT_HELP, version_text
from gpudesk.cli.param_rules import apply_rules
from gpudesk.cli.plain_help import plain_help
from gpudesk.cli.std_streams import say
from gpudesk.text import printable_message

if TYPE_CHECKING:
    from gpudesk.cli.config import ConfigOrigin

# Each command of the root, the module (in gpudesk.cli) that holds it, in the order `gpudesk
# --help` lists them: the commands of the nameless typers first, then the groups. A command line
# that names one of these loads that module alone; building every command costs a few hundred
# milliseconds a short command (`gpudesk queue`) must not pay. tests/cli/test_cli_commands.py
# checks this table against the commands the modules define.
ROOT_COMMANDS: dict[str, str] = {
    "desk": "desk",
    "run": "run",
    "submit": "jobs",
    "queue": "jobs",
    "show": "jobs",
    "logs": "jobs",
    "cancel": "jobs",
    "hold": "jobs",
    "release": "jobs",
    "priority": "jobs",
    "requeue": "jobs",
    "wait": "wait",
    "edit": "edit",
    "suspend": "control",
    "resume": "control",
    "drain": "control",
    "undrain": "control",
    "history": "history",
    "grid": "grid",
    "top": "top",
    "simulate": "simulate",
    "calibrate": "calibrate",
    "examples": "examples",
    "engine": "engine",
    "mig": "mig",
    "model": "model",
    "loader": "loader",
    "select": "select",
    "export": "export",
}
# The modules whose typer is a group of its own (`gpudesk engine start`), by the group's name.
GROUP_MODULES = ("engine", "mig", "model", "loader", "select", "export")


def _module_typer(module: str) -> typer.Typer:
    from importlib import import_module

    loaded = import_module(f"gpudesk.cli.{module}")
    found: typer.Typer = getattr(loaded, f"{module}_app")
    return found


def _only(app: typer.Typer, command: str) -> typer.Typer:
    """A nameless typer holding `app`'s one command named `command`."""
    kept = typer.Typer()
    kept.registered_commands = [
        info
        for info in app.registered_commands
        if (info.name or typer.main.get_command_name(getattr(info.callback, "__name__", "")))
        == command
    ]
    return kept


def build_app(modules: list[str] | None = None, command: str | None = None) -> typer.Typer:
    """The root command with the commands of `modules` (every module when None); of a module
    whose commands sit at the root, only `command` when one is named. Building a command reads
    its options from its signature (~1.5 ms each), and `gpudesk queue` shares its module with
    nine others."""
    wanted = list(dict.fromkeys(ROOT_COMMANDS.values())) if modules is None else modules
    root = typer.Typer(
        name="gpudesk",
        help="Queue, pack and watch training jobs on a single GPU workstation.",
        no_args_is_help=False,  # no command opens the desk
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    root.callback(invoke_without_command=True)(_root)
    for module in wanted:
        if module in GROUP_MODULES:
            root.add_typer(_module_typer(module), name=module)
        elif command is not None and ROOT_COMMANDS.get(command) == module:
            root.add_typer(_only(_module_typer(module), command))
        else:
            root.add_typer(_module_typer(module))
    reflow_help(root)
    plain_help(root)
    return root


def modules_for(argv: list[str]) -> list[str] | None:
    """The one module a command line needs, when its first word names a command, or when it is
    empty (`gpudesk` alone opens the desk); None (every module) for the rest: `--help`, root
    options, a misspelt command (the error names the commands there are)."""
    if "_GPUDESK_COMPLETE" in os.environ:
        return None  # shell completion (click reads the words from the environment) names any
    if not argv:
        return ["desk"]
    if argv[0] not in ROOT_COMMANDS:
        return None
    return [ROOT_COMMANDS[argv[0]]]


def _version_callback(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit()


def _root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version_callback,
        is_eager=True,
        help="Print the version and exit.",
    ),
    readonly: bool = typer.Option(
        False, "--readonly", help="Open the desk without any action (for a shared screen)."
    ),
    refresh: float = typer.Option(
        1.0,
        "--refresh",
        metavar="SECONDS",
        min=0.2,
        max=60.0,
        help="Seconds between the desk's redraws.",
    ),
) -> None:
    """Queue, pack and watch training jobs on a single GPU workstation.

    With no command, opens the desk (a terminal UI) on the engine, starting it if needed."""
    if ctx.invoked_subcommand is None:
        from gpudesk.cli.desk import open_desk

        open_desk(readonly, refresh, None)


def _click_error(name: str) -> type[Exception]:
    """One of click's exception classes, found through typer's public BadParameter: typer
    0.2x carries its own copy of click, older ones use click itself."""
    return next(k for k in typer.BadParameter.__mro__ if k.__name__ == name)


# Click names a bounded option's type by its class ("'1e23' is not a valid int range"): said
# as what the option wants
CLICK_TYPE_WORDS = (
    ("is not a valid int range", "is not a whole number"),
    ("is not a valid integer range", "is not a whole number"),
    ("is not a valid float range", "is not a number"),
)


def usage_paragraph(exc: Exception) -> str:
    """A usage error as one paragraph: what is wrong, the command's usage line, where the help
    is. (Click's own form is three blocks, or a box with Rich.)"""
    message = str(getattr(exc, "format_message", exc.__str__)())
    for said, meant in CLICK_TYPE_WORDS:
        message = message.replace(said, meant)
    if not message.endswith((".", "?", "!")):
        message += "."
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return f"{message} (gpudesk --help lists the commands)"
    usage = " ".join(ctx.command.get_usage(ctx).split()).removeprefix("Usage: ")
    return f"{message}{_from_config(exc, ctx)} Usage: {usage} ({ctx.command_path} --help says more)"


def _priority_where_the_jobs_go(exc: Exception, args: list[str]) -> str | None:
    """`gpudesk priority 1 -1`: click took the new priority for an option it does not know
    ("No such option: -1"), where a user of `scontrol update JobId=1 Priority=-1` or `renice`
    wrote it after the job. Said as the job it is not, with the command she meant; None for
    any other usage error. (`priority 1 5` reaches the command, which says the same.)"""
    option = getattr(exc, "option_name", None) or ""
    ctx = getattr(exc, "ctx", None)
    if ctx is None or ctx.command_path != "gpudesk priority" or not option[1:].isdigit():
        return None
    rest = args[args.index("priority") + 1 :] if "priority" in args else []
    # click reads -20 as the short options -2 and -0, and names the first
    word = next((arg for arg in rest if arg.startswith(option) and arg[1:].isdigit()), option)
    if any(arg.split("=")[0] in ("--set", "--up", "--down") for arg in rest):
        return f"gpudesk priority: {word} is not a job (a job id is a whole number from 1)"
    jobs = " ".join(arg for arg in rest if not arg.startswith("-")) or "JOB"
    return (
        f"gpudesk priority: {word} is not a job; give the new priority with --set {word} "
        f"(gpudesk priority {jobs} --set {word})"
    )


def _context_named(root: Any, args: list[str]) -> Any:
    """The context of the command `args` name, for a usage error click raised without one (an
    option missing its value, `gpudesk submit --gpus`, is found by its parser, outside any
    context); None where they name no command. Click's classes are reached through the
    commands (typer 0.2x carries its own copy of click)."""
    ctx, command = None, root
    for word in args:
        command = getattr(command, "commands", {}).get(word)
        if command is None:
            break
        parent = ctx or root.context_class(root, info_name="gpudesk")
        ctx = command.context_class(command, info_name=word, parent=parent)
    return ctx


def _from_config(exc: Exception, ctx: Any) -> str:
    """Where a bad value came from a config file rather than the command line (click's
    default_map): " It comes from [top] interval in FILE (line 3)."; else ""."""
    origin = _config_origin(ctx, getattr(exc, "param", None))
    if origin is None:
        return ""
    line = f" (line {origin.line})" if origin.line else ""
    return f" It comes from [{origin.table}] {origin.key} in {origin.path}{line}."


def _config_origin(ctx: Any, param: Any) -> ConfigOrigin | None:
    """Where a config file gave option `param` of the command of `ctx` its value (click's
    default_map); None where it was typed, or is gpudesk's own default."""
    from gpudesk.cli.config import default_source

    name = getattr(param, "name", None)
    if name is None or getattr(ctx.get_parameter_source(name), "name", None) != "DEFAULT_MAP":
        return None
    words = ctx.command_path.split()[1:]
    try:
        return default_source(typer.main.get_command(build_app()), words, param)
    except CliError:
        return None  # (a file that cannot be read would have stopped the command before)


def _said_as_config(exc: CliError) -> CliError:
    """A command's own refusal of an option's value (`--time: 'soon' is not a duration`) where
    a config file gave that value, not the command line: said as the file's, with its line,
    table and key (`FILE:2: [submit] time: 'soon' is not a duration …`)."""
    option, sep, rest = str(exc).partition(": ")
    ctx = exc.ctx
    if ctx is None or not sep or not option.startswith("--"):
        return exc
    param = next((p for p in ctx.command.params if option in getattr(p, "opts", ())), None)
    origin = _config_origin(ctx, param)
    if origin is None:
        return exc
    return CliError(
        f"{origin}: {rest} (a default from the config file; {option} on the command line "
        "overrides it)",
        exc.code,
    )


def _user_defaults(command: Any, partial: bool) -> dict[str, object]:
    """The option defaults of the site's and the user's config files (gpudesk.cli.config),
    checked against `command`, the click command tree this run uses: against every command
    when that tree holds only some (a file may set options of any command) and a file names
    one it lacks."""
    from gpudesk.cli.config import option_defaults

    def every_command() -> Any:
        return typer.main.get_command(build_app())

    return option_defaults(command, every_command if partial else None)


def _print_root_help(command: Any, defaults: dict[str, object]) -> None:
    """`gpudesk --help`, as click prints it, kept for the next time (gpudesk.cli.help_cache)."""
    from gpudesk.cli.config import config_path
    from gpudesk.cli.help_cache import keep_root_help

    ctx = command.make_context("gpudesk", [], default_map=defaults, resilient_parsing=True)
    text = ctx.get_help() + "\n"
    sys.stdout.write(text)
    path = config_path()
    keep_root_help(text, str(path) if path is not None else "")


def _exit_quietly_where_the_reader_left(exc: SystemExit) -> None:
    """`gpudesk logs J | head -1`: typer's own handler of EPIPE exits 1, its streams made
    quiet (click's PacifyFlushWrapper); a reader that left is no error here, as for `gpudesk
    queue | head` (gpudesk.cli.failures): 0, whichever path printed."""
    if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    usage_error, click_exception = _click_error("UsageError"), _click_error("ClickException")
    args = sys.argv[1:] if argv is None else argv
    command = None
    try:
        with reported_failures():
            # not standalone: click's errors come here, to be printed as every other error is
            if completion_setup.asked(args):  # with the shell's name, which typer's ignore
                sys.exit(completion_setup.run(args))
            modules = modules_for(args)
            named = args[0] if modules is not None and args else None
            # built once: the config check reads it too
            command = typer.main.get_command(build_app(modules, named))
            apply_rules(command)  # NaN and infinity, an empty path (cli/param_rules.py)
            defaults = _user_defaults(command, partial=modules is not None)
            if args in ROOT_HELP:
                _print_root_help(command, defaults)
                sys.exit(0)  # as click's help does
            try:
                code = command.main(
                    args=args, prog_name="gpudesk", standalone_mode=False, default_map=defaults
                )
            except CliError as exc:  # a value from a config file: said as the file's
                raise _said_as_config(exc) from None
            except SystemExit as exc:
                _exit_quietly_where_the_reader_left(exc)
                raise
    except usage_error as exc:
        if getattr(exc, "ctx", None) is None and command is not None:
            exc.ctx = _context_named(command, args)  # type: ignore[attr-defined]  # its usage
        said = _priority_where_the_jobs_go(exc, args) or usage_paragraph(exc)
        say(f"error: {printable_message(said)}")
        sys.exit(EXIT_USAGE)
    except click_exception as exc:
        said = str(getattr(exc, "format_message", exc.__str__)())
        say(f"error: {printable_message(said)}")
        sys.exit(getattr(exc, "exit_code", EXIT_FAILED))
    except typer.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            sys.exit(EXIT_INTERRUPTED)
        # click turns an EOFError into Abort too: one from a prompt's ended input, or from
        # deeper down (a cut-short .pyc file: "marshal data too short"), which is said
        cause = exc.__cause__
        why = f" ({type(cause).__name__}: {cause})" if cause is not None and str(cause) else ""
        say(printable_message(f"aborted{why}"))
        sys.exit(EXIT_FAILED)
    # typer.Exit(N) comes back as N; a command that returns comes back with what it returned
    sys.exit(code if isinstance(code, int) else 0)
