"""What `gpudesk` answers before typer and the commands are loaded (gpudesk.cli.entry), spelled
once for gpudesk.cli.main too, which answers the same once they are: the version's text and the
command lines that ask for the root help. Standard library only: every command imports it."""

from __future__ import annotations

ROOT_HELP = (["--help"], ["-h"])


def version_text() -> str:
    """What `gpudesk --version` prints."""
    from gpudesk import __version__

    return f"gpudesk {__version__}"
