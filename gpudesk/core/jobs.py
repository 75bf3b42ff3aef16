"""The job model: what a job asks for (`JobSpec`), the states it moves through, and the checks
that every submitted field passes — shared by the profile parser, the CLI and the daemon."""

from __future__ import annotations

import enum
import errno
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import msgspec

from gpudesk.core.cluster import ClusterSpec, check_cluster
from gpudesk.core.field_checks import check_job_name, check_name, describe
from gpudesk.core.local_selection import ENV_SELECTION
from gpudesk.core.submit_options import (
    MAX_ARRAY_TASKS,
    SUBMIT_OPTION_CHECKS,
    SUBMIT_OPTION_FIELDS,
)
from gpudesk.core.tracking_spec import TrackingSpec, check_tracking
from gpudesk.core.umask import check_umask
from gpudesk.text import file_kind, is_os_text, quoted, safe_text

TasksOfArrays = Callable[[list[int]], Mapping[int, Mapping[int, int]]]  # Store.array_tasks
NumberCheck = Callable[[Any], "float | None"]  # number_in's: None where optional and not given
MAX_ARGS = 4096
MAX_COMMAND_BYTES = 256 * 1024
MAX_ENV_VARS = 4096
MAX_ENV_BYTES = 1024 * 1024
MAX_GPUS = 64
# The most GPU memory a job may ask for, in GiB: a bound for reading a figure (16 TiB, far past
# any GPU: the largest hold 192 GB), not a fact placement uses.
MAX_MEMORY_GB = 16384.0
MAX_ATTEMPTS = 100
MAX_AFTER = 100  # dependencies of one job, as given (an array's id then names its tasks too)
# Every kind of dependency a job has: Slurm's afterok (`after`), afterany and afternotok
DEPENDENCY_FIELDS = ("after", "after_any", "after_notok")
# An array's tasks by its id: task index -> job id (the engine's store/jobs.py array_tasks)
TasksOf = Callable[[int], Mapping[int, int]]
MAX_TIME_LIMIT_S = 366 * 86400.0
# What a cancel gives a job between SIGTERM and SIGKILL unless told otherwise, and what a job
# gets when its time limit passes (Slurm's KillWait does the same, 30 s by default there).
DEFAULT_CANCEL_GRACE_S = 10.0
# Preemption (docs/preemption.md): the signal a preemptible job gets to checkpoint and leave,
# and how long it has before SIGTERM. Slurm's `--signal` warns 60 s ahead by default; 120 s is
# that plus one training step's boundary (a job saves at its next step, not at once)
# (assumption). Signals the job wrapper outlives (it must live to record the exit), by name.
DEFAULT_PREEMPT_SIGNAL = "SIGUSR1"
PREEMPT_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGINT", "SIGTERM", "SIGHUP")
DEFAULT_PREEMPT_GRACE_S = 120.0
MAX_PREEMPT_GRACE_S = 3600.0
MAX_JOB_ID = 2**63 - 1  # the largest id SQLite stores
PRIORITY_RANGE = (-1000, 1000)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class JobState(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # A running job whose processes are stopped (`gpudesk suspend`, Slurm's S): shown, never
    # stored. The store keeps it `running` (it holds its placement and its attempt lives) with
    # the time it was suspended (JobRecord.suspended_at); replies and events say `suspended`.
    SUSPENDED = "suspended"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# The same, as the strings clients see in `--json` and protocol replies.
TERMINAL_STATE_NAMES = frozenset(state.value for state in TERMINAL_STATES)

# queued -> running again is a retry (max_attempts > 1) or a launch that never started.
ALLOWED_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset(
        {JobState.QUEUED, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.SUSPENDED: frozenset(),  # never stored: see JobState.SUSPENDED
}


class InvalidTransition(RuntimeError):
    pass


def check_transition(old: JobState, new: JobState) -> None:
    if new not in ALLOWED_TRANSITIONS[old]:
        raise InvalidTransition(f"a job cannot go from {old.value} to {new.value}")


class SpecError(ValueError):
    """A field of a job spec is wrong. `key` is the field, `message` says expected vs found."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def _no_nul(text: str, what: str) -> str:
    """An argument, path or environment value: no NUL, and bytes the OS can take (a file name
    that is not UTF-8 is fine; a surrogate no byte stands for is not)."""
    if "\x00" in text:
        raise ValueError(f"{what} contains a NUL character")
    if not is_os_text(text):
        raise ValueError(
            f"{what} holds a lone surrogate ({safe_text(text)!r}): "
            "neither text nor the bytes of a file name"
        )
    return text


def check_command(value: Any, shell: bool) -> tuple[str, ...]:
    """argv list, or (with shell) one string for /bin/sh -c."""
    if isinstance(value, str):
        if not shell:
            raise ValueError(
                "the command is a string; give a list of arguments "
                '(e.g. ["python", "train.py"]), or set shell = true to run it through /bin/sh'
            )
        if not value.strip():
            raise ValueError("the command is empty")
        if len(value.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
            raise ValueError(f"the command is longer than {MAX_COMMAND_BYTES} bytes")
        return (_no_nul(value, "the command"),)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of strings, found {describe(value)}")
    if not value:
        raise ValueError("the command is empty: expected at least the program to run")
    if len(value) > MAX_ARGS:
        raise ValueError(f"expected at most {MAX_ARGS} arguments, found {len(value)}")
    args: list[str] = []
    for i, arg in enumerate(value):
        if not isinstance(arg, str):
            raise ValueError(f"argument {i} should be a string, found {describe(arg)}")
        args.append(_no_nul(arg, f"argument {i}"))
    if not args[0].strip():
        raise ValueError("the program (first argument) is empty")
    if sum(len(a) for a in args) > MAX_COMMAND_BYTES:
        raise ValueError(f"the command is longer than {MAX_COMMAND_BYTES} bytes")
    if shell:
        if len(args) != 1:
            raise ValueError("with shell = true the command must be one string")
        return (args[0],)
    return tuple(args)


def check_env(value: Any, inherited: bool = False) -> dict[str, str]:
    """A job's variables (names as a shell assigns them: a typo like `1X` is refused), or with
    `inherited` the submitter's environment as it is: any name execve takes (no "=", no NUL).
    Shells export more than identifiers: bash's `export -f f` is `BASH_FUNC_f%%`, and Lmod's
    `module` function is one on most clusters, so every submit from such a shell carries one."""
    if not isinstance(value, Mapping):
        raise ValueError(f'expected a table of NAME = "value", found {describe(value)}')
    if len(value) > MAX_ENV_VARS:
        raise ValueError(f"expected at most {MAX_ENV_VARS} variables, found {len(value)}")
    env: dict[str, str] = {}
    size = 0
    for key, val in value.items():
        if not isinstance(key, str) or not (
            (key and "=" not in key and is_os_text(key) and "\x00" not in key)
            if inherited
            else _ENV_NAME.match(key)
        ):
            raise ValueError(f"{safe_text(str(key))!r} is not a valid environment variable name")
        if isinstance(val, bool) or not isinstance(val, (str, int, float)):
            raise ValueError(f"{key} should be a string, found {describe(val)}")
        text = _no_nul(str(val), key)
        size += len(key) + len(text)
        env[key] = text
    if size > MAX_ENV_BYTES:
        raise ValueError(f"the environment is larger than {MAX_ENV_BYTES} bytes")
    return env


def whole_number_in(lo: int, hi: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number from {lo} to {hi}, found {describe(value)}")
        if not lo <= value <= hi:
            raise ValueError(f"expected a whole number from {lo} to {hi}, found {describe(value)}")
        return value

    return check


def number_in(lo: float, hi: float, *, lo_open: bool = False, optional: bool = True) -> NumberCheck:
    expected = f"expected a number {'above' if lo_open else 'from'} {lo:.15g} to {hi:.15g}"

    def check(value: Any) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{expected}, found {describe(value)}")
        try:
            number = float(value)
        except OverflowError:
            raise ValueError(f"{expected}, found a huge number") from None
        if math.isnan(number) or number > hi or number < lo or (lo_open and number <= lo):
            raise ValueError(f"{expected}, found {value}")
        return number

    return check


def check_dataset(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _DATASET_NAME.match(value):
        raise ValueError(
            "expected a dataset name (letters, digits, '.', '_' or '-', at most 100), "
            f"found {describe(value)}"
        )
    return value


def check_selection(value: Any) -> str | None:
    """A data-selection preset's canonical name (`full`: every sample)."""
    if value is None:
        return None
    from gpudesk.selection.preset_names import PresetError, parse_preset

    try:
        preset = parse_preset(value)
    except PresetError as exc:
        raise ValueError(str(exc)) from None
    return preset.name


def check_workdir(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a directory path, found {describe(value)}")
    return _no_nul(value, "the path")


def workdir_problem(workdir: str) -> str | None:
    """Why `workdir` cannot be a job's working directory, as the calling process sees it: it
    does not exist (or is a link to nothing), it is not a directory (saying what it is), or it
    can never be entered (a link loop, a name too long); None where it is one, or where this
    process cannot tell (no permission to look: the job's own start says). Only a process of
    the job's owner may ask it of her paths: a system engine's daemon never does (root sees
    what she may not enter, and the reverse)."""
    try:
        info = os.stat(workdir)
    except FileNotFoundError:
        if os.path.islink(workdir):
            return f"the working directory {workdir} is a symbolic link to a missing target"
        return f"the working directory {workdir} does not exist"
    except NotADirectoryError:
        return f"the working directory {workdir} does not exist: a folder on its path is a file"
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENAMETOOLONG):  # no one can ever enter it
            return f"the working directory {workdir} cannot be entered: {exc.strerror}"
        return None
    except ValueError:
        return None
    if stat.S_ISDIR(info.st_mode):
        return None
    return f"the working directory {workdir} is not a directory: it is {file_kind(info.st_mode)}"


def check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, found {describe(value)}")
    return value


def check_preempt_signal(value: Any) -> str:
    """`"SIGUSR1"`, `"USR1"` (any case): one of PREEMPT_SIGNALS, by its full name."""
    if not isinstance(value, str):
        raise ValueError(
            f"expected a signal name ({', '.join(PREEMPT_SIGNALS)}), found {describe(value)}"
        )
    name = value.strip().upper()
    name = name if name.startswith("SIG") else "SIG" + name
    if name not in PREEMPT_SIGNALS:
        raise ValueError(
            f"expected one of {', '.join(PREEMPT_SIGNALS)} (signals the job's wrapper outlives; "
            f"SIG may be left out), found {value!r}"
        )
    return name


def check_after(value: Any) -> tuple[int, ...]:
    """The jobs a job waits for, in the order given, each once: job ids, or -k for the k-th
    job of the same submit request (a profile's jobs, which have no ids yet; the store puts
    their ids in when it queues them)."""
    if isinstance(value, bool) or not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of job ids, found {describe(value)}")
    if len(value) > MAX_AFTER:
        raise ValueError(f"expected at most {MAX_AFTER} jobs, found {len(value)}")
    ids: list[int] = []
    for item in value:
        if (
            isinstance(item, bool)
            or not isinstance(item, int)
            or item == 0
            or not -MAX_JOB_ID <= item <= MAX_JOB_ID
        ):
            raise ValueError(
                f"expected job ids (whole numbers from 1, or -k for the k-th job of the same "
                f"request), found {describe(item)}"
            )
        if item not in ids:
            ids.append(item)
    return tuple(ids)


check_gpus = whole_number_in(0, MAX_GPUS)
check_time_limit = number_in(1.0, MAX_TIME_LIMIT_S)
check_priority = whole_number_in(*PRIORITY_RANGE)
check_max_attempts = whole_number_in(1, MAX_ATTEMPTS)
check_memory_gb = number_in(0.0, MAX_MEMORY_GB, lo_open=True)
check_sm_pct = number_in(0.0, 100.0)
check_preempt_grace = number_in(1.0, MAX_PREEMPT_GRACE_S)


def as_key(field: str) -> str:
    """A JobSpec field said in an engine's message as a key (`after_notok`): a client that
    gave it by an option says that option there instead (gpudesk.cli.submit_job.as_option)."""
    return f"`{field}`"


def never_met(
    after: Sequence[int | str],
    after_notok: Sequence[int | str],
    named: Callable[[str], str] = as_key,
) -> str:
    """Why a job waiting for `after` (each must succeed: Slurm's afterok) and `after_notok`
    (each must end without succeeding) could never start ("": it could): a job named by both
    can do only one. Slurm queues such a job for ever (DependencyNeverSatisfied); it is refused
    at submit here. Each a job id, -k (the k-th job of the same request, which has no id yet)
    or a profile's table name. `named`: how a field is said (`gpudesk submit`: its option)."""
    both = next((ref for ref in after if ref in after_notok), None)
    if both is None:
        return ""
    if isinstance(both, str):
        job = quoted(both)  # a profile's [[jobs]] or [[sweeps]] table
    else:
        job = f"job {both}" if both > 0 else f"job {-both} of this request"
    return (
        f"{named('after')} and {named('after_notok')} both name {job}: it would have to "
        f"succeed for {named('after')} and end without succeeding for "
        f"{named('after_notok')}, so this job could never start (Slurm's "
        f"DependencyNeverSatisfied); name {job} in one of them"
    )


def with_tasks(
    after: Sequence[int], after_notok: Sequence[int], array_tasks: TasksOfArrays
) -> tuple[list[int], list[int]]:
    """`after` and `after_notok` with each array's first job followed by its tasks' ids
    (`array_tasks`: the store's, of the ids named), as a dependency on an array's id waits for
    every task: so that `never_met` finds `--after 144 --after-notok 144_2` (job 146) as it
    finds one job named twice."""
    tasks = array_tasks([i for i in {*after, *after_notok} if i > 0])

    def expanded(refs: Sequence[int]) -> list[int]:
        return [t for r in refs for t in (r, *tasks.get(r, {}).values())]

    return expanded(after), expanded(after_notok)


class JobSpec(msgspec.Struct, frozen=True):
    """Everything a job asks for. A frozen value: `gpudesk edit` (core/job_edit.py) replaces a
    queued job's spec with a new one, checked whole; nothing changes it once the job started."""

    name: str
    command: tuple[str, ...]
    shell: bool = False
    workdir: str | None = None
    env: Mapping[str, str] = msgspec.field(default_factory=dict)
    gpus: int = 0
    memory_gb: float | None = None
    sm_pct: float | None = None
    dataset: str | None = None
    selection: str | None = None  # a data-selection preset for the dataset (el2n-25)
    priority: int = 0
    max_attempts: int = 1
    group: str | None = None  # the run (profile invocation) a job belongs to
    # Job ids that must succeed before this one may start (pueue's --after, Slurm's afterok);
    # one of them failing or being cancelled cancels this job, which then never runs.
    after: tuple[int, ...] = ()
    # Wall-clock seconds an attempt may run: then SIGTERM, SIGKILL after DEFAULT_CANCEL_GRACE_S,
    # and the job fails "timed out" (Slurm's --time; not retried, as Slurm's TIMEOUT is not).
    time_limit_s: float | None = None
    # The [[sweeps]] table of its profile that made it (None: a [[jobs]] table, or a single
    # submit): with `group`, what an MLflow parent run stands for.
    sweep: str | None = None
    tracking: TrackingSpec | None = None  # its MLflow run (docs/tracking.md); None: no tracking
    # The Slurm cluster it is submitted to (docs/slurm.md); None: it runs on the station.
    cluster: ClusterSpec | None = None
    # It may be preempted on a full station (docs/preemption.md): `preempt_signal` to its
    # process group, SIGTERM `preempt_grace_s` later, then requeued to resume.
    preemptible: bool = False
    preempt_signal: str = DEFAULT_PREEMPT_SIGNAL
    preempt_grace_s: float = DEFAULT_PREEMPT_GRACE_S
    # Issue 41 item 5 (core/submit_options.py): not before this wall-clock time (sbatch
    # --begin; the queue's reason BeginTime); a comment (sbatch --comment, pueue's label); its
    # array (sbatch --array): the array's first job (None: this is it), its task index, and at
    # most how many of the array run at once; Slurm's afterany and afternotok.
    begin_at: float | None = None
    comment: str | None = None
    array_job: int | None = None
    array_task: int | None = None
    array_limit: int | None = None
    after_any: tuple[int, ...] = ()
    after_notok: tuple[int, ...] = ()
    notify: str | None = (
        None  # a shell command run as its owner when it ends (gpudesk.hw.job_hooks)
    )
    # Its command's umask (core/umask.py): the submitter's, which the client sends with the
    # request. None: sent by a client from before it (or stored before it), and the job runs
    # with the engine's, as before: 077 on a station (engine/daemon.py), a user engine's own.
    umask: int | None = None

    @property
    def dependencies(self) -> tuple[int, ...]:
        """Every job it waits for, of any kind."""
        return (*self.after, *self.after_any, *self.after_notok)

    def with_request_ids(self, ids: Sequence[int]) -> JobSpec:
        """This spec with each -k (the k-th job of its request, queued before it: `ids`) made
        that job's id: in its dependencies and its array's first job."""

        def resolved(refs: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(ids[-ref - 1] if ref < 0 else ref for ref in refs)

        array_job = self.array_job
        if not any(ref < 0 for ref in self.dependencies) and not (array_job or 0) < 0:
            return self
        return msgspec.structs.replace(
            self,
            after=resolved(self.after),
            after_any=resolved(self.after_any),
            after_notok=resolved(self.after_notok),
            array_job=ids[-array_job - 1] if array_job is not None and array_job < 0 else array_job,
        )

    def with_array_tasks(
        self, tasks_of: TasksOf, keys: Iterable[str] = DEPENDENCY_FIELDS
    ) -> JobSpec:
        """This spec with each array's id among its dependencies (of `keys`) followed by its
        tasks' ids (`tasks_of`: an id -> its array's task index -> job id, empty for a job of
        no array): `--after 144` waits for every task of array 144, as Slurm's `afterok:144`
        does. An array's tasks all exist once its submit returned (sent in parts too:
        gpudesk.api.submit_parts), so they are named here, once. SpecError for more than
        MAX_ARRAY_TASKS jobs so named."""
        changed: dict[str, Any] = {}
        for key in keys:
            refs = getattr(self, key)
            # -k, a job of the same request, is that job alone (it has no tasks stored yet)
            tasks = {ref: tasks_of(ref).values() if ref > 0 else () for ref in refs}
            ids = dict.fromkeys(i for ref in refs for i in (ref, *tasks[ref]))
            if len(ids) > MAX_ARRAY_TASKS:
                raise SpecError(
                    key,
                    f"the arrays named come to {len(ids):,} jobs with their tasks; a job runs "
                    f"after at most {MAX_ARRAY_TASKS:,}",
                )
            if len(ids) > len(refs):
                changed[key] = tuple(ids)
        return msgspec.structs.replace(self, **changed) if changed else self

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready for the request and the store's row (msgspec: the tracking and cluster
        tables as dicts; tuples stay tuples, which json writes as arrays). The text is then
        written by stdlib `json`, which keeps a non-UTF-8 file name's surrogates (msgspec.json
        refuses them). Issue 41's fields and `umask` are left out while unset, so that a job
        using none of them is one an engine from before them takes (it refuses a field it does
        not know)."""
        import msgspec  # here, not at the top: `gpudesk top` reads job states and sends no spec

        data = cast("dict[str, Any]", msgspec.to_builtins(self))
        for key in (*SUBMIT_OPTION_FIELDS, "umask"):
            if not data[key] and data[key] != 0:  # None, empty; an array's task 0 is kept
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> JobSpec:
        """Validate an untrusted mapping (from a client or a profile). Raises SpecError."""
        if not isinstance(data, Mapping):
            raise SpecError("job", f"expected a table of job fields, found {describe(data)}")
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise SpecError(unknown[0], "unknown job field")
        if data.get("name") is None:
            raise SpecError("name", "missing")
        if data.get("command") is None:
            raise SpecError("command", "missing")
        values: dict[str, Any] = {}
        shell = _checked("shell", check_bool, data.get("shell", False))
        values["shell"] = shell
        values["command"] = _checked("command", lambda v: check_command(v, shell), data["command"])
        for key, check in _CHECKS.items():
            if key in data and data[key] is not None:
                values[key] = _checked(key, check, data[key])
        for key in ("group", "sweep"):
            if key in data and data[key] is not None:
                values[key] = _checked(key, check_name, data[key])
        for key in ("array_job", "array_limit"):
            if values.get(key) is not None and values.get("array_task") is None:
                raise SpecError(key, "an array's job (and its throttle) needs array_task too")
        if "selection" in data and data["selection"] is not None and not values.get("dataset"):
            raise SpecError(
                "selection", "a selection applies to the job's dataset: name the dataset too"
            )
        if (
            values.get("cluster")
            and values.get("selection") not in (None, "full")
            and ENV_SELECTION not in values.get("env", {})
        ):
            raise SpecError(
                "selection",
                "a job on Slurm reads a selection only where its environment tells it the "
                f"dataset's [datasets] table ({ENV_SELECTION}, which `gpudesk run --on slurm` "
                "and `gpudesk submit --on slurm` set; docs/slurm.md): with no shared loader "
                "producer on the cluster its SharedLoader would read its factory's whole "
                "dataset. Leave out the selection, set it, or run the job on the station",
            )
        if problem := never_met(values.get("after", ()), values.get("after_notok", ())):
            raise SpecError("after_notok", problem)
        return cls(**values)

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> JobSpec:
        """Rebuild a spec the store wrote from a validated one: no checks, since listing a
        long queue reads every row and re-validating each one costs more than the query."""
        tracking = data.get("tracking")
        cluster = data.get("cluster")
        return cls(
            **{
                **data,
                "command": tuple(data["command"]),
                "env": dict(data["env"]),
                "after": tuple(data.get("after", ())),  # specs stored before dependencies had none
                "after_any": tuple(data.get("after_any", ())),
                "after_notok": tuple(data.get("after_notok", ())),
                "tracking": TrackingSpec.from_stored(tracking) if tracking else None,
                "cluster": ClusterSpec.from_stored(cluster) if cluster else None,
            }
        )


def _checked(key: str, check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return check(value)
    except ValueError as exc:
        raise SpecError(key, str(exc)) from None


# The fields that say how a job uses its GPU. Given to a job that asks for none they are a
# mistake (a forgotten --gpus): kept, the job would run with no GPU at all, and a training
# script fall back to the CPU, or fail, without a word about why.
GPU_HINT_FIELDS = ("memory_gb", "sm_pct")


def gpu_hints_without_gpus(spec: JobSpec, among: Iterable[str] = GPU_HINT_FIELDS) -> list[str]:
    """The GPU hint fields `spec` gives (of those `among`) while it asks for no GPU."""
    if spec.gpus:
        return []
    return [key for key in GPU_HINT_FIELDS if key in among and getattr(spec, key) is not None]


# Field checks keyed by the JobSpec field (and profile key) they validate.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "name": check_job_name,
    "workdir": check_workdir,
    "env": check_env,
    "gpus": check_gpus,
    "memory_gb": check_memory_gb,
    "sm_pct": check_sm_pct,
    "dataset": check_dataset,
    "selection": check_selection,
    "priority": check_priority,
    "max_attempts": check_max_attempts,
    "after": check_after,
    "time_limit_s": check_time_limit,
    "tracking": check_tracking,
    "cluster": check_cluster,
    "preemptible": check_bool,
    "preempt_signal": check_preempt_signal,
    "preempt_grace_s": check_preempt_grace,
    **SUBMIT_OPTION_CHECKS,
    "after_any": check_after,
    "after_notok": check_after,
    "umask": check_umask,
}
_FIELDS = frozenset({"name", "command", "shell", "group", "sweep", *_CHECKS})
FIELD_CHECKS: Mapping[str, Callable[[Any], Any]] = _CHECKS
