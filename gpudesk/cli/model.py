"""`gpudesk model`: the interference model placement uses, as this station learned it.

`show` prints each parameter per GPU model with its value, the top of its plausible range
(where `auto` judges sharing), its prior, its provenance (published,
derived, assumption, learned, calibrated), how many observations moved it and when; `reset`
drops what was learned and calibrated, back to the defaults (docs/interference.md)."""

from __future__ import annotations

import sys
import textwrap
import time
from typing import TYPE_CHECKING, Annotated

import typer

from gpudesk.cli.common import engine_client, fail, print_model
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_USAGE
from gpudesk.cli.std_streams import already_done

if TYPE_CHECKING:
    from gpudesk.api.models import GpuModelView, ModelShowResult

model_app = typer.Typer(
    help="The interference model: its parameters, learned on this station.",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def when(ts: float | None) -> str:
    """A last update in local time, with its age."""
    if ts is None:
        return "-"
    age = max(0.0, time.time() - ts)
    if age < 90:
        ago = f"{age:.0f} s ago"
    elif age < 90 * 60:
        ago = f"{age / 60:.0f} min ago"
    elif age < 36 * 3600:
        ago = f"{age / 3600:.0f} h ago"
    else:
        ago = f"{age / 86400:.0f} days ago"
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(ts))} ({ago})"


def _model_text(model: GpuModelView, width: int | None) -> str:
    from gpudesk import render

    if model.gpu_model:
        gpus = ", ".join(str(i) for i in model.gpus)
        title = model.gpu_model + (f" (GPU {gpus})" if gpus else " (not on this station)")
    else:
        title = "defaults (a GPU of no known model; the prior of every model)"
    rows = [
        (
            p.name,
            f"{p.value:.4g}",
            "-"
            if p.high is None
            else f"{p.high:.4g} ({p.high / p.value:.2f}x)"
            if p.value
            else "0",
            f"{p.prior:.4g}",
            p.kind,
            p.observations if p.kind != "calibrated" else f"{p.observations} ({p.calibrated} cal)",
            when(p.updated_at),
        )
        for p in model.params
    ]
    header = ("PARAMETER", "VALUE", "AUTO JUDGES AT", "PRIOR", "PROVENANCE", "OBS", "UPDATED")
    room = None if width is None else width - 2  # indented under the GPU model
    # the value placement uses stays; its range, prior and history give way, the latest first
    table, left_out = render.fitted_table(header, rows, width=room, optional=(2, 3, 4, 5, 6))
    if left_out:
        table += "\n" + render.fill(f"({', '.join(left_out)} in --json)", room or 94)
    said = [f"{p.name} {p.observed:.4g}" for p in model.params if p.observed is not None]
    if said:
        table += "\n" + render.fill("observations alone say: " + ", ".join(said), room or 94)
    return render.fold(title, width) + "\n" + textwrap.indent(table, "  ")


def show_text(result: ModelShowResult, width: int | None = None) -> str:
    """`model show` in `width` columns (a terminal's); to a pipe (None) in 96, as it was."""
    from gpudesk import render

    wrap = min(width or 96, 96)  # prose in at most 96, easier read than a wide terminal's
    station = f"{'SIMULATED ' if result.simulated else ''}station ({result.backend})"
    lines = [render.fold(f"Interference model on this {station}", width), ""]
    for model in result.models:
        lines += [_model_text(model, width), ""]
    sources = {p.name: p.source for model in result.models for p in model.params}
    lines.append("Where the priors come from:")
    for name, source in sources.items():
        lines.append(
            textwrap.fill(
                f"{name}: {source}",
                width=wrap,
                initial_indent="  ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
        )
    notes = (
        "AUTO JUDGES AT: the top of a sharing cost's plausible range; the `auto` policy shares "
        "a GPU only where it still gains there. 1.5x the value while nothing has measured it, "
        "narrowing as observations do (1.05x after 27).",
        'VALUE: what a parameter\'s observations alone say ("observations alone say") with its '
        "prior weighed in as a few observations more; each observation is read at what the "
        "others alone say, never at a value the prior has pulled.",
        f"Learned from progress lines (`progress DONE[/TOTAL]`) over intervals of at least "
        f"{result.observe_min_s:g} s with the same co-tenants, and the kernel-active gap from "
        f"telemetry while a job is alone; {result.commands_with_rate_alone} command(s) have a "
        f"known rate alone. A shared interval teaches only where every job in it has run alone "
        f"before (its command's SM share alone, read after its first progress line, is known).",
    )
    for note in notes:
        lines += ["", render.fill(note, wrap, "")]
    if result.simulated:
        said = "SIMULATED: what is learned here comes from jobs run on the CPU, not from a GPU."
        lines.append(render.fill(said, wrap))
    return "\n".join(lines)


@model_app.command("show")
def show_cmd(json_out: JsonOption = False) -> None:
    """Each parameter of the interference model, per GPU model on the station and the defaults.

    Its value (what placement uses), its prior (the published default), its provenance
    (published, derived, assumption, learned, calibrated), the observations that moved it and
    the last update."""
    from gpudesk.cli.no_engine import reading_client

    with reading_client() as client:  # a read: never starts an engine
        result = client.model_show()
    if json_out:
        print_model(result)
        return
    from gpudesk import render

    print(show_text(result, render.table_width()))


@model_app.command("reset")
def reset_cmd(
    gpu_model: Annotated[
        str | None,
        typer.Option("--gpu-model", help="Only this GPU model (its name as `model show` prints)."),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Reset without asking (needed when stdin is not a terminal)."
        ),
    ] = False,
) -> None:
    """Forget what this station learned and calibrated: back to the published defaults."""
    what = gpu_model or "every GPU model"
    if not yes:
        if sys.stdin is None or not sys.stdin.isatty():
            fail(
                "resetting the model needs confirmation: run it in a terminal, or pass --yes",
                EXIT_USAGE,
            )
        if not typer.confirm(f"Drop what was learned and calibrated for {what}?", default=False):
            fail("not reset; nothing was changed", EXIT_FAILED)
    with engine_client() as client:
        result = client.model_reset(gpu_model, confirm=True)
    already_done(f"the interference model was reset all the same for {what}")
    print(
        f"interference model reset for {what}: {result.dropped} learned parameter(s) dropped; "
        "the defaults apply"
    )
