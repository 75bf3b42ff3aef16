"""The `gpudesk` command's entry point, kept to the standard library.

`gpudesk --version` and `gpudesk --help` (when its text is in gpudesk.cli.help_cache) are
answered here, before typer and the commands are imported, and a plain `gpudesk queue` command
line runs without typer (gpudesk.cli.fast_path).

Ctrl-C is how `top`, `run` and the desk are left, and a user may press it before the CLI has
finished loading (typer, click and rich take a few hundred milliseconds): then the command exits
130 quietly (as `run` does once loaded) instead of printing a traceback from inside an import.

The interrupt ledger (gpudesk.cli.interrupts) goes in before anything else is imported: an
import's module lock is dropped by a weakref callback, in which Python swallows a Ctrl-C, and
a swallowed one the ledger had not counted let a `run` follow its jobs as if it never came
(seen in CI, the interrupt landing 0.1-0.2 s into the run). So this module imports nothing of
its own at its top but the ledger, and `main` installs it first.
"""

from __future__ import annotations

import sys

from gpudesk.cli.interrupts import INTERRUPTS


def main() -> None:
    INTERRUPTS.install()  # counts each Ctrl-C, so that one Python swallows is still seen
    try:
        _main(sys.argv[1:])
    except KeyboardInterrupt:  # before the streams are guarded
        from gpudesk.cli.exit_codes import EXIT_INTERRUPTED

        sys.exit(EXIT_INTERRUPTED)


def _main(args: list[str]) -> None:
    from gpudesk.cli.exit_codes import EXIT_INTERRUPTED
    from gpudesk.cli.std_streams import guard_std_streams, output_failures_said

    if not (_utf8(sys.stdout) and _utf8(sys.stderr)):  # a latin-1 or ASCII locale
        from gpudesk.cli.output_encoding import degrade

        degrade(sys.stdout, sys.stderr)
    guard_std_streams()  # a full disk told apart from a reader that left (cli/std_streams.py)
    with output_failures_said():
        try:
            _answer(args)
        except KeyboardInterrupt:  # inside: what is still buffered is written, or its failure said
            sys.exit(EXIT_INTERRUPTED)


def _answer(args: list[str]) -> None:
    from gpudesk.cli.first_answers import ROOT_HELP, version_text

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
    if args[:1] == ["queue"]:
        from gpudesk.cli.fast_path import run_plain_queue

        if run_plain_queue(args[1:]):
            return
    from gpudesk.cli.main import main as run_cli

    run_cli()


def _utf8(stream: object) -> bool:
    """Whether `stream` writes UTF-8 (a stream that names no encoding, a StringIO, counts)."""
    import codecs

    name = getattr(stream, "encoding", None) or "utf-8"
    try:
        return codecs.lookup(name).name.startswith("utf")
    except LookupError:
        return False
