"""`gpudesk top`: a plain monitor for SSH (the frames: gpudesk.cli.top_view)."""

from __future__ import annotations

import sys

import typer

from gpudesk.cli.common import current_home, fail
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_NOT_RUNNING, EXIT_USAGE

top_app = typer.Typer()


@top_app.command()
def top(
    once: bool = typer.Option(
        False, "--once", help="Print one whole frame (every line, whatever the height) and exit."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON snapshot and exit."),
    interval: float = typer.Option(
        1.0,
        "--interval",
        "-n",
        metavar="SECONDS",
        min=0.1,
        max=3600,
        help="Seconds between frames.",
    ),
) -> None:
    """A plain monitor for SSH: station, host CPU/memory, running jobs. Never starts the engine.

    Frames fit the window (the header always shows); `q` leaves. It follows the engine: one
    started, restarted or resumed while top is open is shown once it answers."""
    from gpudesk.cli.top_view import BackendDown, StationDown, run_top

    try:
        run_top(current_home(), once=once, as_json=json_out, interval=interval)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    except BackendDown as exc:
        fail(str(exc), EXIT_FAILED)
    except StationDown as exc:  # its jobs are not known: no frame claims any
        fail(str(exc), EXIT_NOT_RUNNING)
    except KeyboardInterrupt:
        # Ctrl-C is how top is left, even while it is still starting or closing
        sys.stdout.write("\n")
