"""The `gpudesk` command's entry point, kept to the standard library.

Ctrl-C is how `top`, `run` and the desk are left, and a user may press it before the CLI has
finished loading (typer, click and rich take a few hundred milliseconds): then the command exits
130 quietly (as `run` does once loaded) instead of printing a traceback from inside an import.
"""

from __future__ import annotations

import sys

from gpudesk.cli.exit_codes import EXIT_INTERRUPTED


def main() -> None:
    try:
        from gpudesk.cli.main import main as run_cli
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    run_cli()
