"""Each request's arguments, one type per op: the client encodes its requests from them and the
engine decodes each request's `args` into them (`decode_args`), so an argument's type, bounds and
the message a bad value gets are written once, here.

A bad value is `invalid_args` with a message naming the field: the `why` a field's `Meta`
carries ("'history' must be 0 to 600 points"), or msgspec's own words with the field's path.
Fields a type does not know are ignored, as the engine always did: a newer client's optional
argument reaches an older engine as nothing. An op whose meaning would change if an argument
were ignored is an op of its own (`check_submit`, `check_configure`).

A job's spec, a [station] table, a dataset's loader settings and a calibration observation stay
JSON objects here: each has its own checker in `core/` (`JobSpec.from_dict`,
`StationConfig`'s, `DatasetSpec.from_dict`) or the learner's, which names the field at fault.
"""

from __future__ import annotations

import re
import typing
from typing import Annotated, Any, Literal

import msgspec

from gpudesk.core.jobs import DEFAULT_CANCEL_GRACE_S, MAX_AFTER, PRIORITY_RANGE
from gpudesk.core.name_pattern import MAX_NAME_PATTERN, name_pattern_refusal
from gpudesk.core.protocol import INVALID_ARGS, MAX_LISTING_IDS, MAX_ROW_ID, ProtocolError
from gpudesk.core.umask import MAX_UMASK
from gpudesk.core.wire.base import JobStateName
from gpudesk.text import is_text, safe_text

MAX_JOBS_PER_REQUEST = 10_000
MAX_CANCEL_GRACE_S = 3600.0
MAX_HISTORY_POINTS = 600
MAX_OBSERVATIONS = 10_000  # per model_observe request
LOG_PIECE_BYTES = 1 << 20  # the most of a log one `log` reply carries (joblog's read step)
_PRIORITY_SPAN = PRIORITY_RANGE[1] - PRIORITY_RANGE[0]


_UMASK_WHY = "must be a umask: a number from 0 to 511 (0o777; umask 027 is 23)"


def _why(text: str) -> dict[str, str]:
    return {"why": text}


# A job named by its id or its name; the engine checks an id's range and a name's text when it
# looks the job up, so a reference that is neither says which.
JobRef = int | str
JobRefs = Annotated[
    list[JobRef],
    msgspec.Meta(
        min_length=1,
        max_length=MAX_JOBS_PER_REQUEST,
        extra=_why(f"must be a non-empty list of at most {MAX_JOBS_PER_REQUEST} jobs"),
    ),
]
JobId = Annotated[int, msgspec.Meta(ge=-MAX_ROW_ID, le=MAX_ROW_ID)]
# Ids among a request's jobs' dependencies that name an array's first job alone, where an id
# names every task of its array (Slurm's afterok:144): the client read `144_0`, or the first
# task's name, so (docs/jobs.md)
FirstTasksAlone = Annotated[
    list[JobId], msgspec.Meta(max_length=MAX_AFTER, extra=_why(f"at most {MAX_AFTER} job ids"))
]
Cursor = Annotated[int, msgspec.Meta(ge=0, le=MAX_ROW_ID, extra=_why("must be a job id"))]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, extra=_why("must be a GPU index (0, 1, ...)"))]
Uid = Annotated[int, msgspec.Meta(ge=0, lt=2**32)]
NotBlank = Annotated[str, msgspec.Meta(pattern=r"\S")]


class OpArgs(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The base of every op's arguments (none: `ping`, `shutdown`, `model_show`)."""


class StatusArgs(OpArgs, frozen=True):
    fresh_loaders: bool = False  # ask each shared loader now instead of using its last report


class ConfigureArgs(OpArgs, frozen=True):
    """`configure` and `check_configure`: a [station] table (StationConfig checks it)."""

    station: dict[str, Any] | None = None


class DatasetsArgs(OpArgs, frozen=True):
    """Shared-loader settings to register (DatasetSpec checks each); [] lists them."""

    datasets: list[dict[str, Any]]


class InParts(msgspec.Struct, frozen=True, kw_only=True):
    """A submission too large for one request, sent in `parts` (gpudesk.api.submit_parts) of
    `jobs` in all: the client holds each part's jobs until all are queued, then releases them.
    Its jobs' events say so, not "held by user" (core/job_changes.hold_event). An engine from
    before it ignores it (as any field it does not know) and says "by user", as it did."""

    jobs: Annotated[int, msgspec.Meta(ge=1, le=MAX_ROW_ID)]
    parts: Annotated[int, msgspec.Meta(ge=1, le=MAX_ROW_ID)]


class PartOf(msgspec.Struct, frozen=True, kw_only=True):
    """The whole submission a part is of (gpudesk.api.submit_parts): `jobs` in all, `sent` of
    them queued by the parts before it. `[station] max_queued_per_user` is counted over the
    whole (policy/user_limits.py): the first part of one too large is refused, saying what
    she asked for, not what the part holds. An engine from before it ignores it."""

    jobs: Annotated[int, msgspec.Meta(ge=1, le=MAX_ROW_ID)]
    sent: Annotated[int, msgspec.Meta(ge=0, le=MAX_ROW_ID)] = 0


class SubmitArgs(OpArgs, frozen=True):
    """`submit` and `check_submit`: the jobs (JobSpec checks each) and the submitter's
    environment, which each job's own `env` is laid on; `hold`: queued held (as sbatch --hold),
    none starting until released; `in_parts`: held by the client as one of the parts of a
    larger submission, not by the user; `part_of`: the submission a part is of, held by
    either (PartOf)."""

    jobs: Annotated[
        list[dict[str, Any]],
        msgspec.Meta(
            min_length=1,
            max_length=MAX_JOBS_PER_REQUEST,
            extra=_why(f"must be a non-empty list of at most {MAX_JOBS_PER_REQUEST} jobs"),
        ),
    ]
    env: dict[str, str] | None = None
    hold: bool = False
    in_parts: InParts | None = None
    part_of: PartOf | None = None
    first_tasks_alone: FirstTasksAlone = msgspec.field(default_factory=list)
    # The submitter's umask, each job's that gives none (core/umask.py); absent from an older
    # client, whose jobs run with the engine's (as an older engine ignores it)
    umask: Annotated[int, msgspec.Meta(ge=0, le=MAX_UMASK, extra=_why(_UMASK_WHY))] | None = None

    def in_parts_problem(self) -> str | None:
        """Why `in_parts` means nothing here (the engine refuses it, not take it silently):
        it goes with `hold`, and its counts must hold this part, as its jobs' events say them."""
        whole = self.in_parts
        if whole is None:
            return None
        if not self.hold:
            return (
                "in_parts: only a held submit is one of a submission's parts (its client holds "
                "each part until all are queued, then releases them): give 'hold': true with "
                "it, or leave it out"
            )
        if len(self.jobs) > whole.jobs:
            return (
                f"in_parts: this part has {len(self.jobs):,} jobs, more than the "
                f"{whole.jobs:,} of its whole submission"
            )
        if whole.parts > whole.jobs:
            return f"in_parts: {whole.jobs:,} jobs cannot be sent in {whole.parts:,} parts"
        return None


class JobsArgs(OpArgs, frozen=True):
    """`jobs`: a page of the listing (docs/protocol.md says how the cursors combine); `name`:
    only the jobs whose name matches this shell pattern (core.name_pattern). An engine from
    before `name` ignores it and lists every job; `gpudesk cancel --name` checks each it picks.
    `actable`, where no `user` is given: only the jobs the caller may act on, her own unless
    she is an admin (`JobList.own_only` says which); what `gpudesk cancel --name` picks. An
    engine from before it lists every job, whose others' the engine refuses one by one."""

    states: list[JobStateName] | None = None
    group: str | None = None
    name: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=MAX_NAME_PATTERN,
                extra=_why(f"must be a name pattern of at most {MAX_NAME_PATTERN} characters"),
            ),
        ]
        | None
    ) = None
    ids: (
        Annotated[
            list[JobId],
            msgspec.Meta(
                max_length=MAX_LISTING_IDS,
                extra=_why(
                    f"must be a list of at most {MAX_LISTING_IDS} job ids per request; ask "
                    "for the rest in further requests (the client does)"
                ),
            ),
        ]
        | None
    ) = None
    limit: (
        Annotated[int, msgspec.Meta(ge=1, le=MAX_ROW_ID, extra=_why("must be a positive integer"))]
        | None
    ) = None
    after_id: Cursor | None = None
    before_id: Cursor | None = None
    user: str | Uid | None = None  # a user name, or a uid
    usage: bool = False
    archived: bool = False
    count: bool = False
    actable: bool = False

    def text_problem(self) -> str | None:
        """Why `group` or `name` is not text the store can be asked for; None where both are
        (their types and lengths were checked as they were decoded)."""
        if self.group is not None and not is_text(self.group):
            return "'group' must be a string (UTF-8 text)"
        refusal = None if self.name is None else name_pattern_refusal(self.name)
        return None if refusal is None else f"'name': {refusal}"


class ShowArgs(OpArgs, frozen=True):
    job: JobRef
    env: bool = False  # the job's environment (its owner's and the admins' only)
    series: bool = False  # its telemetry over its life


class LogArgs(OpArgs, frozen=True):
    job: JobRef
    attempt: Annotated[int, msgspec.Meta(ge=1)] | None = None  # None: the latest
    offset: Annotated[
        int, msgspec.Meta(ge=0, le=MAX_ROW_ID, extra=_why("must be a stream position (0 or more)"))
    ] = 0
    max_bytes: Annotated[
        int,
        msgspec.Meta(ge=0, le=LOG_PIECE_BYTES, extra=_why(f"must be from 0 to {LOG_PIECE_BYTES}")),
    ] = LOG_PIECE_BYTES

    def attempt_of(self, job_id: int, attempts: int) -> int:
        """The attempt to read (default: the latest) of job `job_id`, which has had `attempts`:
        the fields' types and bounds were checked as they were decoded, the attempt is checked
        against the job's here (ProtocolError, invalid_args)."""
        if attempts == 0:
            raise ProtocolError(INVALID_ARGS, f"job {job_id} has not started yet")
        if self.attempt is not None and self.attempt > attempts:
            raise ProtocolError(
                INVALID_ARGS, f"'attempt': job {job_id} has attempts 1 to {attempts}"
            )
        return attempts if self.attempt is None else self.attempt


class JobRefsArgs(OpArgs, frozen=True):
    """`hold`, `release` and `requeue`: the jobs, by id or name."""

    jobs: JobRefs


class ReleaseArgs(JobRefsArgs, frozen=True):
    """`release`; `in_parts`: the client's release of a submission it sent in parts, once all
    its jobs are queued (`SubmitArgs.in_parts`)."""

    in_parts: InParts | None = None


class CancelArgs(JobRefsArgs, frozen=True):
    grace: Annotated[
        float,
        msgspec.Meta(
            ge=0, le=MAX_CANCEL_GRACE_S, extra=_why(f"must be 0 to {MAX_CANCEL_GRACE_S:g} seconds")
        ),
    ] = DEFAULT_CANCEL_GRACE_S


class PriorityArgs(JobRefsArgs, frozen=True):
    """Either `priority` (the new value) or `delta` (+1 raises, -1 lowers)."""

    priority: (
        Annotated[
            int,
            msgspec.Meta(
                ge=PRIORITY_RANGE[0],
                le=PRIORITY_RANGE[1],
                extra=_why(
                    f": expected a whole number from {PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]}"
                ),
            ),
        ]
        | None
    ) = None
    delta: (
        Annotated[
            int,
            msgspec.Meta(
                ge=-_PRIORITY_SPAN,
                le=_PRIORITY_SPAN,
                extra=_why(
                    f"must be a whole number from {-_PRIORITY_SPAN} to {_PRIORITY_SPAN}, "
                    "e.g. 1 or -1"
                ),
            ),
        ]
        | None
    ) = None


class EditArgs(OpArgs, frozen=True):
    """`edit`: a job that has not started, its `fields` replaced (JobSpec's names, those
    `core/job_edit.EDITABLE_FIELDS` lists; null clears one; the spec is checked whole, as a
    submit's), `set_env` laid on its own environment and `unset_env` taken off it (and off the
    environment it was submitted from)."""

    job: JobRef
    fields: dict[str, Any] = msgspec.field(default_factory=dict)
    set_env: dict[str, str] = msgspec.field(default_factory=dict)
    unset_env: Annotated[
        list[NotBlank],
        msgspec.Meta(max_length=4096, extra=_why("must be a list of variable names")),
    ] = msgspec.field(default_factory=list)
    first_tasks_alone: FirstTasksAlone = msgspec.field(default_factory=list)  # in `fields`


class TelemetryArgs(OpArgs, frozen=True):
    history: Annotated[
        int,
        msgspec.Meta(
            ge=0, le=MAX_HISTORY_POINTS, extra=_why(f"must be 0 to {MAX_HISTORY_POINTS} points")
        ),
    ] = 0


class MigPlanArgs(OpArgs, frozen=True):
    gpu: GpuIndex | None = None  # None: every MIG-capable GPU


class MigApplyArgs(OpArgs, frozen=True):
    gpu: GpuIndex
    profiles: Annotated[
        list[NotBlank],
        msgspec.Meta(
            min_length=1,
            extra=_why(
                'must be a non-empty list of MIG profile names, e.g. ["3g.20gb", "2g.10gb"]'
            ),
        ),
    ]
    confirm: bool = False


class ModelObserveArgs(OpArgs, frozen=True):
    gpu_model: Annotated[
        str,
        msgspec.Meta(
            pattern=r"\S",
            extra=_why('must name the GPU model, as NVML does ("NVIDIA A100-SXM4-40GB")'),
        ),
    ]
    observations: Annotated[
        list[dict[str, Any]],
        msgspec.Meta(
            min_length=1,
            max_length=MAX_OBSERVATIONS,
            extra=_why(f"must be a list of 1 to {MAX_OBSERVATIONS} observations"),
        ),
    ]
    source: Literal["learned", "calibrated"] = "calibrated"


class ModelResetArgs(OpArgs, frozen=True):
    gpu_model: str | None = None  # None: every GPU model
    confirm: bool = False  # resetting drops what was learned: refused without it


class SignalArgs(JobRefsArgs, frozen=True):
    """`signal`: a signal for the jobs' processes, by name (`USR1`, `SIGUSR1`) or number; the
    engine takes one of gpudesk.core.job_signals.JOB_SIGNALS (`job_signal` says why not)."""

    signal: str | int


MAX_DRAIN_REASON = 500


class DrainArgs(OpArgs, frozen=True):
    """`drain`: why (shown with the drain; at most 500 characters)."""

    reason: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=MAX_DRAIN_REASON,
                extra=_why(f"must be at most {MAX_DRAIN_REASON} characters"),
            ),
        ]
        | None
    ) = None


# Each op's argument type: what the engine decodes a request's `args` into.
REQUEST_ARGS: dict[str, type[OpArgs]] = {
    "ping": OpArgs,
    "status": StatusArgs,
    "shutdown": OpArgs,
    "configure": ConfigureArgs,
    "check_configure": ConfigureArgs,
    "datasets": DatasetsArgs,
    "submit": SubmitArgs,
    "check_submit": SubmitArgs,
    "jobs": JobsArgs,
    "show": ShowArgs,
    "log": LogArgs,
    "cancel": CancelArgs,
    "hold": JobRefsArgs,
    "release": ReleaseArgs,
    "priority": PriorityArgs,
    "requeue": JobRefsArgs,
    "telemetry": TelemetryArgs,
    "mig_plan": MigPlanArgs,
    "mig_apply": MigApplyArgs,
    "model_show": OpArgs,
    "model_observe": ModelObserveArgs,
    "model_reset": ModelResetArgs,
    "edit": EditArgs,
    "suspend": JobRefsArgs,
    "resume": JobRefsArgs,
    "signal": SignalArgs,
    "drain": DrainArgs,
    "undrain": OpArgs,
}


class ArgsError(ValueError):
    """A request's arguments that do not decode into its op's type; the message names the
    field."""


_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"missing required field `(?P<field>[^`]+)`")


def decode_args(args_type: type[OpArgs], args: dict[str, Any]) -> OpArgs:
    """`args` (a request's decoded JSON object) as `args_type`; raises ArgsError naming the
    field at fault."""
    try:
        return msgspec.convert(args, args_type, strict=True)
    except msgspec.ValidationError as exc:
        raise ArgsError(args_error_message(args_type, str(exc))) from None
    except UnicodeEncodeError:
        # a bad value holding a surrogate (a file name's byte, \udce9): msgspec cannot quote it
        # in its message, so the message comes from the same value spelled out (gpudesk.text)
        try:
            msgspec.convert(_spelled(args), args_type, strict=True)
        except msgspec.ValidationError as exc:
            raise ArgsError(args_error_message(args_type, str(exc))) from None
        raise ArgsError("invalid arguments: a value is not UTF-8 text") from None


def _spelled(value: Any) -> Any:
    """`value` with every string made safe to quote (`gpudesk.text.safe_text`)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {_spelled(k): _spelled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_spelled(v) for v in value]
    return value


def args_error_message(args_type: type[OpArgs], error: str) -> str:
    """msgspec's error as the engine says it: "'history' must be 0 to 600 points" where the
    field's type carries its `why`, else "'jobs[2]': Expected `int | str`, got `array`"."""
    missing = _MISSING.search(error)
    if missing:
        return f"'{missing['field']}' is missing"
    found = _PATH.search(error)
    if not found:
        return f"invalid arguments: {error}"
    path = found["path"].lstrip(".")
    field = re.split(r"[.\[]", path, maxsplit=1)[0]
    why = _field_why(args_type, field)
    if why is not None:  # "must be ...", or ": expected ..." (the spec checks' own words)
        return f"'{field}'{why}" if why.startswith(":") else f"'{field}' {why}"
    return f"'{path}': {error[: found.start()]}"


def _field_why(args_type: type[OpArgs], field: str) -> str | None:
    hints = typing.get_type_hints(args_type, include_extras=True)
    return _why_of(hints[field]) if field in hints else None


def _why_of(hint: Any) -> str | None:
    """The `why` of the first Meta in a (possibly optional, possibly nested) annotation."""
    for meta in getattr(hint, "__metadata__", ()):
        if isinstance(meta, msgspec.Meta) and meta.extra and "why" in meta.extra:
            return str(meta.extra["why"])
    for inner in typing.get_args(hint):
        why = _why_of(inner)
        if why is not None:
            return why
    return None
