"""The `gpudesk` command line: the root command, every group registered, and `main`.

Commands are thin: they parse, call the engine client, print. Each group lives in a module of
its own; they share gpudesk.cli.common and never import this module. Heavy modules (zmq, rich,
textual, the profile parser, the engine) are imported inside the commands that use them and torch
is never imported here, so `gpudesk --help` starts at once.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from gpudesk import __version__
from gpudesk.cli import (
    calibrate,
    desk,
    engine,
    examples,
    export,
    grid,
    history,
    jobs,
    loader,
    mig,
    model,
    run,
    select,
    simulate,
    top,
)
from gpudesk.cli.common import CliError, reflow_help
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from gpudesk.cli.plain_help import plain_help

app = typer.Typer(
    name="gpudesk",
    help="Queue, pack and watch training jobs on a single GPU workstation.",
    no_args_is_help=False,  # no command opens the desk
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Commands of the root, in the order `gpudesk --help` lists them, then the groups.
for commands in (
    desk.desk_app,
    run.run_app,
    jobs.jobs_app,
    history.history_app,
    grid.grid_app,
    top.top_app,
    simulate.simulate_app,
    calibrate.calibrate_app,
    examples.examples_app,
):
    app.add_typer(commands)
app.add_typer(engine.engine_app, name="engine")
app.add_typer(mig.mig_app, name="mig")
app.add_typer(model.model_app, name="model")
app.add_typer(loader.loader_app, name="loader")
app.add_typer(select.select_app, name="select")
app.add_typer(export.export_app, name="export")


def _version_callback(value: bool) -> None:
    if value:
        print(f"gpudesk {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
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
        desk.open_desk(readonly, refresh, None)


reflow_help(app)  # every command is registered by now
plain_help(app)


def _click_error(name: str) -> type[Exception]:
    """One of click's exception classes, found through typer's public BadParameter: typer
    0.2x carries its own copy of click, older ones use click itself."""
    return next(k for k in typer.BadParameter.__mro__ if k.__name__ == name)


def usage_paragraph(exc: Exception) -> str:
    """A usage error as one paragraph: what is wrong, the command's usage line, where the help
    is. (Click's own form is three blocks, or a box with Rich.)"""
    message = str(getattr(exc, "format_message", exc.__str__)())
    if not message.endswith((".", "?", "!")):
        message += "."
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return f"{message} (gpudesk --help lists the commands)"
    usage = " ".join(ctx.command.get_usage(ctx).split()).removeprefix("Usage: ")
    return f"{message} Usage: {usage} ({ctx.command_path} --help says more)"


def _user_defaults(command: Any) -> dict[str, object]:
    """The option defaults of the user's config file (gpudesk.cli.config), if there is one,
    checked against `command`, the click command tree this run uses."""
    from gpudesk.cli.config import config_path, default_map

    path = config_path()
    if path is None or not path.exists():
        return {}
    return default_map(command, path)


def main(argv: list[str] | None = None) -> None:
    from gpudesk.api.errors import EngineError
    from gpudesk.paths import HomeError  # UnsafePath is one

    usage_error, click_exception = _click_error("UsageError"), _click_error("ClickException")
    try:
        # not standalone: click's errors come here, to be printed as every other error is
        command = typer.main.get_command(app)  # built once: the config check reads it too
        code = command.main(
            args=argv,
            prog_name="gpudesk",
            standalone_mode=False,
            default_map=_user_defaults(command),
        )
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.code)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        # the engine found the request's arguments wrong (a job it can never run): bad input
        sys.exit(EXIT_USAGE if exc.code == "invalid_args" else EXIT_FAILED)
    except HomeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    except usage_error as exc:
        print(f"error: {usage_paragraph(exc)}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except click_exception as exc:
        print(f"error: {getattr(exc, 'format_message', exc.__str__)()}", file=sys.stderr)
        sys.exit(getattr(exc, "exit_code", EXIT_FAILED))
    except typer.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            sys.exit(EXIT_INTERRUPTED)
        print("aborted", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        os._exit(0)  # `gpudesk queue | head`: the reader left; that is not an error
    # typer.Exit(N) comes back as N; a command that returns comes back with what it returned
    sys.exit(code if isinstance(code, int) else 0)
