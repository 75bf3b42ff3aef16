"""The bundled grid carbon-intensity table and `[station] grid_intensity` given as a code: every
row cited with a positive figure, alpha-2, alpha-3 and US-state codes in any case, an unknown
code refused naming the close ones, a number still taken (and range-checked), and the code kept
with the figure through the store, `configure` and the replies."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest
from conftest import EngineInProcess, Run
from test_api_prepass import job_view  # same folder: on sys.path under pytest

from gpudesk import grid
from gpudesk.api.models import ConfigureResult, StationStatus
from gpudesk.cli.run_report import RunReport
from gpudesk.core.identity import Caller, Identity
from gpudesk.core.reconfigure import weigh
from gpudesk.core.station import StationConfig
from gpudesk.paths import Home
from gpudesk.policy.access import Access
from gpudesk.profile import ProfileError, parse_profile

FRANCE = grid.find("FR")
OWID_2023 = "Our World in Data 2023 via codecarbon 3.3.2"


# ------------------------------------------------------------------ the table
def test_every_row_has_a_positive_figure_a_year_and_a_source() -> None:
    rows = grid.regions()
    assert len(rows) > 250  # 212 countries and 51 US states (with DC)
    for row in rows:
        assert 0 < row.g_per_kwh <= 2000, row  # what [station] grid_intensity accepts
        assert 1990 <= row.year <= 2030, row
        assert row.source.endswith("via codecarbon 3.3.2"), row
        assert row.source.startswith(("Our World in Data ", "EPA eGRID")), row
        assert str(row.year) in row.source, row
        assert row.name, row
    codes = [r.code for r in rows] + [r.alpha3 for r in rows if r.alpha3]
    assert len(codes) == len(set(codes)), "a code names two rows"
    assert all(len(r.code) == 2 and len(r.alpha3) == 3 for r in rows if "-" not in r.code)
    assert all(r.code.startswith("US-") and not r.alpha3 for r in rows if "-" in r.code)


def test_the_data_file_names_its_sources_and_codecarbons_licence() -> None:
    text = (Path(grid.__file__).parent / grid.TABLE).read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    for cited in ("codecarbon 3.3.2", "Our World in Data", "Ember", "eGRID2023", "MIT License"):
        assert cited in header, cited
    assert "Copyright (c) 2023 Code Carbon NGO" in header


def test_figures_match_codecarbons_data() -> None:
    """Spot checks against codecarbon 3.3.2's files: global_energy_mix.json FRA 56.039 and DEU
    380.95 g/kWh (2023); usa_emissions.json california 394.769 lb/MWh (eGRID2023)."""
    assert FRANCE is not None and (FRANCE.g_per_kwh, FRANCE.year) == (56.039, 2023)
    assert grid.lookup("DEU").g_per_kwh == 380.95
    assert grid.lookup("US-CA").g_per_kwh == pytest.approx(394.769 * 0.45359237, abs=1e-3)
    assert grid.lookup("US-CA").source == "EPA eGRID2023 via codecarbon 3.3.2"


@pytest.mark.parametrize("code", ["FR", "fr", "FRA", "fra", " Fr "])
def test_alpha2_alpha3_and_any_case_name_one_row(code: str) -> None:
    assert grid.lookup(code) == FRANCE


def test_a_us_state_is_its_iso_3166_2_code() -> None:
    california = grid.lookup("us-ca")
    assert (california.code, california.name, california.country) == ("US-CA", "California", "US")


@pytest.mark.parametrize(
    ("code", "suggested"),
    [("FRX", "FR (France)"), ("france", "FR (France)"), ("Germny", "DE (Germany)"),
     ("UK", "GB (United Kingdom)"), ("US-CAL", "US-CA (California)")],
)  # fmt: skip
def test_an_unknown_code_names_the_close_ones(code: str, suggested: str) -> None:
    with pytest.raises(ValueError) as raised:
        grid.lookup(code)
    message = str(raised.value)
    assert message.startswith(f"{code!r} is not in gpudesk's grid table; did you mean ")
    assert suggested in message and "`gpudesk grid` lists the codes" in message


def test_search_finds_by_code_or_by_part_of_a_name() -> None:
    assert grid.search("fra") == [FRANCE]
    assert {r.code for r in grid.search("carolina")} == {"US-NC", "US-SC"}
    assert grid.search("atlantis") == []


def test_gpudesk_grid_lists_the_codes_and_refuses_an_unknown_one(
    gpudesk: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    code, out, _ = gpudesk("grid", "fra")
    assert code == 0 and out.splitlines()[1].split() == [
        "FR", "FRA", "France", "56.039", "2023", *OWID_2023.split(),
    ]  # fmt: skip
    code, out, _ = gpudesk("grid", "--json")
    assert {"FR", "DE", "US-CA"} <= {r["code"] for r in json.loads(out)["regions"]}
    code, _, err = gpudesk("grid", "atlantis")
    assert code == 2 and err.startswith("error: nothing in gpudesk's grid table matches 'atlantis'")


# ------------------------------------------------------------------ [station] grid_intensity
def test_a_code_resolves_to_its_figure_and_is_kept_with_it() -> None:
    config = StationConfig.from_dict({"grid_intensity": "fra"})
    assert (config.grid_intensity, config.grid_region) == (56.039, "FR")
    assert config.grid_source == OWID_2023
    # the store and `configure` keep the code: a newer table's figure follows it
    assert config.to_dict()["grid_intensity"] == "FR" and "grid_region" not in config.to_dict()
    assert StationConfig.from_dict(config.to_dict()) == config
    view = config.view()  # what replies carry
    assert (view["grid_intensity"], view["grid_region"], view["grid_source"]) == (
        56.039,
        "FR",
        OWID_2023,
    )


def test_a_number_is_still_a_figure_and_is_range_checked() -> None:
    config = StationConfig.from_dict({"grid_intensity": 300})
    assert (config.grid_intensity, config.grid_region, config.grid_source) == (300.0, None, None)
    assert config.to_dict()["grid_intensity"] == 300.0
    assert "grid_region" not in config.view() and "grid_source" not in config.view()
    assert StationConfig.from_dict({"grid_intensity": 0}).grid_intensity == 0.0
    for bad in (2000.5, -1, True, [56]):
        with pytest.raises(ValueError) as raised:
            StationConfig.from_dict({"grid_intensity": bad})
        assert str(raised.value).startswith(
            "station.grid_intensity: expected g CO2e per kWh from 0 to 2000, or a country or "
            'region code such as "FR"'
        )


def test_an_unknown_code_in_a_profile_is_one_problem_naming_the_close_ones() -> None:
    toml = (
        b'name = "p"\n[station]\ngrid_intensity = "FRX"\n[[jobs]]\nname = "a"\ncommand = ["true"]\n'
    )
    with pytest.raises(ProfileError) as raised:
        parse_profile(toml, "p.toml")
    text = str(raised.value)
    assert "p.toml:3" in text and "station.grid_intensity" in text
    assert "did you mean FR (France)" in text
    good = parse_profile(toml.replace(b'"FRX"', b'"us-ca"'), "p.toml")
    assert (good.station.grid_region, good.station_keys) == ("US-CA", ("grid_intensity",))


def test_reconfiguring_the_grid_says_the_code_its_figure_and_source() -> None:
    coded = weigh(StationConfig(), {"grid_intensity": "DE"}, refusal=None)
    assert [c.message for c in coded.changes] == [
        "grid_intensity 475 → DE (380.95 g CO2e/kWh, Our World in Data 2023 via codecarbon 3.3.2)"
    ]
    assert coded.config.grid_region == "DE"
    # the same figure as a number is a change too: the figure no longer follows the table
    back = weigh(coded.config, {"grid_intensity": 380.95}, refusal=None)
    assert [c.message for c in back.changes] == ["grid_intensity DE → 380.95"]
    assert back.config.grid_region is None
    refused = weigh(coded.config, {"grid_intensity": "FR"}, refusal="only an admin")
    assert [n.message for n in refused.not_applied] == [
        "not applied: grid_intensity FR (the station runs DE; only an admin)"
    ]
    assert (refused.config.grid_intensity, refused.config.grid_region) == (380.95, "DE")
    assert weigh(coded.config, {"grid_intensity": "deu"}, refusal=None).changes == ()


ADMIN = Caller(Identity.of(os.getuid(), os.getgid(), [os.getgid()]), 1)


@pytest.fixture
def engine(home: Home) -> Iterator[EngineInProcess]:
    handlers = EngineInProcess(home, StationConfig(backend="none", slots=1), Access.personal())
    try:
        yield handlers
    finally:
        handlers.close()


def test_the_replies_carry_the_code_and_source_and_the_models_take_them(
    engine: EngineInProcess,
) -> None:
    plain = msgspec.convert(engine.ok(ADMIN, "status"), StationStatus).station
    assert (plain.grid_region, plain.grid_source) == (None, None)
    assert plain.grid_text == "475 g CO2e/kWh"
    configured = msgspec.convert(
        engine.ok(ADMIN, "configure", station={"grid_intensity": "us-ca"}), ConfigureResult
    )
    assert configured.station.grid_region == "US-CA"
    assert configured.changes[0].new == "US-CA"
    station = msgspec.convert(engine.ok(ADMIN, "status"), StationStatus).station
    assert station.grid_intensity == grid.lookup("US-CA").g_per_kwh
    assert station.grid_text == (
        f"{station.grid_intensity:g} g CO2e/kWh (US-CA, EPA eGRID2023 via codecarbon 3.3.2)"
    )


def test_the_run_reports_carbon_line_names_the_code_and_source() -> None:
    usage = {"gpu_j": 7200.0, "total_j": 7200.0, "carbon_g": 0.112}
    done = job_view(state="succeeded", started_at=100.0, ended_at=102.0, usage=usage)
    report = RunReport("p", "g", 100.0, 110.0, jobs=[done], backend="nvml")
    report.grid_g_per_kwh, report.grid_region, report.grid_source = 56.039, "FR", OWID_2023
    line = " ".join(report.energy_line().split())
    assert line.endswith(f"g CO2e at 56.039 g/kWh (FR, {OWID_2023}; backend nvml)"), line
    assert report.to_dict()["grid"] == {"g_per_kwh": 56.039, "region": "FR", "source": OWID_2023}
    report.grid_region = report.grid_source = None
    assert report.energy_line().endswith("at 56.039 g/kWh (backend nvml)")


def test_the_desk_header_names_the_grid_code_and_source_where_they_fit(
    engine: EngineInProcess,
) -> None:
    from gpudesk.screens.widgets.strips import render_header

    engine.ok(ADMIN, "configure", station={"grid_intensity": "US-CA"})
    station = msgspec.convert(engine.ok(ADMIN, "status"), StationStatus).station
    state = SimpleNamespace(
        station=station,
        simulated=False,
        counts=dict,
        jobs=[],
        status=None,
        total_energy_j=lambda: (21960.0, "today"),
        carbon_g=lambda: 1.2,
    )
    wide = str(render_header(state, width=200))  # type: ignore[arg-type]
    assert wide.endswith("6.10 Wh today ≈1.2 g CO2e (US-CA, EPA eGRID2023 via codecarbon 3.3.2)")
    narrow = str(render_header(state, width=66))  # type: ignore[arg-type]
    assert narrow.endswith("6.10 Wh today ≈1.2 g CO2e US-CA"), narrow
    assert str(render_header(state, width=48)).endswith("6.10 Wh today")  # type: ignore[arg-type]


def test_a_saved_setting_no_longer_accepted_goes_back_to_its_default_alone(caplog):
    """A grid code a newer table dropped must not reset the admin's other saved settings."""
    from gpudesk.engine.startup import home_config

    class Saved:
        def setting(self, _name: str) -> object:
            return {"policy": "fifo", "slots": 3, "grid_intensity": "XX-NOWHERE"}

    with caplog.at_level("WARNING", logger="gpudesk.engine"):
        config = home_config(Saved(), None)  # type: ignore[arg-type]
    assert (config.policy, config.slots) == ("fifo", 3)
    assert config.grid_intensity == StationConfig().grid_intensity
    assert "grid_intensity" in caplog.text
