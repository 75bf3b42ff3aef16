"""The engine's wire protocol: versioned JSON in length-prefixed frames on a Unix stream socket.

Frame:    a 4-byte big-endian length, then that many bytes.
Request:  {"v": 1, "id": <int|str>, "op": "<name>", "args": {...}}
Reply:    {"v": 1, "id": <same>, "ok": true,  "result": {...}}
          {"v": 1, "id": <same>, "ok": false, "error": {"code": "...", "message": "..."}}
Event:    after a `subscribe` request ({"topic": "job" | "telemetry" | ""}) is answered, the
          connection carries only events, one frame each: b"<topic>\n" + {"v": 1, "ts": ..., ...}

Why a plain Unix socket and not zmq (which carried this until the shared station): the engine
must learn who sends a request from the kernel (SO_PEERCRED: pid, uid, gid; SO_PEERGROUPS: the
supplementary groups), never from what the client wrote. Over zmq's ipc:// those are reachable
only through libzmq's per-message Peer-Address metadata or a ZAP handler, and a client-sent
User-Id can be forged; on a plain stream socket they belong to the connection.

Text on the wire: a request may carry a file name, argument or environment value that is not
UTF-8 as Python spells it (`\udce9` escapes, PEP 383), and the engine keeps it as it is, so the
job runs the exact bytes; a surrogate no byte stands for is refused (`invalid_args`). Replies and
events are strict UTF-8 JSON: such bytes are spelled `\xe9` there (`gpudesk.text`).
A message is at most MAX_MESSAGE_BYTES: a client refuses to send a larger one, and the engine's
socket drops the connection of a peer that announces one anyway.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from typing import TYPE_CHECKING, Any

import msgspec

from gpudesk.text import is_os_text, json_bytes, safe_text

if TYPE_CHECKING:
    import msgspec

PROTOCOL_VERSION = 1
# A message's bounds. The engine parses each request on the one loop that serves everyone, and
# json.loads holds the GIL, so what bounds a request is what parsing it costs the others.
# Measured here (2-core VM, CPython 3.12, docs/shared-station.md): the worst shapes cost 120 to
# 460 ns per JSON value (nested empty lists, which also wake the cyclic GC), so
# MAX_REQUEST_VALUES = 100,000 keeps one request's parse under ~50 ms even at its worst and ~12 ms
# for ints; a sweep's job is ~45 values (2,200 jobs per submit). Strings cost ~2 ms per MiB: the
# byte bound is sized by execve instead: one job's command and environment may not exceed ARG_MAX
# (2 MiB with the default 8 MiB stack; fact, execve(2)), and JSON may spell a byte in up to 6
# (\u0001): 8 MiB fits every job a kernel would start, bar the most escaped (assumption).
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
MAX_REQUEST_VALUES = 100_000
# The most jobs one `submit` (or `check_submit`) request queues on the station. A submit is one
# transaction, all or none, so it is not split over the loop's turns as job control is: it is
# bounded instead. Measured (docs/benchmarks.md, "What a part costs the engine's loop"): 1,000
# jobs held the loop 57-71 ms, so 500 hold it about 30-36 ms, under issue 36's 50 ms a request
# with room for a slower machine. A design choice, not a tuned value. A larger submission goes
# in parts that start as one (gpudesk.api.submit_parts); a Slurm cluster's is sent whole.
MAX_STATION_SUBMIT_JOBS = 500
# The most jobs one `jobs` reply carries: a page. Measured (docs/benchmarks.md, "Listings of
# the whole store"): over a store of 100,000 jobs, on a 2-core machine shared with other work
# (load 5-6), a page with usage took p50 20 ms, p95 32 ms to build on the engine's loop at 100
# jobs, p95 58 ms at 200; 100 keeps a page well under the loop's 50 ms p99 budget per request.
# A longer listing is several requests, and other clients' requests go between them.
JOBS_PAGE_CAP = 100
# The most job ids one `jobs` request may name: a labelled assumption, far above any one
# run's jobs (MAX_JOBS_PER_REQUEST is 10,000 too) and far below SQLite's 32,766 variables per
# statement (3.32 and later). The client asks for more in several requests.
MAX_LISTING_IDS = 10_000
# `show` sends a job's latest this many events, and counts those before them.
SHOWN_EVENTS = 1000
MAX_ROW_ID = 2**63 - 1  # the largest id SQLite stores: a larger int is no job's
FRAME_HEADER = struct.Struct(">I")  # each frame's length
SUBSCRIBE_OP = "subscribe"  # answered by the socket itself: the connection then carries events

# Error codes a client can act on.
BAD_REQUEST = "bad_request"
UNSUPPORTED_VERSION = "unsupported_version"
UNKNOWN_OP = "unknown_op"
INVALID_ARGS = "invalid_args"
UNKNOWN_JOB = "unknown_job"
INTERNAL = "internal"
REFUSED = "refused"  # a valid request the engine may not carry out now (config, state, confirm)
TOO_LARGE = "too_large"  # a request over MAX_MESSAGE_BYTES or MAX_REQUEST_VALUES
EVENTS_MISSED = "events_missed"  # a subscriber fell too far behind: cut off, events were missed
MIG_FAILED = "mig_failed"  # nvidia-smi could not change or read the MIG layout


class ProtocolError(Exception):
    def __init__(self, code: str, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


class Request(msgspec.Struct, frozen=True):
    op: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    id: Any = None

    def encode(self) -> bytes:
        return json.dumps(
            {"v": PROTOCOL_VERSION, "id": self.id, "op": self.op, "args": self.args}
        ).encode()


def decode_request(raw: bytes) -> Request:
    """Parse untrusted bytes; raises ProtocolError with the most useful code."""
    try:
        message = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(BAD_REQUEST, f"the request is not valid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(BAD_REQUEST, "the request must be a JSON object")
    request_id = message.get("id")
    if not isinstance(request_id, (int, str, type(None))) or isinstance(request_id, bool):
        request_id = None
    version = message.get("v")
    if type(version) is not int or version != PROTOCOL_VERSION:  # true and 1.0 are not 1
        raise ProtocolError(
            UNSUPPORTED_VERSION,
            f"protocol version {version!r} is not supported; this engine speaks "
            f"{PROTOCOL_VERSION} (is the client from another gpudesk version?)",
            request_id,
        )
    op = message.get("op")
    if not isinstance(op, str) or not op:
        raise ProtocolError(BAD_REQUEST, "the request has no 'op'", request_id)
    args = message.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ProtocolError(BAD_REQUEST, "'args' must be a JSON object", request_id)
    if _SURROGATE_ESCAPE.search(raw):
        where = _not_os_text(message, "")
        if where is not None:
            raise ProtocolError(
                INVALID_ARGS,
                f"invalid request: {where.lstrip('.')} holds a lone surrogate (like \\ud800) that "
                "stands for no byte: it is neither text nor the bytes of a file name",
                request_id,
            )
    return Request(op=op, args=args, id=request_id)


# How a lone surrogate reaches a decoded string: a JSON escape (\ud800), or its UTF-8-style bytes
# (ED A0..BF xx), which json.loads takes (it decodes bytes with "surrogatepass"). Most requests
# have neither and skip the walk.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _not_os_text(value: Any, path: str) -> str | None:
    """Where in a decoded request a string is neither text nor bytes of a file name (a path
    like `.args.jobs[0].command[1]`), or None."""
    if isinstance(value, str):
        return None if is_os_text(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{safe_text(key)}"
            if not is_os_text(key):
                return where
            found = _not_os_text(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _not_os_text(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


@functools.cache
def _encoder() -> msgspec.json.Encoder:
    """The engine's reply encoder, made on first use: `gpudesk top` and the other clients that
    import this module never encode a reply, and msgspec costs them ~12 ms to import."""
    import msgspec

    return msgspec.json.Encoder()


def encode_result(request_id: Any, result: Any) -> bytes:
    """A result reply's bytes. `result`: a wire type (`gpudesk.core.wire`) or plain data,
    written by msgspec in one pass (a `jobs` page of 100 jobs: 0.15 ms on the loop, where
    builtins then stdlib json took 1.5 ms; bench/reply_encode.py, docs/benchmarks.md). A
    string holding a lone surrogate (a job's argv or file name that is not UTF-8, kept as its
    exact bytes) makes msgspec raise; that reply is written by `json_bytes`, which spells the
    surrogate out."""
    reply = {"v": PROTOCOL_VERSION, "id": request_id, "ok": True, "result": result}
    try:
        return _encoder().encode(reply)
    except UnicodeEncodeError:
        import msgspec

        return json_bytes({**reply, "result": msgspec.to_builtins(result)})


def encode_error(request_id: Any, code: str, message: str) -> bytes:
    return json_bytes(
        {
            "v": PROTOCOL_VERSION,
            "id": request_id,
            "ok": False,
            "error": {"code": code, "message": message},
        }
    )


def decode_reply(raw: bytes) -> tuple[Any, dict[str, Any]]:
    """Return (request id, result) or raise ProtocolError carrying the engine's error."""
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise ProtocolError(
            BAD_REQUEST, f"the engine sent a reply that is not JSON: {exc}"
        ) from None
    if not isinstance(message, dict) or message.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(UNSUPPORTED_VERSION, "the engine speaks another protocol version")
    if message.get("ok"):
        return message.get("id"), message.get("result") or {}
    error = message.get("error") or {}
    raise ProtocolError(
        str(error.get("code", INTERNAL)),
        str(error.get("message", "unknown error")),
        message.get("id"),
    )


def json_values(raw: bytes) -> int:
    """An upper bound on the values a JSON text holds, counted without parsing it (each `[`,
    `{`, `,` and `:` outside a string starts at most one; inside strings they only overcount):
    what parsing it costs the loop, at C speed before it is parsed."""
    return raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{")


def too_large(raw: bytes) -> str | None:
    """Why the engine will not parse this request, or None when it will."""
    if len(raw) > MAX_MESSAGE_BYTES:
        return (
            f"the request is {len(raw):,} bytes, more than the {MAX_MESSAGE_BYTES:,} a message "
            "may have"
        )
    values = json_values(raw)
    if values > MAX_REQUEST_VALUES:
        return (
            f"the request holds up to {values:,} JSON values, more than the "
            f"{MAX_REQUEST_VALUES:,} the engine parses in one message (it parses on the loop that "
            "serves every user)"
        )
    return None


def frame(body: bytes) -> bytes:
    """`body` as one frame on the socket: its length, then itself."""
    return FRAME_HEADER.pack(len(body)) + body


def encode_event(topic: str, event: dict[str, Any]) -> bytes:
    """An event's frame body: its topic, a newline, its JSON (`event`: a wire event type's
    builtins, its `v` among them)."""
    return topic.encode() + b"\n" + json_bytes(event)


def split_event(body: bytes) -> tuple[bytes, bytes]:
    """(topic, JSON body) of an event frame."""
    topic, _, payload = body.partition(b"\n")
    return topic, payload


def decode_event(body: bytes) -> tuple[str, dict[str, Any]]:
    topic, payload = split_event(body)
    return topic.decode(), json.loads(payload)
