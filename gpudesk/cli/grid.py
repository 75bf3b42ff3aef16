"""`gpudesk grid [TEXT]`: the bundled grid carbon-intensity table (gpudesk.grid), so that
`[station] grid_intensity = "CODE"` and `gpudesk history --format codecarbon` users can find
their code: every row's figure, year and source."""

from __future__ import annotations

import typer

from gpudesk.cli.common import fail, print_json
from gpudesk.cli.exit_codes import EXIT_USAGE
from gpudesk.core.record_dict import record_dict
from gpudesk.text import printable_line

grid_app = typer.Typer()


@grid_app.command("grid")
def grid_command(
    text: str | None = typer.Argument(
        None, metavar="[CODE|NAME]", help="A code (FR, FRA, US-CA) or part of a name (land)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Grid carbon intensities gpudesk knows, by country and US state: the codes
    `[station] grid_intensity` takes, in g CO2e per kWh, with each figure's year and source
    (docs/emissions.md)."""
    from gpudesk import grid, render

    rows = list(grid.regions()) if text is None else grid.search(text)
    if not rows:
        fail(
            f"nothing in gpudesk's grid table matches '{printable_line(text or '')}'"
            f"{grid.suggestions(text or '')}",
            EXIT_USAGE,
        )
    if json_out:
        print_json({"regions": [record_dict(r) for r in rows]})
        return
    table, _ = render.fitted_table(
        ("CODE", "ALPHA-3", "NAME", "G CO2E/KWH", "YEAR", "SOURCE"),
        [(r.code, r.alpha3 or "-", r.name, f"{r.g_per_kwh:g}", r.year, r.source) for r in rows],
        width=render.terminal_width(),
        optional=(4, 1),  # ALPHA-3 gives way first (CODE names the region), then YEAR
        max_widths={2: 28},
        right=(3,),
        shrink=(5, 2),  # the long source first: a country keeps its name
    )
    print(table)
