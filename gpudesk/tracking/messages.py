"""The wire between the engine and a tracking worker: one JSON object per line, each way.

Engine → worker (`Op`s): `create` a run (or find the one made for the same key before: a
restarted engine or worker never makes a second), `log` metrics, params and tags to it, set its
`status`, `bind` a key to a run id the engine already knows. Every op names the store (`uri`)
and the run by gpudesk's key, never by MLflow's id alone, so an op sent before the run existed
still finds it.

Worker → engine (`Reply`s): the `run` id made for a key, an `acked` op the engine asked to hear
about (a run's end, so it is not sent again after a restart), a `rejected` op (the store said
no: retrying cannot help) and the `health` of a store (updates queued, the last error).

A worker runs as the jobs' owner, who may attach to it or write to its pipe herself: on the
engine's side a reply is untrusted input (`decode_reply`): a line of at most MAX_REPLY_BYTES,
every field checked for its type and shape (a run id as MLflow makes them, a key or a URI of
bounded length), free text cut to MAX_REPLY_TEXT characters with its control characters spelled
out. Whether the run it names is one its worker may speak for is the tracker's to check.

A leaf: stdlib only, imported by both ends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

MAX_LINE_BYTES = 4 * 1024 * 1024  # an op line longer than this is refused by the worker
# A reply is a key, a run id, a store's URI and an error message: far less than this. A longer
# line is not a reply of ours, and the engine does not hold more of one in memory.
MAX_REPLY_BYTES = 64 * 1024
MAX_REPLY_TEXT = 1000  # a rejection's message or a store's error, as kept and shown
MAX_KEY_CHARS = 200  # gpudesk's keys are ~50 (content.job_key, content.sweep_key)
MAX_URI_CHARS = 2000  # the engine's own bound on a tracking URI (jobs.MAX_TRACKING_URI)
# After the end of its input (the engine stopped or died), what a worker may take to finish what
# it holds before it exits, a store call in flight or not; the engine waits as long for it.
EXIT_GRACE_S = 1.0
MAX_COUNT = 2**53  # queued and dropped counts: whole numbers JSON keeps exactly
# MLflow's own check of a run id (mlflow.utils.validation._RUN_ID_REGEX): what a store makes.
RUN_ID = re.compile(r"[a-zA-Z0-9][\w\-]{0,255}", re.ASCII)
# C0 and C1 controls and DEL: a terminal acts on them; a reply's text shows them spelled out.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

Status = Literal["SCHEDULED", "RUNNING", "FINISHED", "FAILED", "KILLED"]
STATUSES = ("SCHEDULED", "RUNNING", "FINISHED", "FAILED", "KILLED")


class BadMessage(ValueError):
    """A line that is not one of this module's messages."""


class MetricPoint(msgspec.Struct, frozen=True):
    """One value of a metric: MLflow's (key, value, timestamp in ms, step)."""

    name: str
    value: float
    timestamp_ms: int
    step: int


class CreateRun(msgspec.Struct, frozen=True):
    """Make the run for `key` (or find the one tagged with it) in `experiment`, with `tags`
    and `params`; under the run of `parent` (a key) when given."""

    uri: str
    key: str
    experiment: str
    run_name: str
    status: str = "SCHEDULED"
    start_ms: int | None = None
    tags: Mapping[str, str] = msgspec.field(default_factory=dict)
    params: Mapping[str, str] = msgspec.field(default_factory=dict)
    parent: str | None = None
    op: Literal["create"] = "create"


class LogToRun(msgspec.Struct, frozen=True):
    """Metrics, params and tags for the run of `key`."""

    uri: str
    key: str
    metrics: tuple[MetricPoint, ...] = ()
    params: Mapping[str, str] = msgspec.field(default_factory=dict)
    tags: Mapping[str, str] = msgspec.field(default_factory=dict)
    op: Literal["log"] = "log"


class SetStatus(msgspec.Struct, frozen=True):
    """The run of `key` is now `status`; `end_ms` ends it. `ack`: reply `acked` once done."""

    uri: str
    key: str
    status: str
    end_ms: int | None = None
    ack: bool = False
    op: Literal["status"] = "status"


class BindRun(msgspec.Struct, frozen=True):
    """The run of `key` is `run_id` (the engine stored it): no need to look for it."""

    uri: str
    key: str
    run_id: str
    op: Literal["bind"] = "bind"


Op = CreateRun | LogToRun | SetStatus | BindRun


class RunMade(msgspec.Struct, frozen=True):
    key: str
    run_id: str
    kind: Literal["run"] = "run"


class Acked(msgspec.Struct, frozen=True):
    key: str
    kind: Literal["acked"] = "acked"


class Rejected(msgspec.Struct, frozen=True):
    key: str
    message: str
    kind: Literal["rejected"] = "rejected"


class Health(msgspec.Struct, frozen=True):
    """A store's state: `queued` updates waiting for it, `error` while it fails (None once it
    answers again), `dropped` metric points let go because too many waited."""

    uri: str
    queued: int
    error: str | None = None
    dropped: int = 0
    kind: Literal["health"] = "health"


Reply = RunMade | Acked | Rejected | Health


def encode(message: Op | Reply) -> bytes:
    """One message as its line (with the newline)."""
    data = msgspec.structs.asdict(message)  # its fields in order, values as they are
    if isinstance(message, LogToRun):
        data["metrics"] = [[m.name, m.value, m.timestamp_ms, m.step] for m in message.metrics]
    for key in ("tags", "params"):
        if key in data:
            data[key] = dict(data[key])
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def _text(data: Mapping[str, Any], key: str, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise BadMessage(f"{key!r} must be a string")
    return value


def _int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadMessage(f"{key!r} must be a whole number")
    return value


def _strings(data: Mapping[str, Any], key: str) -> dict[str, str]:
    value = data.get(key) or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BadMessage(f"{key!r} must map strings to strings")
    return value


def _points(raw: Any) -> tuple[MetricPoint, ...]:
    if not isinstance(raw, list):
        raise BadMessage("'metrics' must be a list")
    points = []
    for item in raw:
        if (
            not isinstance(item, list)
            or len(item) != 4
            or not isinstance(item[0], str)
            or isinstance(item[1], bool)
            or not isinstance(item[1], (int, float))
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in item[2:])
        ):
            raise BadMessage("a metric is [name, value, timestamp_ms, step]")
        points.append(MetricPoint(item[0], float(item[1]), item[2], item[3]))
    return tuple(points)


def _json(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_LINE_BYTES:
        raise BadMessage(f"a line of {len(line)} bytes, over {MAX_LINE_BYTES}")
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: `[[[[…` nested too deep
        raise BadMessage(f"not JSON: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise BadMessage("not a JSON object")
    return data


def decode_op(line: bytes) -> Op:
    """The op on one line from the engine. Raises BadMessage."""
    data = _json(line)
    op = data.get("op")
    uri, key = _text(data, "uri"), _text(data, "key")
    if op == "create":
        status = _text(data, "status")
        if status not in STATUSES:
            raise BadMessage(f"unknown status {status!r}")
        return CreateRun(
            uri,
            key,
            _text(data, "experiment"),
            _text(data, "run_name"),
            status,
            _int(data, "start_ms"),
            _strings(data, "tags"),
            _strings(data, "params"),
            _text(data, "parent", optional=True),
        )
    if op == "log":
        return LogToRun(
            uri, key, _points(data.get("metrics", [])), _strings(data, "params"),
            _strings(data, "tags"),
        )  # fmt: skip
    if op == "status":
        status = _text(data, "status")
        if status not in STATUSES:
            raise BadMessage(f"unknown status {status!r}")
        return SetStatus(uri, key, status, _int(data, "end_ms"), bool(data.get("ack")))
    if op == "bind":
        return BindRun(uri, key, _text(data, "run_id"))
    raise BadMessage(f"unknown op {op!r}")


def shown_text(text: str, limit: int = MAX_REPLY_TEXT) -> str:
    """Free text from a worker as it may be kept and shown: each control character spelled out
    (`\\x1b`), cut to `limit` characters (saying so)."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded(data: Mapping[str, Any], key: str, limit: int) -> str:
    value: str = _text(data, key)
    if not value or len(value) > limit or _CONTROL.search(value):
        raise BadMessage(f"{key!r} must be 1 to {limit} characters, no control character")
    return value


def _count(data: Mapping[str, Any], key: str) -> int:
    value = _int(data, key) or 0
    if not 0 <= value <= MAX_COUNT:
        raise BadMessage(f"{key!r} must be a count (0 or more)")
    return value


def decode_reply(line: bytes) -> Reply:
    """The reply on one line from a worker, checked as untrusted input (the module's
    docstring). Raises BadMessage (its text short: it names a field, never echoes a value)."""
    if len(line) > MAX_REPLY_BYTES:
        raise BadMessage(f"a line of {len(line)} bytes, over {MAX_REPLY_BYTES}")
    data = _json(line)
    kind = data.get("kind")
    if kind == "run":
        run_id = _text(data, "run_id")
        if not RUN_ID.fullmatch(run_id):
            raise BadMessage("'run_id' is not a run id as MLflow makes them")
        return RunMade(_bounded(data, "key", MAX_KEY_CHARS), run_id)
    if kind == "acked":
        return Acked(_bounded(data, "key", MAX_KEY_CHARS))
    if kind == "rejected":
        message = shown_text(_text(data, "message"))
        return Rejected(_bounded(data, "key", MAX_KEY_CHARS), message)
    if kind == "health":
        error = _text(data, "error", optional=True)
        return Health(
            _bounded(data, "uri", MAX_URI_CHARS),
            _count(data, "queued"),
            None if error is None else shown_text(error),
            _count(data, "dropped"),
        )
    raise BadMessage("an unknown kind of reply")
