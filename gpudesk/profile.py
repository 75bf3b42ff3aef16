"""Reading `profile.toml`: parse, validate and expand a profile into job specs.

Every user-caused failure becomes a `ProfileError` listing *all* the problems found, each with
the file, the line, the key path (``jobs[2].gpus``) and what was expected versus found. Field
values are checked by the shared validators in `gpudesk.core.jobs` and `gpudesk.core.station`.

Placeholders: ``{repeat}`` (the 1-based repeat index) is substituted in [[jobs]]; in [[sweeps]]
every grid parameter is too. They are substituted in command arguments (or the shell string),
in the job's own ``env`` values and ``workdir``, and in a name that contains ``{``. Values
inherited from [defaults] are copied verbatim. ``${NAME}`` (shell syntax) is never touched.
Sweeps expand grid-major (first parameter slowest) with the repeat index varying fastest.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudesk.core.cluster import CLUSTER_KEYS, ClusterSpec, check_cluster
from gpudesk.core.datasets import LOADER_KEYS, DatasetSpec
from gpudesk.core.jobs import (
    FIELD_CHECKS,
    MLFLOW_MAX_PARAM_VALUE,
    JobSpec,
    TrackingSpec,
    check_bool,
    check_command,
    check_dataset,
    check_env,
    check_mlflow_uri,
    check_name,
    check_workdir,
    describe,
    resolve_mlflow_uri,
)
from gpudesk.core.station import STATION_CHECKS, STATION_KEYS, StationConfig
from gpudesk.examples import bundled
from gpudesk.results import Goal
from gpudesk.toml_lines import BARE_KEY, Key, KeyLines, tomllib

__all__ = [
    "MAX_JOBS",
    "MAX_PROFILE_BYTES",
    "DatasetConfig",
    "Problem",
    "Profile",
    "ProfileError",
    "ReportConfig",
    "load_profile",
    "parse_profile",
]

MAX_PROFILE_BYTES = 1 * 1024 * 1024
MAX_JOBS = 10_000
MAX_REPEAT = 1000
MAX_GRID_PARAMS = 64
MAX_PROBLEMS_SHOWN = 20

# A key path inside the document: ("jobs", 2, "gpus") is rendered "jobs[2].gpus".

TOP_KEYS = (
    "name",
    "description",
    "station",
    "defaults",
    "datasets",
    "report",
    "tracking",
    "cluster",
    "jobs",
    "sweeps",
)
REPORT_KEYS = ("metric", "goal")
TRACKING_KEYS = ("mlflow_uri", "experiment")  # [tracking] (docs/tracking.md)
MAX_METRIC_CHARS = 100
JOB_KEYS = (
    "name",
    "command",
    "shell",
    "workdir",
    "env",
    "gpus",
    "memory_gb",
    "sm_pct",
    "dataset",
    "selection",
    "priority",
    "max_attempts",
    "time_limit",
    "after",
    "repeat",
)
SWEEP_KEYS = (*JOB_KEYS, "grid")
# [defaults] may set every job key but those that make a job what it is.
DEFAULT_KEYS = tuple(key for key in JOB_KEYS if key not in ("name", "command", "repeat", "after"))
DATASET_KEYS = ("factory", *LOADER_KEYS)
# Resource fields that go straight from the table (or [defaults]) into the JobSpec.
_RESOURCE_KEYS = ("gpus", "memory_gb", "sm_pct", "dataset", "selection", "priority", "max_attempts")

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `{name}` not preceded by `$`, so that shell `${HOME}` passes through untouched.
_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FACTORY = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_TOML_POSITION = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")
_INT64 = (-(2**63), 2**63 - 1)

_INVALID: Any = object()  # a value that failed its check (the problem is already recorded)


@dataclass(frozen=True)
class Problem:
    path: str  # the file path as given
    line: int | None  # 1-based line of the key (or its table header), when known
    key: str  # "jobs[2].gpus", "sweeps[0].grid.lr", "station.slots"; "" for the whole file
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


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
    # [tracking]: where its jobs' MLflow runs go (each job's spec carries it too); None: none.
    tracking: TrackingSpec | None = None
    # [cluster]: the Slurm cluster its jobs go to by default (docs/slurm.md); None: the station.
    # The jobs' specs do not carry it: `gpudesk run --on` may send them elsewhere.
    cluster: ClusterSpec | None = None


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and parse a profile file. Raises ProfileError for anything the user can fix.

    A path that does not exist but names a bundled example (`profiles/quickstart.toml`,
    `quickstart`) reads that example: installed from a wheel, the README's commands work in any
    folder. Its jobs run in the current folder, not inside the installed package."""
    example = bundled(path, "profiles")
    if example is not None:
        loaded = parse_profile(example.read_bytes(), example, base_dir=Path.cwd())
        return dataclasses.replace(loaded, bundled=True)
    shown = os.fsdecode(path)
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise _file_error(shown, "is a directory; give the path of a profile .toml file")
        if stat.S_ISREG(info.st_mode) and info.st_size > MAX_PROFILE_BYTES:
            raise _file_error(shown, _too_big(info.st_size))
        with open(path, "rb") as handle:
            # Bounded read: a pipe or device reports no size up front.
            data = handle.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise _file_error(shown, _missing_file_message(shown)) from None
    except PermissionError:
        raise _file_error(shown, "permission denied: cannot read the file") from None
    except OSError as exc:
        raise _file_error(shown, f"cannot read the file: {exc.strerror or exc}") from None
    except ValueError:  # e.g. a NUL character in the path
        raise _file_error(shown, "is not a valid file path") from None
    if len(data) > MAX_PROFILE_BYTES:
        raise _file_error(shown, f"the file is larger than the limit of {_size(MAX_PROFILE_BYTES)}")
    return parse_profile(data, path)


def parse_profile(
    data: bytes, path: str | os.PathLike[str], base_dir: Path | None = None
) -> Profile:
    """Parse profile bytes; `path` names the file in messages and anchors relative workdirs
    (`base_dir`, when given, anchors them instead)."""
    shown = os.fsdecode(path)
    try:
        if len(data) > MAX_PROFILE_BYTES:
            raise _file_error(shown, _too_big(len(data)))
        text = _decode(bytes(data), shown)
        document = _read_toml(text, shown)
        _check_integer_range(document, shown, text)
        builder = _Builder(shown, Path(os.path.abspath(shown)), KeyLines(text), base_dir)
        return builder.build(document)
    except RecursionError:
        raise _file_error(shown, "the profile is nested too deeply to read") from None


# --- reading the bytes -------------------------------------------------------------------------


def _file_error(shown: str, message: str, line: int | None = None) -> ProfileError:
    return ProfileError([Problem(shown, line, "", message)])


def _size(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MiB ({n:,} bytes)"
    return f"{n:,} bytes"


def _too_big(n: int) -> str:
    return f"the file is {_size(n)}; a profile may be at most {_size(MAX_PROFILE_BYTES)}"


def _missing_file_message(shown: str) -> str:
    message = "no such file"
    folder, base = os.path.split(shown)
    try:
        names = [n for n in os.listdir(folder or ".") if n.endswith(".toml")]
    except (OSError, ValueError):
        return message
    if f"{base}.toml" in names:
        guess = f"{base}.toml"
    else:
        close = difflib.get_close_matches(base, names, n=1)
        if not close:
            return message
        guess = close[0]
    return f"{message}; did you mean {os.path.join(folder, guess)!r}?"


def _decode(data: bytes, shown: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise _file_error(
            shown,
            f"the file is not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} "
            f"(line {line}, column {column}); save the profile as UTF-8",
            line,
        ) from None
    return text.removeprefix("\ufeff")  # tolerate a byte-order mark from Windows editors


def _read_toml(text: str, shown: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = _toml_error(exc, text)
        raise _file_error(shown, message, line) from None
    except RecursionError:
        message = "invalid TOML: arrays or inline tables are nested too deeply"
        raise _file_error(shown, message) from None
    except ValueError as exc:  # tomllib lets Python's int() limits through as plain ValueError
        if "integer string conversion" in str(exc):
            message = "invalid TOML: a number is too long (integers must fit in 64 bits)"
        else:
            message = f"invalid TOML: {exc}"
        raise _file_error(shown, message) from None


def _toml_error(exc: Exception, text: str) -> tuple[int | None, str]:
    raw = str(getattr(exc, "msg", None) or exc)
    line: int | None = getattr(exc, "lineno", None)
    column: int | None = getattr(exc, "colno", None)
    match = _TOML_POSITION.search(raw)
    if match:
        raw = raw[: match.start()]
        if match.group(1):
            line, column = int(match.group(1)), int(match.group(2))
        else:
            line = text.count("\n") + 1  # "at end of document"
            column = None
    where = f" (column {column})" if column is not None and line is not None else ""
    return line, f"invalid TOML{where}: {raw}"


def _check_integer_range(document: dict[str, Any], shown: str, text: str) -> None:
    """TOML integers are 64-bit; tomllib accepts longer hex/octal/binary ones. Refusing them here
    keeps huge ints away from validators and messages (str() of one can itself raise)."""
    bad: list[Key] = []
    stack: list[tuple[Key, Any]] = [((), document)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(((*key, k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*key, i), v) for i, v in enumerate(value))
        elif type(value) is int and not _INT64[0] <= value <= _INT64[1]:
            bad.append(key)
    if bad:
        locator = KeyLines(text)
        message = "integer out of range: TOML integers must fit in 64 bits"
        raise ProfileError(
            [Problem(shown, locator.line(k), _render_key(k), message) for k in sorted(bad, key=str)]
        )


# --- validation --------------------------------------------------------------------------------


def _render_key(key: Key) -> str:
    text = ""
    for part in key:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
            text += f".{name}" if text else name
    return text


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; expected one of: {', '.join(choices)}"


def _found(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return "an array of tables"
    if isinstance(value, dict):
        return "a table"
    return describe(value)


def _render_value(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _substitute(template: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _check_time_limit(value: Any) -> float:
    """`time_limit = "2h"` (or "1:30:00", "2-12:00:00", as sbatch --time) or a whole number
    of minutes, as sbatch takes a bare number."""
    from gpudesk.core.jobs import MAX_TIME_LIMIT_S
    from gpudesk.units import parse_duration

    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(
            f'expected a duration such as "2h", "1:30:00" or a whole number of minutes, '
            f"found {describe(value)}"
        )
    seconds = parse_duration(str(value))
    if not 1 <= seconds <= MAX_TIME_LIMIT_S:
        raise ValueError(f"a time limit is 1 s to 366 days, found {seconds:g} s")
    return seconds


def _check_after_names(value: Any) -> tuple[str, ...]:
    """`after = ["prep"]`: the names of [[jobs]] or [[sweeps]] tables of the same profile."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ValueError(
            f'expected the names of jobs or sweeps of this profile, e.g. after = ["prep"], '
            f"found {describe(value)}"
        )
    return tuple(dict.fromkeys(check_name(item) for item in items))


_KEY_CHECKS: dict[str, Callable[[Any], Any]] = {
    "shell": check_bool,
    "time_limit": _check_time_limit,
}


def _check_repeat(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPEAT:
        raise ValueError(f"expected a whole number from 1 to {MAX_REPEAT}, found {describe(value)}")
    return value


def _check_factory(value: Any) -> str:
    if not isinstance(value, str) or not _FACTORY.fullmatch(value):
        raise ValueError(f'expected "package.module:callable", found {describe(value)}')
    return value


def _check_metric(value: Any) -> str:
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_METRIC_CHARS
        or not value.isprintable()
    ):
        raise ValueError(
            "expected the name of a metric in the jobs' `result {json}` line, such as "
            f'"val_acc" (printable, at most {MAX_METRIC_CHARS} characters), '
            f"found {describe(value)}"
        )
    return value


def _check_goal(value: Any) -> Goal:
    if value == "max":
        return "max"
    if value == "min":
        return "min"
    raise ValueError(
        f'expected "max" (larger is better) or "min" (smaller is better), found {describe(value)}'
    )


def _param_value(text: str) -> str:
    """A value cut to MLflow's limit on a param's value, saying so."""
    if len(text) <= MLFLOW_MAX_PARAM_VALUE:
        return text
    note = " … (cut to MLflow's limit)"
    return text[: MLFLOW_MAX_PARAM_VALUE - len(note)] + note


def _check_description(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, found {describe(value)}")
    return value


_DEFAULT_HINTS = {
    key: f"{key} cannot have a default; set it in each [[jobs]] or [[sweeps]] table"
    for key in ("name", "command", "repeat", "grid")
}
_TOP_HINTS = {
    key: f"unknown key; {key} belongs in a [[jobs]] or [[sweeps]] table"
    + (", or in [defaults]" if key in DEFAULT_KEYS else "")
    for key in SWEEP_KEYS
    if key not in TOP_KEYS
}
_TOP_HINTS["grid"] = "unknown key; grid belongs in a [[sweeps]] table"
_JOB_HINTS = {"grid": "unknown key; a grid is only allowed in [[sweeps]] tables"}


@dataclass
class _Entry:
    """One validated [[jobs]] or [[sweeps]] table, ready to expand."""

    key: Key  # ("jobs", 2)
    name: str
    command: tuple[str, ...]
    shell: bool
    env: dict[str, str]  # the table's own env (placeholders substituted)
    workdir: str | None  # the table's own workdir (placeholders substituted)
    resources: dict[str, Any]  # gpus, memory_gb, …, defaults already merged in
    repeat: int
    grid: dict[str, list[str]] = field(default_factory=dict)  # parameter -> rendered values
    after: tuple[str, ...] = ()  # names of the [[jobs]]/[[sweeps]] whose jobs must succeed first

    def variants(self) -> Iterator[tuple[str, dict[str, str]]]:
        """(job name, placeholder values) for each job this entry makes, in order."""
        params = list(self.grid)
        for combo in itertools.product(*self.grid.values()):
            for index in range(1, self.repeat + 1):
                values = dict(zip(params, combo, strict=True))
                values["repeat"] = str(index)
                if "{" in self.name:
                    name = _substitute(self.name, values)
                else:
                    label = ",".join(f"{p}={v}" for p, v in zip(params, combo, strict=True))
                    name = self.name + (f"[{label}]" if params else "")
                    if self.repeat > 1:
                        name += f"#{index}"
                yield name, values


class _Builder:
    def __init__(
        self, shown: str, path: Path, locator: KeyLines, base_dir: Path | None = None
    ) -> None:
        self.shown = shown
        self.path = path
        self.base_dir = base_dir or path.parent
        self.locator = locator
        self.problems: list[Problem] = []
        self.dataset_names: set[str] | None = set()  # None: [datasets] unusable, skip references
        self.defaults: dict[str, Any] = {}
        self.counts: list[tuple[Key, int]] = []  # jobs each entry would make, before expanding
        self.tracking: TrackingSpec | None = None  # [tracking], once read

    # -- recording problems

    def problem(self, key: Key, message: str, *, at: Key | None = None) -> None:
        line = self.locator.line(key if at is None else at)
        self.problems.append(Problem(self.shown, line, _render_key(key), message))

    def check(self, key: Key, check: Callable[[Any], Any], value: Any) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            self.problem(key, str(exc))
        except ArithmeticError:  # float() of an int that fits 64 bits cannot fail, but be safe
            self.problem(key, f"the number is out of range, found {describe(value)}")
        return _INVALID

    def table(self, key: Key, value: Any, expected: str) -> dict[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.problem(key, f"expected {expected}, found {_found(value)}")
        return None

    def unknown_keys(
        self,
        key: Key,
        table: Mapping[str, Any],
        allowed: Sequence[str],
        hints: Mapping[str, str] | None = None,
    ) -> None:
        for name in table:
            if name not in allowed:
                hint = (hints or {}).get(name)
                self.problem((*key, name), hint or "unknown key" + _suggest(name, allowed))

    def raise_problems(self) -> None:
        if self.problems:
            # File-level problems first, then by line; sorting is stable within a line.
            self.problems.sort(key=lambda p: -1 if p.line is None else p.line)
            raise ProfileError(self.problems)

    # -- the document

    def build(self, document: dict[str, Any]) -> Profile:
        self.unknown_keys((), document, TOP_KEYS, _TOP_HINTS)
        name = self.path.stem or "profile"
        if "name" in document:
            checked = self.check(("name",), check_name, document["name"])
            name = name if checked is _INVALID else checked
        description = None
        if "description" in document:
            checked = self.check(("description",), _check_description, document["description"])
            description = None if checked is _INVALID else checked
        station = self.station(document)
        datasets = self.datasets(document)
        report = self.report(document)
        self.tracking = self.read_tracking(document, name)
        cluster = self.read_cluster(document)
        self.read_defaults(document)

        entries: list[_Entry] = []
        declared = 0
        containers_ok = True
        for kind in ("jobs", "sweeps"):
            if kind not in document:
                continue
            tables = document[kind]
            if isinstance(tables, dict):
                containers_ok = False
                self.problem(
                    (kind,),
                    f"expected an array of tables ([[{kind}]]), found a single "
                    f"[{kind}] table; write [[{kind}]] with double brackets",
                )
                continue
            if not isinstance(tables, list):
                containers_ok = False
                self.problem(
                    (kind,), f"expected an array of tables ([[{kind}]]), found {describe(tables)}"
                )
                continue
            declared += len(tables)
            for index, table in enumerate(tables):
                entry = self.entry(kind, index, table)
                if entry is not None:
                    entries.append(entry)
        if declared == 0 and containers_ok:
            self.problem((), "the profile defines no jobs: add a [[jobs]] or [[sweeps]] table")
        self.check_job_count()
        self.raise_problems()

        jobs = self.expand(entries)
        self.raise_problems()
        station_keys = tuple(k for k in STATION_KEYS if k in (document.get("station") or {}))
        return Profile(
            self.path,
            name,
            description,
            station,
            datasets,
            jobs,
            station_keys,
            report,
            tracking=self.tracking,
            cluster=cluster,
        )

    def station(self, document: dict[str, Any]) -> StationConfig:
        if "station" not in document:
            return StationConfig()
        table = self.table(("station",), document["station"], "a [station] table")
        if table is None:
            return StationConfig()
        self.unknown_keys(("station",), table, STATION_KEYS)
        values: dict[str, Any] = {}
        for key, check in STATION_CHECKS.items():
            if key in table:
                checked = self.check(("station", key), check, table[key])
                if checked is not _INVALID:
                    values[key] = checked
        return StationConfig.from_checked(values)

    def report(self, document: dict[str, Any]) -> ReportConfig | None:
        if "report" not in document:
            return None
        table = self.table(("report",), document["report"], "a [report] table")
        if table is None:
            return None
        self.unknown_keys(("report",), table, REPORT_KEYS)
        metric = goal = _INVALID
        if "metric" not in table:
            self.problem(
                ("report", "metric"),
                'missing: name the result metric to rank the jobs by, e.g. metric = "val_acc" '
                "(a key of the `result {json}` line the jobs print; docs/results.md)",
                at=("report",),
            )
        else:
            metric = self.check(("report", "metric"), _check_metric, table["metric"])
        if "goal" not in table:
            shown = metric if isinstance(metric, str) else "the metric"
            self.problem(
                ("report", "goal"),
                f'missing: say goal = "max" if a larger {shown} is better, or goal = "min" '
                "if a smaller one is (an accuracy is maxed, a loss minimized)",
                at=("report",),
            )
        else:
            goal = self.check(("report", "goal"), _check_goal, table["goal"])
        if metric is _INVALID or goal is _INVALID:
            return None
        return ReportConfig(metric, goal)

    def read_tracking(self, document: dict[str, Any], profile_name: str) -> TrackingSpec | None:
        """[tracking]: `mlflow_uri` (a relative sqlite path is anchored at the profile's folder)
        and `experiment` (default: the profile's name)."""
        if "tracking" not in document:
            return None
        table = self.table(("tracking",), document["tracking"], "a [tracking] table")
        if table is None:
            return None
        self.unknown_keys(("tracking",), table, TRACKING_KEYS)
        uri = experiment = _INVALID
        if "mlflow_uri" not in table:
            self.problem(
                ("tracking", "mlflow_uri"),
                'missing: name the MLflow tracking store, e.g. mlflow_uri = "sqlite:///mlflow.db" '
                '(a file beside this profile) or "http://127.0.0.1:5000" (docs/tracking.md)',
                at=("tracking",),
            )
        else:
            raw = table["mlflow_uri"]
            if isinstance(raw, str):
                raw = resolve_mlflow_uri(raw.strip(), str(self.base_dir))
            uri = self.check(("tracking", "mlflow_uri"), check_mlflow_uri, raw)
        experiment = profile_name
        if "experiment" in table:
            experiment = self.check(("tracking", "experiment"), check_name, table["experiment"])
        if uri is _INVALID or experiment is _INVALID:
            return None
        return TrackingSpec(uri, experiment)

    def read_cluster(self, document: dict[str, Any]) -> ClusterSpec | None:
        """[cluster]: the Slurm cluster the profile's jobs go to (gpudesk.core.cluster); each
        key's problem is reported at its own line."""
        if "cluster" not in document:
            return None
        table = self.table(("cluster",), document["cluster"], "a [cluster] table")
        if table is None:
            return None
        self.unknown_keys(("cluster",), table, CLUSTER_KEYS)
        ok = True
        for key in CLUSTER_KEYS:
            if key not in table:
                continue
            try:
                check_cluster({key: table[key]})
            except ValueError as exc:
                ok = False
                self.problem(("cluster", key), str(exc).removeprefix(f"{key}: "))
        if not ok or any(key not in CLUSTER_KEYS for key in table):
            return None
        return check_cluster(table)

    def datasets(self, document: dict[str, Any]) -> dict[str, DatasetConfig]:
        if "datasets" not in document:
            return {}
        expected = "a table of datasets such as [datasets.digits]"
        tables = self.table(("datasets",), document["datasets"], expected)
        if tables is None:
            self.dataset_names = None
            return {}
        result: dict[str, DatasetConfig] = {}
        names: set[str] = set()
        for name, body in tables.items():
            key: Key = ("datasets", name)
            names.add(name)  # even when broken, so references to it don't cascade into errors
            if self.check(key, check_dataset, name) is _INVALID:
                continue
            table = self.table(key, body, f"a [datasets.{name}] table")
            if table is None:
                continue
            self.unknown_keys(key, table, DATASET_KEYS)
            factory = None
            if "factory" in table:
                checked = self.check((*key, "factory"), _check_factory, table["factory"])
                factory = None if checked is _INVALID else checked
            loader = None
            if factory is not None:
                settings = {k: v for k, v in table.items() if k in LOADER_KEYS}
                try:
                    loader = DatasetSpec.from_dict({"name": name, "factory": factory, **settings})
                except ValueError as exc:
                    field_name, _, message = str(exc).partition(": ")
                    self.problem((*key, field_name), message)
            result[name] = DatasetConfig(name, factory, loader)
        self.dataset_names = names
        return result

    def check_dataset_reference(self, key: Key, name: str) -> None:
        known = self.dataset_names
        if known is None or name in known:
            return
        message = f"unknown dataset {name!r}"
        close = difflib.get_close_matches(name, sorted(known), n=1)
        if close:
            message += f"; did you mean {close[0]!r}?"
        else:
            message += f"; define it with a [datasets.{name}] table"
        self.problem(key, message)

    def read_defaults(self, document: dict[str, Any]) -> None:
        if "defaults" not in document:
            return
        table = self.table(("defaults",), document["defaults"], "a [defaults] table")
        if table is None:
            return
        self.unknown_keys(("defaults",), table, DEFAULT_KEYS, _DEFAULT_HINTS)
        for key in DEFAULT_KEYS:
            if key in table:
                check = _KEY_CHECKS.get(key) or FIELD_CHECKS[key]
                self.defaults[key] = self.check(("defaults", key), check, table[key])
        dataset = self.defaults.get("dataset")
        if isinstance(dataset, str):
            self.check_dataset_reference(("defaults", "dataset"), dataset)

    # -- [[jobs]] and [[sweeps]]

    def entry(self, kind: str, index: int, table: Any) -> _Entry | None:
        key: Key = (kind, index)
        what = "job" if kind == "jobs" else "sweep"
        if not isinstance(table, dict):
            self.problem(key, f"expected a table of {what} settings, found {_found(table)}")
            return None
        before = len(self.problems)
        if kind == "jobs":
            self.unknown_keys(key, table, JOB_KEYS, _JOB_HINTS)
        else:
            self.unknown_keys(key, table, SWEEP_KEYS)

        name = _INVALID
        if "name" not in table:
            self.problem((*key, "name"), f"missing: every {what} needs a name")
        else:
            name = self.check((*key, "name"), check_name, table["name"])

        if "shell" in table:
            shell = self.check((*key, "shell"), check_bool, table["shell"])
        else:
            shell = self.defaults.get("shell", False)
        command = _INVALID
        if "command" not in table:
            example = '"python train.py"' if shell is True else '["python", "train.py"]'
            self.problem(
                (*key, "command"),
                f"missing: every {what} needs a command, e.g. command = {example}",
            )
        elif shell is not _INVALID:
            command = self.check(
                (*key, "command"), lambda v: check_command(v, shell), table["command"]
            )

        resources = {k: v for k, v in self.defaults.items() if k in _RESOURCE_KEYS}
        for field_name in _RESOURCE_KEYS:
            if field_name in table:
                checked = self.check(
                    (*key, field_name), FIELD_CHECKS[field_name], table[field_name]
                )
                resources[field_name] = checked
                if field_name == "dataset" and isinstance(checked, str):
                    self.check_dataset_reference((*key, "dataset"), checked)
        if resources.get("selection") and not resources.get("dataset"):
            self.problem(
                (*key, "selection"),
                "a selection applies to the job's dataset: set "
                "dataset too (or put the selection in its [datasets.NAME] table)",
            )
        if "time_limit" in table:
            resources["time_limit"] = self.check(
                (*key, "time_limit"), _check_time_limit, table["time_limit"]
            )
        after: tuple[str, ...] = ()
        if "after" in table:
            checked_after = self.check((*key, "after"), _check_after_names, table["after"])
            after = () if checked_after is _INVALID else checked_after
        env = self.check((*key, "env"), FIELD_CHECKS["env"], table["env"]) if "env" in table else {}
        workdir = (
            self.check((*key, "workdir"), FIELD_CHECKS["workdir"], table["workdir"])
            if "workdir" in table
            else None
        )
        repeat = self.check((*key, "repeat"), _check_repeat, table.get("repeat", 1))
        grid: dict[str, list[str]] | None = {}
        if kind == "sweeps":
            grid = self.grid(key, table)
        if repeat is not _INVALID and grid is not None:
            self.counts.append((key, repeat * math.prod(len(v) for v in grid.values())))

        templates = (name, command, env, workdir)
        templates_ok = grid is not None and all(value is not _INVALID for value in templates)
        if grid is None or not templates_ok:
            return None
        if kind == "sweeps":
            self.check_placeholders(key, *templates, grid)
        if len(self.problems) > before:
            return None
        return _Entry(key, name, command, shell, env, workdir, resources, repeat, grid, after)

    def grid(self, key: Key, table: dict[str, Any]) -> dict[str, list[str]] | None:
        grid_key = (*key, "grid")
        if "grid" not in table:
            self.problem(
                grid_key,
                "missing: a sweep needs a grid of parameters, e.g. grid = { lr = [0.1, 0.01] }",
            )
            return None
        grid = self.table(grid_key, table["grid"], "a table of parameter = [values]")
        if grid is None:
            return None
        if not grid:
            self.problem(grid_key, "the grid is empty; add a parameter, e.g. lr = [0.1, 0.01]")
            return None
        if len(grid) > MAX_GRID_PARAMS:
            self.problem(
                grid_key, f"expected at most {MAX_GRID_PARAMS} parameters, found {len(grid)}"
            )
            return None
        result: dict[str, list[str]] = {}
        ok = True
        for param, values in grid.items():
            param_key = (*grid_key, param)
            if param == "repeat":
                ok = False
                self.problem(
                    param_key, "'repeat' is reserved for the repeat index; rename the parameter"
                )
                continue
            if not _IDENTIFIER.fullmatch(param):
                ok = False
                self.problem(
                    param_key,
                    "a parameter name must be letters, digits and '_', not "
                    "starting with a digit, so that {name} can refer to it",
                )
                continue
            rendered = self.grid_values(param_key, values)
            if rendered is None:
                ok = False
            else:
                result[param] = rendered
        return result if ok else None

    def grid_values(self, key: Key, values: Any) -> list[str] | None:
        expected = "a non-empty array of strings, numbers or booleans"
        if not isinstance(values, list) or not values:
            found = "an empty array" if values == [] else _found(values)
            self.problem(key, f"expected {expected}, found {found}")
            return None
        rendered: list[str] = []
        seen: set[str] = set()
        for i, value in enumerate(values):
            if not isinstance(value, (str, int, float)):
                self.problem(
                    key,
                    f"value {i} should be a string, number or boolean, found {describe(value)}",
                    at=(*key, i),
                )
                return None
            text = _render_value(value)
            if text in seen:
                self.problem(key, f"the value {text} appears more than once", at=(*key, i))
                return None
            seen.add(text)
            rendered.append(text)
        return rendered

    def check_placeholders(
        self,
        key: Key,
        name: str,
        command: tuple[str, ...],
        env: dict[str, str],
        workdir: str | None,
        grid: dict[str, list[str]],
    ) -> None:
        """Every {placeholder} in a sweep must be a grid parameter (or repeat), and every grid
        parameter must be used somewhere that makes its jobs differ."""
        known = [*grid, "repeat"]
        # (key named in the problem, key whose line is shown, template text)
        fields: list[tuple[Key, Key, str]] = [
            ((*key, "command"), (*key, "command", i), arg) for i, arg in enumerate(command)
        ]
        fields += [((*key, "env", var), (*key, "env", var), value) for var, value in env.items()]
        if workdir is not None:
            fields.append(((*key, "workdir"), (*key, "workdir"), workdir))
        if "{" in name:
            fields.append(((*key, "name"), (*key, "name"), name))
        used: set[str] = set()  # a typo'd placeholder "uses" the parameter it was meant to be
        for field_key, at, text in fields:
            for placeholder in dict.fromkeys(_PLACEHOLDER.findall(text)):
                used.add(placeholder)
                if placeholder in known:
                    continue
                close = difflib.get_close_matches(placeholder, known, n=1)
                used.update(close)
                hint = f"; did you mean {{{close[0]}}}?" if close else ""
                self.problem(
                    field_key,
                    f"unknown placeholder {{{placeholder}}}{hint} "
                    f"(the grid defines: {', '.join(grid)})",
                    at=at,
                )
        for param in grid:
            if param not in used:
                self.problem(
                    (*key, "grid", param),
                    f"grid parameter {param!r} is not used in the command, env, workdir or "
                    f"name, so its values would create identical jobs; use {{{param}}} or "
                    "remove it",
                )

    def check_job_count(self) -> None:
        total = sum(count for _, count in self.counts)
        if total <= MAX_JOBS:
            return
        biggest_key, biggest = max(self.counts, key=lambda item: item[1])
        if biggest > MAX_JOBS:
            self.problem(
                biggest_key,
                f"expands to {biggest:,} jobs, more than the limit of "
                f"{MAX_JOBS:,} jobs per profile",
            )
        else:
            self.problem(
                (),
                f"the profile expands to {total:,} jobs, more than the limit of "
                f"{MAX_JOBS:,} (the largest part is {_render_key(biggest_key)} with "
                f"{biggest:,})",
            )

    # -- expansion

    def expand(self, entries: list[_Entry]) -> list[JobSpec]:
        jobs: list[JobSpec] = []
        made_by: dict[str, Key] = {}
        reported: set[tuple[Key, Key]] = set()  # one problem per (entry, field or other entry)
        made: dict[Key, list[int]] = {}  # entry -> the indices of its jobs in `jobs`
        ordered = self.dependency_order(entries)
        if ordered is None:
            return jobs  # its problems are raised by the caller
        for entry in ordered:
            # the jobs it runs after, as `submit` takes them within one request: -(index + 1)
            after = tuple(
                -(index + 1)
                for other in entry.after
                for index in made.get(self.entry_named(entries, other).key, [])
            )
            for name, values in entry.variants():
                spec = self.make_job(entry, name, values, reported)
                if spec is None:
                    continue
                other = made_by.get(spec.name)
                if other is not None:
                    if (entry.key, other) not in reported:
                        reported.add((entry.key, other))
                        self.duplicate(entry, spec.name, other)
                    continue
                made_by[spec.name] = entry.key
                made.setdefault(entry.key, []).append(len(jobs))
                jobs.append(dataclasses.replace(spec, after=after) if after else spec)
        return jobs

    @staticmethod
    def entry_named(entries: list[_Entry], name: str) -> _Entry:
        return next(entry for entry in entries if entry.name == name)

    def dependency_order(self, entries: list[_Entry]) -> list[_Entry] | None:
        """The entries in file order, except that one comes after those it runs `after`
        (a stable topological order); None, with the problems noted, for an unknown name, a
        job after itself, or a cycle."""
        names = {entry.name for entry in entries}
        ok = True
        for entry in entries:
            for other in entry.after:
                if other not in names:
                    ok = False
                    known = ", ".join(sorted(repr(n) for n in names if n != entry.name)) or "none"
                    self.problem(
                        (*entry.key, "after"),
                        f"no [[jobs]] or [[sweeps]] named {other!r} in this profile "
                        f"(after names a table's name; these are: {known})",
                    )
                elif other == entry.name:
                    ok = False
                    self.problem((*entry.key, "after"), "a job cannot run after itself")
        if not ok:
            return None
        placed: list[_Entry] = []
        waiting = list(entries)
        while waiting:
            ready = next(
                (e for e in waiting if all(o in {p.name for p in placed} for o in e.after)), None
            )
            if ready is None:
                cycle = " -> ".join(e.name for e in waiting)
                self.problem(
                    (*waiting[0].key, "after"),
                    f"these run after each other in a circle, so none could start: {cycle}",
                )
                return None
            placed.append(ready)
            waiting.remove(ready)
        return placed

    def make_job(
        self, entry: _Entry, name: str, values: dict[str, str], reported: set[tuple[Key, Key]]
    ) -> JobSpec | None:
        command = tuple(_substitute(arg, values) for arg in entry.command)
        env = {k: _substitute(v, values) for k, v in entry.env.items()}
        env = {**self.defaults.get("env", {}), **env}
        workdir: str | None = self.defaults.get("workdir")
        if entry.workdir is not None:
            workdir = _substitute(entry.workdir, values)
        # Substituted values are checked again: a grid value can make a name too long, put a
        # control character in it, or empty the program.
        checks: list[tuple[str, Callable[[Any], Any], Any]] = [
            ("name", check_name, name),
            ("command", lambda v: check_command(v, entry.shell), command),
            ("env", check_env, env),
            ("workdir", check_workdir, workdir),
        ]
        checked: dict[str, Any] = {}
        for field_name, check, value in checks:
            try:
                checked[field_name] = check(value)
            except ValueError as exc:
                if (entry.key, (field_name,)) not in reported:
                    reported.add((entry.key, (field_name,)))
                    self.problem((*entry.key, field_name), self.context(entry, values) + str(exc))
        if len(checked) < len(checks):
            return None
        sweep = entry.name if entry.key[0] == "sweeps" else None
        tracking = self.tracking
        if tracking is not None and sweep is not None:
            tracking = dataclasses.replace(
                tracking,
                params={param: _param_value(values[param]) for param in entry.grid},
                sweep_params={
                    param: _param_value(", ".join(shown)) for param, shown in entry.grid.items()
                },
            )
        return JobSpec(
            name=checked["name"],
            command=checked["command"],
            shell=entry.shell,
            workdir=self.resolve_dir(checked["workdir"]),
            env=checked["env"],
            sweep=sweep,
            tracking=tracking,
            **{("time_limit_s" if k == "time_limit" else k): v for k, v in entry.resources.items()},
        )

    @staticmethod
    def context(entry: _Entry, values: dict[str, str]) -> str:
        shown = [f"{param}={values[param]}" for param in entry.grid]
        if entry.repeat > 1:
            shown.append(f"repeat={values['repeat']}")
        return f"with {', '.join(shown)}: " if shown else ""

    def resolve_dir(self, workdir: str | None) -> str:
        if workdir is None:
            return str(self.base_dir)
        return os.path.normpath(os.path.join(self.base_dir, os.path.expanduser(workdir)))

    def duplicate(self, entry: _Entry, name: str, other: Key) -> None:
        message = f"duplicate job name {name!r}"
        if other == entry.key:
            what = "job" if entry.key[0] == "jobs" else "sweep"
            message += f": this {what} makes it more than once"
            needed = [*entry.grid, *(["repeat"] if entry.repeat > 1 else [])]
            used = set(_PLACEHOLDER.findall(entry.name))
            missing = [f"{{{p}}}" for p in needed if p not in used]
            if "{" in entry.name and missing:
                message += f"; the name template should use {', '.join(missing)}"
        else:
            line = self.locator.line((*other, "name"))
            where = f" (line {line})" if line is not None else ""
            message += f": {_render_key(other)}{where} makes a job with the same name"
        self.problem((*entry.key, "name"), message)
