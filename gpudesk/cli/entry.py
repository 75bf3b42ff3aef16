"""The `gpudesk` command's entry point, kept to the standard library.

`gpudesk --version` and `gpudesk --help` (when its text is in gpudesk.cli.help_cache) are
answered here, before typer and the commands are imported, and a plain `gpudesk queue` command
line runs without typer (gpudesk.cli.fast_path).

Ctrl-C is how `top`, `run` and the desk are left, and a user may press it before the CLI has
finished loading (typer, click and rich take a few hundred milliseconds): then the command exits
130 quietly (as `run` does once loaded) instead of printing a traceback from inside an import.
"""

from __future__ import annotations

import sys

from gpudesk.cli.exit_codes import EXIT_INTERRUPTED
from gpudesk.cli.first_answers import ROOT_HELP, version_text
from gpudesk.cli.interrupts import INTERRUPTS
from gpudesk.cli.std_streams import guard_std_streams, output_failures_said


def main() -> None:
    if not (_utf8(sys.stdout) and _utf8(sys.stderr)):  # a latin-1 or ASCII locale
        from gpudesk.cli.output_encoding import degrade

        degrade(sys.stdout, sys.stderr)
    guard_std_streams()  # a full disk told apart from a reader that left (cli/std_streams.py)
    with output_failures_said():
        _answer(sys.argv[1:])


def _answer(args: list[str]) -> None:
    # What people type first answers before typer and the commands are loaded (~0.25 s):
    # the version, and the root help once it has been rendered for this terminal width.
    if args == ["--version"]:
        print(version_text())
        return
    if args in ROOT_HELP:
        from gpudesk.cli.help_cache import cached_root_help

        kept = cached_root_help()
        if kept is not None:
            sys.stdout.write(kept)
            return
    INTERRUPTS.install()  # counts each Ctrl-C, so that one Python swallows is still seen
    try:
        if args[:1] == ["queue"]:
            from gpudesk.cli.fast_path import run_plain_queue

            if run_plain_queue(args[1:]):
                return
        from gpudesk.cli.main import main as run_cli

        # Inside too: a Ctrl-C in the window before a command's own handling is set up (the
        # imports its failure reporter makes as it enters) would else print a traceback.
        run_cli()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


def _utf8(stream: object) -> bool:
    """Whether `stream` writes UTF-8 (a stream that names no encoding, a StringIO, counts)."""
    import codecs

    name = getattr(stream, "encoding", None) or "utf-8"
    try:
        return codecs.lookup(name).name.startswith("utf")
    except LookupError:
        return False
