"""Build gpudesk/data/grid_intensity.csv, the grid carbon-intensity table `[station]
grid_intensity = "FR"` reads, from codecarbon's bundled data. Nothing is fetched: give it the
folder of an unpacked codecarbon wheel (`pip download codecarbon==3.3.2 --no-deps`, then
`python -m zipfile -e codecarbon-3.3.2-py3-none-any.whl DIR`) and Debian's iso-codes JSON
(`apt-get install iso-codes`), then

    python tools/build_grid_table.py DIR > gpudesk/data/grid_intensity.csv

Countries: `carbon_intensity` of codecarbon/data/private_infra/global_energy_mix.json (g CO2e per
kWh, per ISO 3166-1 alpha-3 code, with the year of each figure). codecarbon's methodology
(docs/explanation/methodology.md) names Our World in Data's "carbon intensity of electricity"
as its source; OWID credits Ember and the Energy Institute's Statistical Review of World Energy.
US states: codecarbon/data/private_infra/2023/usa_emissions.json, EPA eGRID2023's STC2ERTA (the
state's annual CO2-equivalent total output emission rate) in lb/MWh, turned into g/kWh with
codecarbon's own factor (core/units.py LBS_MWH_TO_KG_KWH = 0.00045359237 kg/kWh per lb/MWh).

Only figures a source gives are kept: a zero intensity (codecarbon's for the Central African
Republic) is a gap in the data, not a measurement, and is left out. codecarbon's Canadian
provinces (an energy mix, no intensity), Nordic bidding zones (derived from a mix) and Chinese
provinces (CO2 only, not CO2e) are not taken.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

CODECARBON_VERSION = "3.3.2"
KG_KWH_PER_LB_MWH = 0.00045359237  # codecarbon core/units.py LBS_MWH_TO_KG_KWH
ISO_CODES = Path("/usr/share/iso-codes/json")

HEADER = f"""\
# gpudesk's grid carbon-intensity table: grams of CO2-equivalent per kWh of electricity for a
# country (ISO 3166-1: `code` alpha-2, `alpha3` alpha-3) or a US state (ISO 3166-2 `US-CA`),
# with the year of the figure and its source. `[station] grid_intensity = "FR"` picks a row.
# Built by tools/build_grid_table.py from the data files of codecarbon {CODECARBON_VERSION}
# (https://github.com/mlco2/codecarbon), used under its MIT License, quoted whole at the end
# of this header.
# Countries: codecarbon/data/private_infra/global_energy_mix.json `carbon_intensity`, which
#   codecarbon's methodology takes from Our World in Data (carbon intensity of electricity
#   generation; OWID's sources: Ember, Energy Institute Statistical Review of World Energy).
# US states: codecarbon/data/private_infra/2023/usa_emissions.json, EPA eGRID2023 STC2ERTA
#   (annual CO2e total output emission rate), lb/MWh x 0.45359237 = g/kWh.
# Names and alpha-2 codes: Debian iso-codes (iso_3166-1.json, iso_3166-2.json).
# Left out: CF (Central African Republic), whose codecarbon figure is 0, a gap in the data.
"""


def rows(codecarbon: Path, iso_codes: Path) -> list[dict[str, object]]:
    infra = codecarbon / "codecarbon" / "data" / "private_infra"
    countries = json.loads((infra / "global_energy_mix.json").read_text())
    iso = json.loads((iso_codes / "iso_3166-1.json").read_text())["3166-1"]
    by_alpha3 = {c["alpha_3"]: c for c in iso}
    subdivisions = {
        s["code"]: s["name"]
        for s in json.loads((iso_codes / "iso_3166-2.json").read_text())["3166-2"]
    }
    out: list[dict[str, object]] = []
    for alpha3, data in sorted(countries.items()):
        intensity = float(data["carbon_intensity"])
        if intensity <= 0:
            continue  # a gap in the data, not a figure
        entry = by_alpha3[alpha3]  # KeyError: codecarbon has a code ISO 3166-1 does not
        year = int(data["year"])
        out.append(
            {
                "code": entry["alpha_2"],
                "alpha3": alpha3,
                "name": entry.get("common_name", entry["name"]),
                "g_co2e_per_kwh": round(intensity, 3),
                "year": year,
                "source": f"Our World in Data {year} via codecarbon {CODECARBON_VERSION}",
            }
        )
    usa = json.loads((infra / "2023" / "usa_emissions.json").read_text())
    source = usa["_source"]
    assert usa["_unit"]["emissions"] == "lbs/MWh", usa["_unit"]
    for key, data in sorted(usa.items(), key=lambda item: str(item[1])):
        if key.startswith("_") or len(data["regionCode"]) != 2:
            continue  # the metadata, and the national rate (countries come from OWID)
        code = f"US-{data['regionCode']}"
        out.append(
            {
                "code": code,
                "alpha3": "",
                "name": subdivisions[code],
                "g_co2e_per_kwh": round(data["emissions"] * KG_KWH_PER_LB_MWH * 1000, 3),
                "year": int(source["year"]),
                "source": f"EPA eGRID{source['year']} via codecarbon {CODECARBON_VERSION}",
            }
        )
    out.sort(key=lambda row: str(row["code"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("codecarbon", type=Path, help="an unpacked codecarbon wheel")
    parser.add_argument("--iso-codes", type=Path, default=ISO_CODES)
    args = parser.parse_args()
    sys.stdout.write(HEADER)
    licence = next((args.codecarbon).glob("codecarbon-*.dist-info/licenses/LICENSE"))
    sys.stdout.write("#\n# codecarbon's LICENSE:\n")
    for line in licence.read_text().strip().splitlines():
        sys.stdout.write(f"#   {line}".rstrip() + "\n")
    fields = ["code", "alpha3", "name", "g_co2e_per_kwh", "year", "source"]
    writer = csv.DictWriter(sys.stdout, fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows(args.codecarbon, args.iso_codes))


if __name__ == "__main__":
    main()
