"""The base of every wire type, and the names both sides share.

The wire's types are `msgspec.Struct`s (frozen, keyword-only, unknown fields forbidden), chosen
over dataclasses and pydantic on measured decode cost (bench/api_decode.py, docs/benchmarks.md).
The engine builds its replies as them and msgspec encodes them; `gpudesk.api` decodes each reply
strictly into its type where it arrives: a field the type does not know, a field it needs that
is missing, or a value of the wrong type is a `DecodeError` naming the path. `to_builtins(model)`
gives back the wire's JSON shape, for `--json` output.

Nullable is not optional: a field the engine sends as `null` is `T | None` with no default, so a
reply that leaves it out fails to decode.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# `suspended`: a running job whose processes are stopped (gpudesk.core.jobs.JobState.SUSPENDED)
JobStateName = Literal["queued", "running", "succeeded", "failed", "cancelled", "suspended"]
PlacementMode = Literal["cpu", "exclusive", "naive", "mps", "mig"]


class WireModel(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """The base of every model: immutable, fields by name, nothing unknown accepted.
    (Subclasses repeat `frozen=True` only for type checkers; msgspec inherits it.) A field with
    a default is one the engine sends only where it applies; `to_builtins` leaves it out again
    when it holds its default (None), so `--json` prints what the engine sent."""


def to_builtins(value: Any) -> Any:
    """A model (or a list of them) as the plain JSON data the engine sent."""
    return msgspec.to_builtins(value)
