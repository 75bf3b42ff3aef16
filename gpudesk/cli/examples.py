"""`gpudesk examples [DIR]`: copy the bundled example profiles and traces out of the package, to
read and edit (gpudesk.examples); an installed gpudesk runs them by name without this."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import typer

from gpudesk.cli.common import fail
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.cli.report_file import folder_path_problem

examples_app = typer.Typer()


@examples_app.command()
def examples(
    folder_name: str = typer.Argument(
        "gpudesk-examples", metavar="INTO", help="Folder to copy them into (made if missing)."
    ),
) -> None:
    """Copy the example profiles and traces (quickstart.toml, carma-philly-t1.json, …) into a
    folder of yours; a file already there is kept, not overwritten."""
    from gpudesk.examples import folder, names
    from gpudesk.text import printable_line

    if not folder_name:  # `gpudesk examples "$DIR"` with DIR unset: not the current folder
        fail("INTO is empty: name the folder to copy the examples into", EXIT_USAGE)
    into = Path(folder_name)
    shown = printable_line(folder_name)  # a control character is spelled out, never obeyed
    # a destination that can never be a folder is bad input, said before anything is copied
    # (a link loop was "Too many levels of symbolic links" with exit 1)
    problem = folder_path_problem(into)
    if problem is not None:
        fail(f"{shown} {problem}; name a folder to copy the examples into", EXIT_USAGE)
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
                try:
                    shutil.copyfile(folder(kind) / name, destination)
                except OSError:
                    # a copy cut short (a full disk) would be kept as "already there" next time
                    destination.unlink(missing_ok=True)
                    raise
                copied += 1
    except OSError as exc:
        fail(f"cannot copy the examples into {shown}: {exc.strerror or exc}", EXIT_FAILED)
    print(f"copied {copied} file(s) into {shown}/profiles and {shown}/traces", end="")
    print(f"; kept {kept} already there" if kept else "")
    # spelled out, the name is a shell's $'...' (\x1b, \xff, \u202e); else quoted as it is
    cd = shlex.quote(shown) if shown == folder_name else "$'" + shown.replace("'", "\\'") + "'"
    print(f"try: cd {cd} && gpudesk run profiles/quickstart.toml")
