"""`gpudesk history --format codecarbon`: finished jobs as rows of codecarbon's emissions.csv, so
codecarbon's tools, a notebook or a spreadsheet that reads that file reads gpudesk's accounting.

The columns are codecarbon 3.3.2's, in its order: `EmissionsData` in
codecarbon/output_methods/emissions_data.py, whose fields `FileOutput` writes as the CSV's
columns. Units as codecarbon's: duration s, emissions kg CO2eq, emissions_rate kg/s, powers W,
energies kWh, ram_total_size GB (codecarbon's GB are 1024³ bytes), timestamp local time as
codecarbon writes it ("%Y-%m-%dT%H:%M:%S"). One row per job that ran and ended: codecarbon writes
a run's row when it stops, so a running job has none yet and a job cancelled before it started
ran nothing.

What gpudesk does not measure is left empty, never made up: RAM energy and power (RAPL's package
domain is read, not DRAM; codecarbon would estimate 5 W per DIMM), CPU energy where RAPL is not
readable, the utilisation means (codecarbon's are machine-wide), the job's Python version (a job
need not be Python), longitude and latitude. `codecarbon_version` says "gpudesk-VERSION": these
rows were not written by codecarbon. pue 1 and wue 0 (so water_consumed 0) are codecarbon's own
defaults: no data-centre overhead is counted. Every column's source is in docs/emissions.md.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import os
import platform
import socket
import sys
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from gpudesk.units import J_PER_KWH, MIB_PER_GIB, carbon_g

if TYPE_CHECKING:
    from gpudesk.api.client import Client
    from gpudesk.api.models import JobView
    from gpudesk.grid import GridRegion

CODECARBON_VERSION = "3.3.2"  # the release whose emissions.csv columns these are
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S"  # codecarbon's EmissionsTracker._prepare_emissions_data
DEFAULT_PROJECT = "gpudesk"  # a job submitted outside a profile's run
SIMULATED = "SIMULATED "  # before the model of a simulated GPU: every report says so
PUE = 1.0  # codecarbon's default: no data-centre overhead counted
WUE = 0.0  # codecarbon's default (L/kWh), so water_consumed is 0


@dataclass(frozen=True)
class EmissionsRow:
    """One job as a row of codecarbon's emissions.csv: the fields are its columns, in its order.
    None is an empty cell (pandas reads NaN): not measured by gpudesk."""

    timestamp: str
    project_name: str
    run_id: str
    experiment_id: str
    duration: float
    emissions: float | None
    emissions_rate: float | None
    cpu_power: float | None
    gpu_power: float | None
    ram_power: float | None
    cpu_energy: float | None
    gpu_energy: float | None
    ram_energy: float | None
    energy_consumed: float | None
    water_consumed: float | None
    country_name: str
    country_iso_code: str
    region: str
    cloud_provider: str
    cloud_region: str
    os: str
    python_version: str
    codecarbon_version: str
    cpu_count: int
    cpu_model: str
    gpu_count: int
    gpu_model: str
    longitude: float | None
    latitude: float | None
    ram_total_size: float | None
    tracking_mode: str
    cpu_utilization_percent: float | None
    gpu_utilization_percent: float | None
    ram_utilization_percent: float | None
    ram_used_gb: float | None
    on_cloud: str
    pue: float
    wue: float

    def cells(self) -> list[str]:
        return [_cell(value) for value in astuple(self)]


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(EmissionsRow))


def _cell(value: object) -> str:
    """A value as pandas' to_csv writes it (codecarbon's writer): None empty, floats by repr."""
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class StationFacts:
    """What every row says of the station: taken once, from the engine and this machine (the
    control socket is a Unix socket: the CLI runs where the engine does)."""

    station_id: str  # "gpudesk://HOST/HOME": the namespace of run and experiment ids
    simulated: bool
    cores: int
    cpu_model: str
    ram_total_gb: float | None
    os: str
    gpu_names: dict[int, str]  # GPU index -> its model as NVML names it
    grid: GridRegion | None  # the station's grid code's row; None for a figure given as a number
    version: str  # gpudesk's


def station_facts(client: Client) -> StationFacts:
    from gpudesk import __version__, grid

    status = client.status()
    snapshot = client.telemetry().snapshot  # None before the engine's first sample
    station = status.station
    return StationFacts(
        station_id=f"gpudesk://{socket.gethostname()}{status.home}",
        simulated=station.simulated,
        cores=station.cores,
        cpu_model=cpu_model(),
        ram_total_gb=snapshot.host.memory_total_mib / MIB_PER_GIB if snapshot else None,
        os=platform.platform(),
        gpu_names={g.index: g.name for g in snapshot.gpus if g.name} if snapshot else {},
        grid=grid.find(station.grid_region) if station.grid_region else None,
        version=__version__,
    )


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as Linux gives it (codecarbon reads the same), else what Python's
    platform module knows (often "")."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor()


def run_id(facts: StationFacts, job: JobView) -> str:
    """A UUID that is this job's on this station for good: uuid5 of the station, the job's id
    and when it was submitted (a home whose database was made anew numbers jobs from 1 again)."""
    return str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"{facts.station_id}/jobs/{job.id}@{job.submitted_at!r}")
    )


def experiment_id(facts: StationFacts, project: str, group: str | None) -> str:
    """One run of a profile (its group) is one experiment; jobs submitted alone share the
    station's "gpudesk" experiment."""
    name = group if group is not None else project
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{facts.station_id}/experiments/{name}"))


def gpu_model(facts: StationFacts, indices: Sequence[int], count: int) -> str:
    """codecarbon's "1 x NVIDIA A100-SXM4-40GB" (its count and model of the GPUs tracked; models
    joined by ", " where they differ), SIMULATED before each simulated model."""
    if count == 0:
        return ""
    label = SIMULATED if facts.simulated else ""
    names = [facts.gpu_names.get(i) for i in indices]
    if not indices or None in names:
        known = set(facts.gpu_names.values())
        if len(known) != 1:
            return f"{count} x {label}GPU" if label else ""  # models unknown: none is named
        names = [known.pop()] * count
    counted = Counter(names)
    return ", ".join(f"{n} x {label}{name}" for name, n in counted.items())


def job_gpus(client: Client, facts: StationFacts, job: JobView) -> list[int]:
    """The GPU indices the job's last attempt held, asked of the engine only where the
    station's GPUs are not all one model (a finished job's JobView no longer says)."""
    if job.spec.gpus == 0 or len(set(facts.gpu_names.values())) <= 1:
        return []
    attempts = client.show(job.id).attempts
    return list(attempts[-1].placement.gpus) if attempts else []


def kwh(joules: float | None) -> float | None:
    return None if joules is None else joules / J_PER_KWH


def per_second(amount: float | None, seconds: float) -> float | None:
    """A mean rate over the job's wall time: W from J, kg/s from kg (0 for a job of no time,
    as codecarbon's emissions_rate)."""
    if amount is None:
        return None
    return amount / seconds if seconds > 0 else 0.0


def emissions_row(facts: StationFacts, job: JobView, gpus: Sequence[int] = ()) -> EmissionsRow:
    """The job as codecarbon would have written it, had it tracked the job's process tree from
    its first start to its end. `job` ran (started_at and ended_at are set) and has usage."""
    from gpudesk.api.submit import profile_of_group

    assert job.started_at is not None and job.ended_at is not None
    duration = max(0.0, job.ended_at - job.started_at)
    usage = job.usage
    # The engine's carbon_g is rounded to a milligram; the same product, of the energy and the
    # grid figure the engine used, keeps a short job's few micrograms.
    grams = carbon_g(usage.total_j, usage.grid_g_per_kwh) if usage else None
    carbon_kg = None if grams is None else grams / 1000.0
    project = profile_of_group(job.group) if job.group else DEFAULT_PROJECT
    where = facts.grid
    country = None
    if where is not None:
        from gpudesk import grid

        country = grid.find(where.country)
    return EmissionsRow(
        timestamp=dt.datetime.fromtimestamp(job.ended_at).strftime(TIMESTAMP_FORMAT),
        project_name=project,
        run_id=run_id(facts, job),
        experiment_id=experiment_id(facts, project, job.group),
        duration=duration,
        emissions=carbon_kg,
        emissions_rate=per_second(carbon_kg, duration),
        cpu_power=per_second(usage.cpu_j if usage else None, duration),
        gpu_power=per_second(usage.gpu_j if usage else None, duration),
        ram_power=None,  # not measured
        cpu_energy=kwh(usage.cpu_j if usage else None),
        gpu_energy=kwh(usage.gpu_j if usage else None),
        ram_energy=None,  # not measured
        energy_consumed=kwh(usage.total_j if usage else None),
        water_consumed=None if usage is None or usage.total_j is None else 0.0,  # WUE 0
        country_name=country.name if country else "",
        country_iso_code=country.alpha3 if country else "",
        # codecarbon names a US state's region in lower case ("california", usa_emissions.json)
        region=where.name.lower() if where is not None and where.code != where.country else "",
        cloud_provider="",
        cloud_region="",
        os=facts.os,
        python_version="",  # the job's, which gpudesk does not know (it need not be Python)
        codecarbon_version=f"gpudesk-{facts.version}",  # not codecarbon: gpudesk wrote the row
        cpu_count=facts.cores,
        cpu_model=facts.cpu_model,
        gpu_count=job.spec.gpus,
        gpu_model=gpu_model(facts, gpus, job.spec.gpus),
        longitude=None,
        latitude=None,
        ram_total_size=facts.ram_total_gb,
        tracking_mode="process",  # the job's process tree, its share of shared GPUs and CPU
        cpu_utilization_percent=None,
        gpu_utilization_percent=None,
        ram_utilization_percent=None,
        ram_used_gb=None,
        on_cloud="N",
        pue=PUE,
        wue=WUE,
    )


def measured(job: JobView) -> bool:
    """Whether any of the job's energy was measured. codecarbon writes every row with its
    energy (an estimate where it measures nothing), and its dashboard adds the rows up
    (`codecarbon.viz.data.Data.get_project_summary`: Python's `sum` over the records pandas
    read, where an empty cell is NaN), so one row without energy made a whole project's totals
    NaN. gpudesk writes no estimate: a job with none measured (a CPU job where RAPL is not
    readable, a Slurm job) gets no row."""
    return job.usage is not None and job.usage.total_j is not None


@dataclass(frozen=True)
class Rows:
    rows: list[EmissionsRow]  # oldest end first
    unmeasured: int  # jobs that ran but have no energy measured: no row


def rows_for(client: Client, jobs: Iterable[JobView]) -> Rows:
    """A row for each job that ran and has energy measured, oldest end first (codecarbon
    appends as runs stop)."""
    ran = [j for j in jobs if j.started_at is not None and j.ended_at is not None]
    kept = [j for j in ran if measured(j)]
    if not kept:
        return Rows([], len(ran))
    facts = station_facts(client)
    kept.sort(key=lambda j: (j.ended_at, j.id))
    rows = [emissions_row(facts, job, job_gpus(client, facts, job)) for job in kept]
    return Rows(rows, len(ran) - len(kept))


def render(
    rows: Sequence[EmissionsRow], order: Sequence[str] = COLUMNS, *, header: bool = True
) -> str:
    """The CSV text: the header line (unless not `header`), then each row, columns in `order`
    (an existing file's)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if header:
        writer.writerow(order)
    at = [COLUMNS.index(name) for name in order]
    for row in rows:
        cells = row.cells()
        writer.writerow([cells[i] for i in at])
    return out.getvalue()


class EmissionsFileError(Exception):
    """An emissions.csv gpudesk will not append to; the message is one paragraph."""


@dataclass(frozen=True)
class Appended:
    rows: list[EmissionsRow]  # those written
    already: int  # rows whose run_id the file holds already


def append(path: Path, rows: Sequence[EmissionsRow]) -> Appended:
    """Append `rows` to an emissions.csv as codecarbon does: a new (or empty) file gets the
    header first; a file whose header has the same columns, in any order (codecarbon's own
    check), gets the rows in its order. A row whose run_id the file holds already is not
    written again, so exporting twice adds only the jobs that ended since. A file with other
    columns is refused (codecarbon would move it aside as a backup and start a new one)."""
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise EmissionsFileError(f"cannot read {path} to append to it: {_why(exc)}") from None
    header: list[str] = []
    present: set[str] = set()
    if text.strip():
        reader = csv.reader(io.StringIO(text))
        try:
            header = next(reader)
            if sorted(header) != sorted(COLUMNS):
                raise EmissionsFileError(_mismatch(path, header))
            at = header.index("run_id")
            present = {line[at] for line in reader if len(line) > at}
        except csv.Error as exc:  # a field past csv's limit (128 KiB): a log, not a CSV
            raise EmissionsFileError(f"cannot read {path} to append to it: {_why(exc)}") from None
    new = [row for row in rows if row.run_id not in present]
    if header:
        chunk = render(new, header, header=False)
        if chunk and not text.endswith("\n"):
            chunk = "\n" + chunk  # a file cut after its last row's values
    else:
        chunk = render(new)
    try:
        _append_whole(path, chunk.encode("utf-8"), anew=not header)
    except OSError as exc:
        raise EmissionsFileError(f"cannot write {path}: {_why(exc)}") from None
    return Appended(new, len(rows) - len(new))


def _append_whole(path: Path, data: bytes, *, anew: bool) -> None:
    """Append `data` to `path` whole or not at all. A disk that fills part-way would leave a
    row cut short, and the next export would add rows after it: a short row among full ones,
    which codecarbon's dashboard cannot read. So a failed write is cut back to the file's
    size before it. `anew`: the file is new, or holds no row (blank lines at most), and is
    written from its start; one that fails is removed, as if never begun."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if anew else os.O_APPEND)
    fd = os.open(path, flags, 0o666)
    try:
        before = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked (a signal, a nearly full disk)
                view = view[os.write(fd, view) :]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
                if anew:
                    os.unlink(path)
            raise
    finally:
        os.close(fd)


def _names(columns: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(columns[:most])
    return shown + (f" and {len(columns) - most} more" if len(columns) > most else "")


def _mismatch(path: Path, header: Sequence[str]) -> str:
    missing = [c for c in COLUMNS if c not in header]
    extra = [c for c in header if c not in COLUMNS]
    parts = []
    if missing:
        parts.append(f"it lacks {_names(missing)}")
    if extra:
        parts.append(
            f"it has {_names(extra)}, which codecarbon {CODECARBON_VERSION} does not write"
        )
    return (
        f"{path} does not have the columns of codecarbon {CODECARBON_VERSION}'s emissions.csv "
        f"({'; '.join(parts) or 'a column appears twice'}). gpudesk appends only to a file with "
        "the same columns, so that every row lines up under its header (codecarbon itself would "
        "move the file aside as a backup and start a new one): give -o a new file, or move this "
        "one away first."
    )


def _why(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text, so not a CSV file codecarbon wrote"
    if isinstance(exc, csv.Error):
        return f"it is not a CSV file codecarbon wrote ({exc})"
    return getattr(exc, "strerror", None) or str(exc)


def report(client: Client, jobs: Sequence[JobView], output: Path | None) -> None:
    """Write the rows to stdout (with the header), or append them to `output`, saying on
    stderr what was written and that a SIMULATED station's rows are simulated."""
    found = rows_for(client, jobs)
    rows = found.rows
    if found.unmeasured:
        print(
            f"note: {found.unmeasured} job(s) that ran have no row: none of their energy was "
            "measured (a CPU job where RAPL is not readable, a Slurm job), and codecarbon's "
            "dashboard, which adds every row, would give NaN totals for an empty cell. "
            "`gpudesk history` lists them.",
            file=sys.stderr,
        )
    if output is None:
        sys.stdout.write(render(rows))
        written = rows
    else:
        done = append(output, rows)
        written = done.rows
        already = f", {done.already} already there (same run_id)" if done.already else ""
        from gpudesk.text import printable_line

        shown = printable_line(str(output))  # spelled out: an ESC in it never reaches the terminal
        print(f"{shown}: {len(written)} row(s) appended{already}", file=sys.stderr)
    if any(SIMULATED in row.gpu_model for row in written):
        print(
            "note: the station is SIMULATED: its GPUs' energy is the simulator's, and each such "
            "row's gpu_model says SIMULATED",
            file=sys.stderr,
        )
