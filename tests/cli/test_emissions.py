"""`gpudesk history --format codecarbon` without an engine: codecarbon's columns in its order, a
job's figures in codecarbon's units, what is not measured left empty, SIMULATED GPUs labelled,
and appending to an emissions.csv as codecarbon does (header once, the file's column order)."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from test_api_prepass import job_wire  # same folder: on sys.path under pytest

from gpudesk import grid
from gpudesk.api.models import JobView
from gpudesk.cli import emissions
from gpudesk.cli.emissions import COLUMNS, EmissionsFileError, StationFacts

# codecarbon 3.3.2 (PyPI, the newest release when checked), codecarbon/output_methods/
# emissions_data.py: the fields of the EmissionsData dataclass, in order. FileOutput.out writes
# `dict(total.values)` (the dataclass's __dict__) with pandas, so these are emissions.csv's
# columns and their order.
CODECARBON_3_3_2_COLUMNS = [
    "timestamp", "project_name", "run_id", "experiment_id", "duration", "emissions",
    "emissions_rate", "cpu_power", "gpu_power", "ram_power", "cpu_energy", "gpu_energy",
    "ram_energy", "energy_consumed", "water_consumed", "country_name", "country_iso_code",
    "region", "cloud_provider", "cloud_region", "os", "python_version", "codecarbon_version",
    "cpu_count", "cpu_model", "gpu_count", "gpu_model", "longitude", "latitude",
    "ram_total_size", "tracking_mode", "cpu_utilization_percent", "gpu_utilization_percent",
    "ram_utilization_percent", "ram_used_gb", "on_cloud", "pue", "wue",
]  # fmt: skip


def facts(*, simulated: bool = False, region: str | None = "US-CA", **names: str) -> StationFacts:
    return StationFacts(
        station_id="gpudesk://box/home/ada/.gpudesk",
        simulated=simulated,
        cores=64,
        cpu_model="AMD EPYC 7742 64-Core Processor",
        ram_total_gb=512.0,
        os="Linux-6.1-x86_64",
        gpu_names={int(k[1:]): v for k, v in names.items()} or {0: "NVIDIA A100-SXM4-40GB"},
        grid=grid.find(region) if region else None,
        version="0.1.0",
    )


USAGE = {"gpu_j": 36000.0, "cpu_j": 7200.0, "total_j": 43200.0, "carbon_g": 2.149}


def ran(gpus: int = 1, **given: Any) -> JobView:
    """A job that ran 100 s and ended, with USAGE (job_wire's usage says 400 g/kWh)."""
    wire = job_wire(
        **{
            "id": 7,
            "name": "train",
            "state": "succeeded",
            "group": "sweep@20261120-140000.42",
            "submitted_at": 1000.5,
            "started_at": 1000.0,
            "ended_at": 1100.0,
            "usage": USAGE,
            **given,
        }
    )
    wire["spec"]["gpus"] = gpus
    return msgspec.convert(wire, JobView)


def test_the_columns_are_codecarbons_in_its_order() -> None:
    assert list(COLUMNS) == CODECARBON_3_3_2_COLUMNS
    assert emissions.render([]) == ",".join(CODECARBON_3_3_2_COLUMNS) + "\n"


def test_a_jobs_figures_in_codecarbons_units() -> None:
    row = emissions.emissions_row(facts(), ran(), [0])
    assert row.duration == 100.0
    assert row.gpu_energy == pytest.approx(0.01)  # 36 kJ = 0.01 kWh
    assert row.cpu_energy == pytest.approx(0.002)
    assert row.energy_consumed == pytest.approx(0.012)
    assert (row.gpu_power, row.cpu_power) == (360.0, 72.0)  # W: mean over the job's wall time
    # kg CO2e: the energy at the grid figure the engine used (job_view's usage says 400 g/kWh)
    assert row.emissions == pytest.approx(0.012 * 400 / 1000)
    assert row.emissions_rate == pytest.approx(row.emissions / 100.0)
    assert (row.ram_power, row.ram_energy) == (None, None)  # not measured: empty, never 0
    assert row.water_consumed == 0.0 and (row.pue, row.wue) == (1.0, 0.0)
    assert row.timestamp == __import__("datetime").datetime.fromtimestamp(1100.0).strftime(
        "%Y-%m-%dT%H:%M:%S"
    )
    assert (row.project_name, row.tracking_mode, row.on_cloud) == ("sweep", "process", "N")
    assert (row.country_name, row.country_iso_code, row.region) == (
        "United States",
        "USA",
        "california",
    )
    assert (row.cpu_count, row.gpu_count, row.ram_total_size) == (64, 1, 512.0)
    assert row.gpu_model == "1 x NVIDIA A100-SXM4-40GB"  # codecarbon's "N x MODEL"
    assert row.codecarbon_version == "gpudesk-0.1.0" and row.python_version == ""


def test_ids_are_stable_uuids_one_experiment_per_run_of_a_profile() -> None:
    station = facts()
    first = emissions.emissions_row(station, ran())
    again = emissions.emissions_row(station, ran())
    other = emissions.emissions_row(station, ran(id=8))
    assert first.run_id == again.run_id != other.run_id
    assert uuid.UUID(first.run_id).version == 5
    assert first.experiment_id == other.experiment_id
    alone = emissions.emissions_row(station, ran(group=None))
    assert alone.project_name == "gpudesk" and alone.experiment_id != first.experiment_id
    elsewhere = emissions.emissions_row(
        StationFacts(**{**_dc(station), "station_id": "gpudesk://other/home"}),
        ran(),
    )
    assert elsewhere.run_id != first.run_id


def _dc(value: StationFacts) -> dict[str, object]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


def test_a_simulated_gpu_says_so_and_a_cpu_job_names_none() -> None:
    sim = facts(simulated=True)
    gpu = emissions.emissions_row(sim, ran(gpus=2), [0, 1])
    assert gpu.gpu_model == "2 x SIMULATED NVIDIA A100-SXM4-40GB"
    cpu = emissions.emissions_row(sim, ran(gpus=0))
    assert (cpu.gpu_count, cpu.gpu_model) == (0, "")
    mixed = facts(g0="NVIDIA H100 80GB HBM3", g1="NVIDIA A100-SXM4-40GB")
    assert (
        emissions.gpu_model(mixed, [0, 1], 2)
        == "1 x NVIDIA H100 80GB HBM3, 1 x NVIDIA A100-SXM4-40GB"
    )


def test_a_figure_given_as_a_number_leaves_the_country_empty_and_unmeasured_energy_empty() -> None:
    row = emissions.emissions_row(facts(region=None), ran(usage={"cpu_s": 3.0}))
    assert (row.country_name, row.country_iso_code, row.region) == ("", "", "")
    assert (row.emissions, row.energy_consumed, row.gpu_energy, row.water_consumed) == (None,) * 4
    cells = next(csv.DictReader(io.StringIO(emissions.render([row]))))
    assert cells["emissions"] == "" and cells["pue"] == "1.0" and cells["gpu_count"] == "1"
    france = emissions.emissions_row(facts(region="FR"), ran())
    assert (france.country_name, france.country_iso_code, france.region) == ("France", "FRA", "")


def rows(*ids: int) -> list[emissions.EmissionsRow]:
    return [emissions.emissions_row(facts(), ran(id=i)) for i in ids]


def read(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_appending_writes_the_header_once_and_each_run_once(tmp_path: Path) -> None:
    path = tmp_path / "emissions.csv"
    assert len(emissions.append(path, rows(1, 2)).rows) == 2
    done = emissions.append(path, rows(1, 2, 3))
    assert (len(done.rows), done.already) == (1, 2)
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS) and lines.count(lines[0]) == 1
    assert [r["run_id"] for r in read(path)] == [r.run_id for r in rows(1, 2, 3)]
    empty = tmp_path / "empty.csv"
    empty.write_text("")  # codecarbon treats an empty file as a new one
    emissions.append(empty, rows(1))
    assert empty.read_text().splitlines()[0] == ",".join(COLUMNS)


def test_appending_follows_the_files_column_order_and_mends_a_missing_newline(
    tmp_path: Path,
) -> None:
    """codecarbon's own check takes the same columns in any order, and writes in the file's."""
    path = tmp_path / "emissions.csv"
    order = list(reversed(COLUMNS))
    path.write_text(emissions.render(rows(1), order).rstrip("\n"))
    emissions.append(path, rows(2))
    text = path.read_text()
    assert text.splitlines()[0] == ",".join(order) and text.endswith("\n")
    got = read(path)
    assert [r["run_id"] for r in got] == [r.run_id for r in rows(1, 2)]
    assert got[1]["gpu_model"] == "1 x NVIDIA A100-SXM4-40GB"


def test_a_file_with_other_columns_is_refused_in_one_paragraph(tmp_path: Path) -> None:
    """A codecarbon 2.x file (no water_consumed, wue, utilisation columns) is not appended to."""
    path = tmp_path / "emissions.csv"
    old = [c for c in COLUMNS if "water" not in c and "utilization" not in c and c != "wue"]
    path.write_text(",".join([*old, "extra"]) + "\n1,2\n")
    before = path.read_text()
    with pytest.raises(EmissionsFileError) as raised:
        emissions.append(path, rows(1))
    message = str(raised.value)
    assert "\n" not in message and path.read_text() == before
    assert message.startswith(
        f"{path} does not have the columns of codecarbon 3.3.2's emissions.csv"
    )
    lacks = "water_consumed, cpu_utilization_percent, gpu_utilization_percent, "
    assert f"it lacks {lacks}ram_utilization_percent, wue; it has extra, which" in message
    assert "it has extra" in message and "give -o a new file" in message
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(
        EmissionsFileError, match=r"it lacks timestamp, .* and 33 more; it has a, b"
    ):
        emissions.append(other, rows(1))
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(EmissionsFileError, match="not UTF-8 text"):
        emissions.append(binary, rows(1))


@pytest.mark.parametrize("header", [False, True], ids=["no-header", "long-row"])
def test_a_file_with_a_field_past_csvs_limit_is_refused_in_one_paragraph(
    tmp_path: Path, header: bool
) -> None:
    """A log or a dump named by mistake (one line of 200 KB, past the csv module's 128 KiB
    field limit), first or after codecarbon's header: refused as not codecarbon's CSV, the
    file left as it was (was a _csv.Error traceback)."""
    path = tmp_path / "emissions.csv"
    path.write_text((",".join(COLUMNS) + "\n" if header else "") + "x" * 200_000 + "\n")
    before = path.read_text()
    with pytest.raises(EmissionsFileError) as raised:
        emissions.append(path, rows(1))
    message = str(raised.value)
    assert message.startswith(f"cannot read {path} to append to it: it is not a CSV file "), message
    assert "field limit" in message and "\n" not in message
    assert path.read_text() == before


def codecarbon_project_summary(project_data: list[dict[str, Any]]) -> dict[str, float]:
    """The totals of codecarbon 3.3.2's dashboard, `codecarbon/viz/data.py`,
    `Data.get_project_summary` (its module imports dash, which this suite does not install):
    Python's `sum` over each record pandas read, as there."""
    return {
        "duration": sum(map(lambda experiment: experiment["duration"], project_data)),
        "emissions": sum(map(lambda experiment: experiment["emissions"], project_data)),
        "energy_consumed": sum(map(lambda experiment: experiment["energy_consumed"], project_data)),
    }


def test_codecarbons_dashboard_totals_are_finite_for_a_project_with_an_unmeasured_job() -> None:
    import math

    pd = pytest.importorskip("pandas")
    jobs = [ran(id=1), ran(id=2, usage={"cpu_s": 3.0}), ran(id=3, gpus=0)]  # 2: no energy read
    assert [emissions.measured(j) for j in jobs] == [True, False, True]

    def summary(chosen: list[JobView]) -> dict[str, float]:
        text = emissions.render([emissions.emissions_row(facts(), j) for j in chosen])
        return codecarbon_project_summary(pd.read_csv(io.StringIO(text)).to_dict("records"))

    # with the unmeasured job's row (empty cells), codecarbon's totals are NaN: why it has none
    assert math.isnan(summary(jobs)["emissions"])
    totals = summary([j for j in jobs if emissions.measured(j)])
    assert all(math.isfinite(v) for v in totals.values())
    assert totals["energy_consumed"] == pytest.approx(2 * 43200.0 / 3.6e6)
