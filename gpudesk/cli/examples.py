"""`gpudesk examples [DIR]`: copy the bundled example profiles and traces out of the package, to
read and edit (gpudesk.examples); an installed gpudesk runs them by name without this."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from gpudesk.cli.common import fail
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE

examples_app = typer.Typer()


@examples_app.command()
def examples(
    into: Path = typer.Argument(
        Path("gpudesk-examples"), help="Folder to copy them into (made if missing)."
    ),
) -> None:
    """Copy the example profiles and traces (quickstart.toml, carma-philly-t1.json, …) into a
    folder of yours; a file already there is kept, not overwritten."""
    from gpudesk.examples import folder, names

    if into.exists() and not into.is_dir():
        fail(f"{into} exists and is not a folder", EXIT_USAGE)
    copied, kept = 0, 0
    try:
        for kind in ("profiles", "traces"):
            target = into / kind
            target.mkdir(parents=True, exist_ok=True)
            for name in names(kind):
                destination = target / name
                if destination.exists() or destination.is_symlink():
                    kept += 1
                    continue
                shutil.copyfile(folder(kind) / name, destination)
                copied += 1
    except OSError as exc:
        fail(f"cannot copy the examples into {into}: {exc.strerror or exc}", EXIT_FAILED)
    print(f"copied {copied} file(s) into {into}/profiles and {into}/traces", end="")
    print(f"; kept {kept} already there" if kept else "")
    print(f"try: cd {into} && gpudesk run profiles/quickstart.toml")
