"""`--plot FILE|-`, as the commands that draw a plot share it (simulate, select compare, history,
show): the option's help, checking the target before any work is done, and writing the plot after
the command's own output, so a plot that fails never costs the results (docs/plots.md).

gpudesk.plots is imported inside these functions: `gpudesk --help` loads neither it nor
matplotlib.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpudesk.cli.common import fail
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.text import printable_line

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from gpudesk.plots.common import PlotTarget

# after each command's own "Also draw …." sentence
PLOT_HELP = (
    "FILE.svg, .png or .pdf (the suffix picks the format; needs the plot extra, pip install "
    "'gpudesk[plot]'), or - for the terminal, in characters."
)


def plot_target(text: str | None, *, machine_output: str | None = None) -> PlotTarget | None:
    """The checked `--plot` value (None when not given); a bad one fails with exit 2 before
    the command does anything. `machine_output` names the option that makes stdout a format
    for programs (`--json`, `--format csv`), which `--plot -` would break."""
    if text is None:
        return None
    from gpudesk.cli.report_file import too_long_problem
    from gpudesk.plots.common import PlotError, PlotTarget

    too_long = None if text == "-" else too_long_problem(Path(text))
    if too_long is not None:  # before parse(), whose look at the path raised OSError
        fail(f"--plot: {too_long}", EXIT_USAGE)
    try:
        target = PlotTarget.parse(text)
    except PlotError as exc:
        fail(str(exc), EXIT_USAGE)
    if target.path is not None:
        from gpudesk.cli.report_file import gpudesk_homes, new_file_problem, output_file_problem

        problem = output_file_problem(target.path, gpudesk_homes()) or new_file_problem(target.path)
        if problem is not None:
            fail(f"--plot: {problem}", EXIT_USAGE)
    if target.terminal and machine_output:
        fail(
            f"--plot - draws on the terminal, which would break the output of "
            f"{machine_output}; give --plot a file (FILE.svg, .png or .pdf) with "
            f"{machine_output}",
            EXIT_USAGE,
        )
    return target


def write_plot(target: PlotTarget, figure: Callable[[], Figure], text: Callable[[], str]) -> None:
    """Draw the plot where the target says: `text()` printed for the terminal, else `figure()`
    saved to the file (said on stderr, so --json's stdout stays JSON). Without matplotlib, with
    nothing to draw, or when the file cannot be written, fails with one paragraph and exit 1."""
    from gpudesk.cli.report_file import write_atomically
    from gpudesk.plots.common import PlotError, rendered, require_matplotlib

    try:
        if target.terminal:
            print(text())
            return
        require_matplotlib()
        data = rendered(figure(), target)
    except PlotError as exc:
        fail(str(exc), EXIT_FAILED)
    assert target.path is not None
    try:
        # renamed into place, so a full disk leaves an earlier plot as it was; a link is
        # written through, to the file it names, as savefig did
        write_atomically(Path(os.path.realpath(target.path)), data)
    except OSError as exc:
        fail(f"could not write {target.path}: {exc.strerror or exc}", EXIT_FAILED)
    # the user's path spelled out (an ESC in it is never sent to the terminal), as errors are
    print(f"plot: wrote {printable_line(str(target.path))}", file=sys.stderr)
