"""What `gpudesk mig`'s commands share (gpudesk.cli.mig: nvidia-smi's partitions;
gpudesk.cli.mig_plan: the engine's plan): options, headings, tables, wrapped paragraphs and the
engine's errors as exit codes."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated

import typer

from gpudesk.cli.common import fail
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE

NO_MIG_GPU = "no MIG-capable GPU on this station"

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
GpuOption = Annotated[
    int, typer.Option("--gpu", "-g", min=0, help="The GPU's index (as nvidia-smi -L numbers it).")
]


def table(
    headers: tuple[str, ...],
    rows: Sequence[tuple[object, ...]],
    right: tuple[int, ...] = (),
    optional: tuple[int, ...] = (),
) -> str:
    """A table indented under its GPU's heading, fitted to the terminal: the `optional` columns
    give way (the last listed first) and a line names them; to a pipe every column, whole."""
    from gpudesk import render

    terminal = render.table_width()
    width = None if terminal is None else terminal - 2  # under the heading's indent
    text, left_out = render.fitted_table(headers, rows, width=width, optional=optional, right=right)
    if left_out:
        text += "\n" + render.fold(
            f"({', '.join(left_out)} with --json or a wider terminal)", width
        )
    return "\n".join("  " + line for line in text.splitlines())


def gpu_title(index: int, name: str, simulated: bool = False, mode: str = "") -> str:
    """A GPU's heading: "GPU 3: NVIDIA A100-SXM4-40GB", then its MIG `mode` where given;
    folded into the terminal's width (whole to a pipe)."""
    from gpudesk import render

    title = f"GPU {index}: {name}" + (f"  {mode}" if mode else "") + ("  [SIMULATED]" * simulated)
    return render.fold(title, render.table_width())


def paragraph(text: str, first: str = "  ") -> str:
    """A line that may run long, wrapped to the terminal under its heading (its first line
    indented by `first`, the rest two more); a word or a path is never broken."""
    from gpudesk import render

    return textwrap.fill(
        text,
        width=render.terminal_width(),
        initial_indent=first,
        subsequent_indent=first + "  ",
        break_on_hyphens=False,
        break_long_words=False,
    )


@contextmanager
def engine_errors() -> Iterator[None]:
    from gpudesk.api.connection import EngineNotListening
    from gpudesk.api.errors import EngineError
    from gpudesk.core.protocol import INVALID_ARGS

    try:
        yield
    except EngineNotListening:
        raise  # a station's engine down: exit 3, as every command says it (cli.failures)
    except EngineError as exc:
        fail(str(exc), EXIT_USAGE if exc.code == INVALID_ARGS else EXIT_FAILED)
