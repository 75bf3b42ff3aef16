"""Malformed and oversized requests: every bad field is an `invalid_args` error naming it, never
`internal`; a request over the message limit is refused by the client before it is sent, and
one the engine drops anyway is reported at once instead of after the 30 s time-out."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import msgspec
import pytest
from conftest import EngineHandle, module_engine

from gpudesk.api.client import Client, decode_event
from gpudesk.api.errors import TOO_LARGE, EngineError
from gpudesk.api.models import JobEvent
from gpudesk.core import protocol
from gpudesk.core.jobs import JobSpec
from gpudesk.core.station import STATION_KEYS

# Values a hostile or buggy client sends where something else is expected.
HUGE = 2**70
BAD_VALUES: list[object] = [
    HUGE,
    -HUGE,
    10**30,
    "\u00b2",  # a digit to str.isdigit, not to int()
    "\ud800",  # a lone surrogate: no byte stands for it
    "\udce9",  # the byte 0xE9 of a file name that is not UTF-8: never a job's name
    True,
    -1,
    1.5,
    1e308,
    {},
    [],
    "x",
    None,
    [HUGE],
    ["\ud800"],
    ["\udce9"],
    [True],
    [{"a": 1}],
]

# op -> the arguments a valid request needs besides the one under test
OPS: dict[str, tuple[dict[str, object], list[str]]] = {
    "status": ({}, ["fresh_loaders"]),
    "jobs": ({}, ["states", "group", "name", "ids", "limit", "usage"]),
    "show": ({"job": 1}, ["job", "env"]),
    "cancel": ({"jobs": [1]}, ["jobs", "grace"]),
    "hold": ({"jobs": [1]}, ["jobs"]),
    "release": ({"jobs": [1]}, ["jobs"]),
    "priority": ({"jobs": [1], "priority": 0}, ["jobs", "priority", "delta"]),
    "requeue": ({"jobs": [1]}, ["jobs"]),
    "configure": ({}, ["station"]),
    "datasets": ({}, ["datasets"]),
    "telemetry": ({}, ["history"]),
    "mig_plan": ({}, ["gpu"]),
    "mig_apply": ({"gpu": 0, "profiles": ["1g.5gb"]}, ["gpu", "profiles", "confirm"]),
    "model_observe": ({"gpu_model": "A100"}, ["gpu_model", "observations", "source"]),
    "model_reset": ({}, ["gpu_model", "confirm"]),
    "submit": ({"jobs": [{"name": "ok", "command": ["true"]}]}, ["jobs", "env"]),
}
# every field a job or the station takes, from where they are defined: a new one is fuzzed too
JOB_FIELDS = [f.name for f in msgspec.structs.fields(JobSpec)]
STATION_FIELDS = list(STATION_KEYS)


class RawClient:
    """A connection that sends any bytes, as a client of another language might."""

    def __init__(self, engine: EngineHandle) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10.0)
        self.sock.connect(str(engine.home.control_socket))

    def exchange(self, raw: bytes) -> bytes:
        self.sock.sendall(protocol.frame(raw))
        (length,) = protocol.FRAME_HEADER.unpack(self._exactly(protocol.FRAME_HEADER.size))
        return self._exactly(length)

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "the engine closed the connection"
            data += chunk
        return data

    def send(self, message: object) -> dict:
        # Python's json writes a lone surrogate as a \\ud800 escape, as another client might.
        return json.loads(self.exchange(json.dumps(message).encode()))

    def close(self) -> None:
        self.sock.close()


def with_target(engine: EngineHandle) -> EngineHandle:
    """`engine` with job 1 in it, ended."""
    (job_id,) = engine.submit({"name": "target", "command": ["true"]})
    assert job_id == 1
    engine.wait_state(job_id, "succeeded")
    return engine


@pytest.fixture
def raw(engine: EngineHandle) -> Iterator[RawClient]:
    """A connection of its own to an engine of the test's own, job 1 in it: for tests that
    change what the engine holds."""
    client = RawClient(with_target(engine))
    yield client
    client.close()


# The tests on `reader_engine` run one after another on one worker (--dist loadgroup): spread
# over the workers, each would make the module's engine again.
READER = pytest.mark.xdist_group("test_requests_abuse_reader")


@pytest.fixture(scope="module")
def reader_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    """One engine, job 1 in it, for the tests that only send it requests it refuses: none of
    them changes what it holds, so each need not start one of its own."""
    with module_engine(tmp_path_factory, "abuse") as handle:
        yield with_target(handle)


@pytest.fixture
def reader(reader_engine: EngineHandle) -> Iterator[RawClient]:
    """A connection of the test's own to the shared `reader_engine`."""
    client = RawClient(reader_engine)
    yield client
    client.close()


def request(op: str, args: dict) -> dict:
    return {"v": 1, "id": 7, "op": op, "args": args}


def problem(reply: dict, what: str, field: str, baseline: dict | None = None) -> list[str]:
    """What is wrong with the reply to a malformed request: an internal error, or an
    invalid_args error that does not name the field (unless it is the error the request gets
    with a good value: the value was taken, and another argument is wrong)."""
    if reply["ok"] or (baseline is not None and reply["error"] == baseline.get("error")):
        return []  # a value the op may take (true for "usage", [] for "datasets", ...)
    error = reply["error"]
    if error["code"] == "internal":
        return [f"{what}: internal: {error['message']}"]
    if error["code"] == "invalid_args" and field.lower() not in error["message"].lower():
        return [f"{what}: {error['message']!r} does not name {field}"]
    return []


def test_every_malformed_argument_is_a_clear_error_naming_it(
    engine: EngineHandle, raw: RawClient
) -> None:
    problems: list[str] = []
    for op, (base, keys) in OPS.items():
        for key in keys:
            good = raw.send(request(op, base))
            for value in BAD_VALUES:
                reply = raw.send(request(op, {**base, key: value}))
                problems += problem(reply, f"{op} {key}={value!r:.40}", key, good)
    for key in JOB_FIELDS:
        for value in BAD_VALUES:
            job = {"name": "x", "command": ["true"], key: value}
            reply = raw.send(request("submit", {"jobs": [job]}))
            problems += problem(reply, f"submit {key}={value!r:.40}", key)
    for key in STATION_FIELDS:
        for value in BAD_VALUES:
            reply = raw.send(request("configure", {"station": {key: value}}))
            problems += problem(reply, f"configure {key}={value!r:.40}", key)
    assert problems == [], "\n".join(problems)
    assert raw.send(request("ping", {}))["ok"]
    assert "Traceback" not in engine.home.engine_log.read_text()


@pytest.mark.parametrize(
    "args, field",
    [
        ({"job": HUGE}, "'job': a job id is at most"),
        ({"job": "9" * 5000}, "'job': a job id is at most"),
        ({"job": "\udce9"}, "'job': a job name is UTF-8 text; '\\xe9' holds bytes that are not"),
        ({"job": "\ud800"}, "invalid request: args.job holds a lone surrogate"),
    ],
)
@READER
def test_job_references_out_of_range_or_not_text(reader: RawClient, args: dict, field: str) -> None:
    reply = reader.send(request("show", args))
    assert reply["error"]["code"] == "invalid_args"
    assert reply["error"]["message"].startswith(field)


@READER
def test_a_superscript_digit_is_a_name_not_an_id(reader: RawClient) -> None:
    reply = reader.send(request("show", {"job": "\u00b2"}))
    assert reply["error"] == {"code": "unknown_job", "message": "no job with id or name '²'"}


@pytest.mark.parametrize("version", [True, 1.0, "1", [1], HUGE])
@READER
def test_only_the_integer_1_is_protocol_version_1(reader: RawClient, version: object) -> None:
    reply = reader.send({"v": version, "id": 1, "op": "ping"})
    assert reply["error"]["code"] == "unsupported_version"


def test_replies_and_events_are_strict_json_whatever_the_request_held(
    engine: EngineHandle, raw: RawClient
) -> None:
    """The engine echoes what it was sent (an id, an op, a file name): never a lone surrogate
    in a reply or an event, which a strict reader (msgspec, a browser) refuses."""
    with engine.client.subscribe("job") as events:
        time.sleep(0.2)  # let the subscription reach the engine
        for message in (
            {"v": 1, "id": "\udce9", "op": "ping"},
            {"v": 1, "id": 1, "op": "no-such-op\udce9"},
            request("submit", {"jobs": [{"name": "x", "command": ["/no/such/\udce9"]}]}),
        ):
            # strict: refuses a lone surrogate
            reply = msgspec.json.decode(raw.exchange(json.dumps(message).encode()))
            assert reply["v"] == 1
        messages = []
        while not any(m.startswith("command not found") for m in messages):
            assert events.poll(10_000), f"no 'failed' event; got {messages}"
            event = decode_event(*events.recv_event())
            assert isinstance(event, JobEvent)
            messages.append(event.message)
    assert "command not found: /no/such/\\xe9" in messages


# --------------------------------------------------------------------- size limits
def sweep(jobs: int, env_bytes: int) -> list[JobSpec]:
    """A sweep whose [defaults] give every job the same large env."""
    env = {"BIG": "x" * env_bytes}
    return [JobSpec(name=f"sweep-{i}", command=("true",), env=env) for i in range(jobs)]


def test_a_request_over_the_limit_is_refused_at_once_and_not_sent(engine: EngineHandle) -> None:
    client = Client.attach(engine.home, timeout=10.0)
    # "at once": the client's own work (encoding ~95 MiB), counted in this thread's CPU time,
    # not on the wall clock, which a loaded machine stretched past 5 s in a whole run
    started = time.thread_time()
    try:
        with pytest.raises(EngineError) as info:
            client.submit(sweep(1000, 100_000))
    finally:
        client.close()
    assert time.thread_time() - started < 5.0
    assert info.value.code == TOO_LARGE
    message = str(info.value)
    assert "this 'submit' request is 95." in message and "MiB" in message
    assert "more than the 8 MiB the engine takes in one message, so it was not sent" in message
    assert engine.client.request("jobs")["jobs"] == []


def test_an_oversized_message_the_engine_refuses_is_reported_with_its_reason(
    engine: EngineHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client whose limit is larger than the engine's (another version, another language):
    the engine says the message is too large before it closes the connection, and the client
    says that, not a guess, at once (issue 36: it used to blame the size for every close)."""
    monkeypatch.setattr(protocol, "MAX_MESSAGE_BYTES", 4 * protocol.MAX_MESSAGE_BYTES)
    client = Client.attach(engine.home, timeout=20.0)
    started = time.monotonic()
    try:
        with pytest.raises(EngineError) as info:
            client.submit(sweep(100, 100_000))  # 9.6 MiB
        assert time.monotonic() - started < 8.0
        assert info.value.code == TOO_LARGE
        assert "the engine takes messages of at most 8,388,608 bytes" in str(info.value)
        # the engine is fine, and the same client can go on
        assert client.ping().pid == engine.pid
    finally:
        client.close()
    assert engine.client.request("jobs")["jobs"] == []
