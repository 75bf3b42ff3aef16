"""The engine writes a reply straight from its wire struct with msgspec (protocol.encode_result):
the same JSON data the stdlib path wrote, decoded strictly by the client's models, and a reply
holding a lone surrogate (a job's argv that is not UTF-8) still written, the surrogate spelled
out as gpudesk.text.safe_text does."""

from __future__ import annotations

import json

import msgspec

from gpudesk.api import models
from gpudesk.core import protocol
from gpudesk.core.wire.base import to_builtins
from gpudesk.text import json_bytes, safe_text


def submitted(why: str) -> models.SubmitResult:
    return models.SubmitResult(ids=[3, 4], simulated="sim:h100", waits_for_change={4: why})


def test_a_wire_struct_is_written_as_its_builtins_were() -> None:
    reply = submitted("GPU 1 is in MIG mode")
    raw = protocol.encode_result(9, reply)
    stdlib = {"v": protocol.PROTOCOL_VERSION, "id": 9, "ok": True}
    assert json.loads(raw) == json.loads(json_bytes(stdlib | {"result": to_builtins(reply)}))
    request_id, result = protocol.decode_reply(raw)
    assert request_id == 9
    assert msgspec.json.decode(json.dumps(result), type=models.SubmitResult) == reply


def test_a_lone_surrogate_is_spelled_out_not_refused() -> None:
    text = "waits for caf\udce9"  # b"caf\xe9" as Python holds bytes that are not UTF-8
    raw = protocol.encode_result(4, submitted(text))
    raw.decode("utf-8")  # strict UTF-8: what a client's strict decoder reads
    _, result = protocol.decode_reply(raw)
    assert result["waits_for_change"] == {"4": safe_text(text)} and safe_text(text) != text


def test_an_event_holding_nan_is_json_a_strict_reader_takes() -> None:
    """Events are written by `json_bytes`: a NaN there was `NaN`, which is no JSON, and the
    client's strict decoder refused the whole event ("does not match this gpudesk's models").
    It is null now, as msgspec writes a reply's."""
    gpu = {"index": 0, "power_w": float("nan"), "energy_j": float("inf"), "name": "caf\udce9"}
    raw = protocol.encode_event("telemetry", {"v": protocol.PROTOCOL_VERSION, "gpus": [gpu]})
    topic, payload = protocol.split_event(raw)
    assert topic == b"telemetry"
    decoded = msgspec.json.decode(payload)
    assert decoded["gpus"] == [
        {"index": 0, "power_w": None, "energy_j": None, "name": safe_text("caf\udce9")}
    ]
    # the same figure in a reply, written by msgspec
    assert json.loads(protocol.encode_result(1, {"power_w": float("nan")}))["result"] == {
        "power_w": None
    }
