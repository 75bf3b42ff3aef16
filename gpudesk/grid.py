"""The bundled grid carbon-intensity table: `[station] grid_intensity = "FR"` (or "FRA", "fr",
"US-CA") picks a row of gpudesk/data/grid_intensity.csv, whose header names its sources (codecarbon
3.3.2's data: Our World in Data per country, EPA eGRID2023 per US state) and how it was built
(tools/build_grid_table.py). Every row carries its figure's year and source, shown wherever
the figure is (docs/emissions.md).

A leaf module (stdlib only, imports nothing of gpudesk): the engine resolves codes with it, the
CLI lists the table and fills codecarbon's country columns from it.
"""

from __future__ import annotations

import functools

import msgspec

TABLE = "data/grid_intensity.csv"  # in the gpudesk package


class GridRegion(msgspec.Struct, frozen=True):
    """One row of the table: a country (ISO 3166-1) or a US state (ISO 3166-2, "US-CA")."""

    code: str  # the alpha-2 code of a country, "US-CA" for a state: the code gpudesk keeps
    alpha3: str  # a country's alpha-3 code; "" for a state
    name: str
    g_per_kwh: float  # grams of CO2-equivalent per kWh
    year: int  # the year the figure describes
    source: str  # "Our World in Data 2023 via codecarbon 3.3.2"

    @property
    def country(self) -> str:
        """The alpha-2 code of the country it lies in (an ISO 3166-2 code begins with it)."""
        return self.code.split("-", 1)[0]

    @property
    def label(self) -> str:
        """ "FR, Our World in Data 2023 via codecarbon 3.3.2": where the figure comes from."""
        return f"{self.code}, {self.source}"


@functools.lru_cache(maxsize=1)
def regions() -> tuple[GridRegion, ...]:
    """Every row, in the table's order (by code)."""
    # Imported here: the engine and most commands import this module (gpudesk.core.station) and
    # never read the table; these cost ~5 ms a process.
    import csv
    import io
    from importlib import resources

    text = resources.files("gpudesk").joinpath(TABLE).read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return tuple(
        GridRegion(
            code=row["code"],
            alpha3=row["alpha3"],
            name=row["name"],
            g_per_kwh=float(row["g_co2e_per_kwh"]),
            year=int(row["year"]),
            source=row["source"],
        )
        for row in csv.DictReader(io.StringIO("\n".join(lines)))
    )


@functools.lru_cache(maxsize=1)
def _by_code() -> dict[str, GridRegion]:
    found: dict[str, GridRegion] = {}
    for region in regions():
        found[region.code] = region
        if region.alpha3:
            found[region.alpha3] = region
    return found


def find(code: str) -> GridRegion | None:
    """The row for an alpha-2 or alpha-3 country code or a "US-CA" state code, in any case."""
    return _by_code().get(code.strip().upper())


def lookup(code: str) -> GridRegion:
    """As `find`, but an unknown code raises ValueError naming the closest codes (by code, or
    by name: "france" suggests FR)."""
    region = find(code)
    if region is not None:
        return region
    raise ValueError(f"{code!r} is not in gpudesk's grid table{suggestions(code)}")


# Codes people write that ISO 3166-1 reserves for another country's use: suggested, never
# taken (UK is "exceptionally reserved" for the United Kingdom, whose code is GB).
_RESERVED = {"UK": "GB", "EL": "GR"}


def suggestions(code: str) -> str:
    """ "; did you mean FR (France)? `gpudesk grid` lists the codes" or the listing hint: a
    name like the text first ("france", "germny"), else codes like it ("FRX")."""
    import difflib  # only a mistyped code needs it (as the table's readers, above)

    wanted = code.strip()
    by_code = _by_code()
    names = {r.name.lower(): r for r in regions()}
    picked = [names[n] for n in difflib.get_close_matches(wanted.lower(), list(names), 3, 0.75)]
    if wanted.upper() in _RESERVED:
        picked = [by_code[_RESERVED[wanted.upper()]]]  # both rows are in the table (a test)
    if not picked:
        close = difflib.get_close_matches(wanted.upper(), list(by_code), n=6, cutoff=0.6)
        for region in (by_code[c] for c in close):
            if region not in picked:
                picked.append(region)
    listing = "`gpudesk grid` lists the codes, `gpudesk grid TEXT` finds one by name"
    if not picked:
        return f"; {listing}"
    shown = ", ".join(f"{r.code} ({r.name})" for r in picked[:3])
    return f"; did you mean {shown}? {listing}"


def search(text: str) -> list[GridRegion]:
    """The rows whose code is `text`, else those whose name contains it (any case)."""
    exact = find(text)
    if exact is not None:
        return [exact]
    wanted = text.strip().lower()
    return [r for r in regions() if wanted in r.name.lower()]
