"""What a profile reads as: `Profile` and its parts (`DatasetConfig`, `ReportConfig`), the
limits on its size, and `ProfileError`, the `Problem`s that make one unusable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpudesk.core.cluster import ClusterSpec
from gpudesk.core.datasets import DatasetSpec
from gpudesk.core.jobs import JobSpec
from gpudesk.core.station import StationConfig
from gpudesk.core.tracking_spec import TrackingSpec
from gpudesk.results import Goal

MAX_PROFILE_BYTES = 1 * 1024 * 1024
MAX_JOBS = 10_000
MAX_REPEAT = 1000
MAX_GRID_PARAMS = 64
MAX_PROBLEMS_SHOWN = 20


@dataclass(frozen=True)
class Problem:
    path: str  # the file path as given
    line: int | None  # 1-based line of the key (or its table header), when known
    key: str  # "jobs[2].gpus", "sweeps[0].grid.lr", "station.slots"; "" for the whole file
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


@dataclass(frozen=True)
class JobOrigin:
    """Where a profile's job comes from: its [[jobs]] or [[sweeps]] table (`where`: the file,
    the table's line and key, its message empty) and, for a table that makes several jobs (a
    grid, `repeat`), which of them it is (`point` of `points`, from 1 in the table's order)."""

    where: Problem
    point: int = 1
    points: int = 1

    def said(self, name: str, field: str | None = None) -> str:
        """ "p.toml:4: sweeps[0].priority ('s2', point 2 of 3)": the table's key, the field
        where one is named, and the job."""
        from gpudesk.text import printable_line

        which = f", point {self.point} of {self.points}" if self.points > 1 else ""
        key = f"{self.where.key}.{field}" if field else self.where.key
        path, line = self.where.path, self.where.line
        place = path if line is None else f"{path}:{line}"
        return f"{place}: {key} ('{printable_line(name)}'{which})"


class ProfileError(Exception):
    """A profile cannot be used. `problems` lists everything wrong with it (at least one)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("a ProfileError needs at least one problem")
        # Passing the list to Exception keeps the error picklable (e.g. across processes).
        super().__init__(list(problems))
        self.problems: list[Problem] = list(problems)

    def __str__(self) -> str:
        lines = [str(problem) for problem in self.problems[:MAX_PROBLEMS_SHOWN]]
        hidden = len(self.problems) - len(lines)
        if hidden:
            lines.append(f"… and {hidden} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class DatasetConfig:
    name: str
    factory: str | None = None  # "package.module:callable"; the format is checked, not imported
    loader: DatasetSpec | None = None  # how its shared loader runs (given a factory)


@dataclass(frozen=True)
class NamedWorkdir:
    """A working directory the profile names for some of its jobs, and where it names it:
    for the profile's own line in a problem with it (`workdir_problems`)."""

    path: str  # as the jobs get it: absolute
    where: Problem  # the file, line and key that name it (its message empty)


@dataclass(frozen=True)
class ReportConfig:
    """[report]: the result metric (gpudesk.results) a run's report ranks its jobs by."""

    metric: str
    goal: Goal  # "max": larger is better; "min": smaller is


@dataclass(frozen=True)
class Profile:
    path: Path  # absolute
    name: str
    description: str | None
    station: StationConfig
    datasets: dict[str, DatasetConfig]
    jobs: list[JobSpec]  # fully expanded, in file order: [[jobs]] first, then [[sweeps]]
    # The [station] keys the file names: only these are asked of the engine (a key left out
    # keeps the station's value; `station` holds the defaults for those).
    station_keys: tuple[str, ...] = ()
    report: ReportConfig | None = None  # None: the report calls no job best
    # Read from gpudesk's bundled examples because `path` named none in the current folder
    # (gpudesk.examples); its relative workdirs are then anchored at the current folder.
    bundled: bool = False
    # Read from a pipe or a device, not a regular file (`gpudesk run <(…)`, `… | gpudesk run
    # /dev/stdin`): its relative workdirs are anchored at the current folder too (its "folder"
    # is /dev/fd), and there is no file a later `gpudesk run PROFILE --attach` could read again.
    streamed: bool = False
    # [tracking]: where its jobs' MLflow runs go (each job's spec carries it too); None: none.
    tracking: TrackingSpec | None = None
    # [cluster]: the Slurm cluster its jobs go to by default (docs/slurm.md); None: the station.
    # The jobs' specs do not carry it: `gpudesk run --on` may send them elsewhere.
    cluster: ClusterSpec | None = None
    # each working directory a `workdir` key names, once: checked where the jobs run on this
    # machine, by the user's own CLI (workdir_problems); a job without one runs in the folder
    # of the profile, which exists
    workdirs: tuple[NamedWorkdir, ...] = ()
    # where each of `jobs` comes from, in the same order: an engine's refusal of the k-th job
    # of the request is said at its table's line (gpudesk.api.submit)
    origins: tuple[JobOrigin, ...] = ()

    def origin_of(self, name: str) -> JobOrigin | None:
        """Where the profile's job named `name` comes from (None: it has no job of that name;
        a profile's job names are unique)."""
        return next(
            (o for j, o in zip(self.jobs, self.origins, strict=False) if j.name == name), None
        )
