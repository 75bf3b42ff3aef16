"""`gpudesk desk` (and `gpudesk` with no command): the Textual desk on the engine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from gpudesk.cli.common import fail
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.cli.output_encoding import carries, output_encoding

desk_app = typer.Typer()


def open_desk(readonly: bool, refresh: float, replay: Path | None) -> None:
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        fail(
            "the desk needs a terminal; for pipes and scripts use `gpudesk top --once`, "
            "`gpudesk queue` or `gpudesk --help`",
            EXIT_USAGE,
        )
    if os.environ.get("TERM") == "dumb":  # no cursor moves nor colour: the desk would be noise
        fail(
            "the desk needs a terminal that can draw (TERM=dumb cannot); `gpudesk top` is made "
            "for such terminals, `gpudesk queue` lists the jobs",
            EXIT_USAGE,
        )
    # a latin-1 or ASCII locale: its boxes and bars came out as literal `\u2502` text, and
    # Textual has no ASCII drawing to fall back on
    if not carries("│█▁", output_encoding(sys.stdout)):
        fail(
            f"the desk draws with characters your terminal's encoding "
            f"({sys.stdout.encoding}) cannot show; run it in a UTF-8 locale (LANG=C.UTF-8), or "
            "use `gpudesk top`, which is made for any terminal",
            EXIT_USAGE,
        )
    if readonly and replay is None:  # watch only: a reader, which never starts an engine
        from gpudesk.cli.no_engine import require_running

        require_running()
    from gpudesk.screens import DeskFailed, DeskSignalled, run_desk
    from gpudesk.screens.feed import BadRecording

    try:
        message = run_desk(readonly=readonly, refresh_s=refresh, replay=replay)
    except DeskFailed as exc:
        fail(f"{exc}; the message above says what went wrong")
    except DeskSignalled as exc:
        raise typer.Exit(128 + exc.signum) from None
    except BadRecording as exc:
        fail(f"--replay: {exc}", EXIT_USAGE)
    if message:
        print(message)


@desk_app.command()
def desk(
    readonly: bool = typer.Option(
        False, "--readonly", help="Hide every action (for a shared screen): watch only."
    ),
    refresh: float = typer.Option(
        1.0, "--refresh", metavar="SECONDS", min=0.2, max=60.0, help="Seconds between redraws."
    ),
    replay: Path | None = typer.Option(
        None,
        "--replay",
        help="Play back a recorded desk (JSON frames) instead of following the engine.",
    ),
) -> None:
    """Open the desk: live GPU cards, the queue with its actions, loaders and MIG.

    It starts the engine when none runs (with --readonly it does not: it watches a running
    one). `q` closes the desk and leaves the engine and its jobs running."""
    if replay is not None:
        from gpudesk.cli.report_file import too_long_problem

        too_long = too_long_problem(replay)  # is_file() raised it as a traceback
        if too_long is not None:
            fail(f"--replay: {too_long}", EXIT_USAGE)
        if not replay.is_file():
            fail(f"--replay: {replay} is not a file", EXIT_USAGE)
    open_desk(readonly, refresh, replay)
