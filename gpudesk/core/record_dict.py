"""A record's fields as a fresh dict: what `dataclasses.asdict` gave before the records became
msgspec Structs, whose own `msgspec.structs.asdict` neither recurses nor copies."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import msgspec


def record_dict(record: msgspec.Struct) -> dict[str, Any]:
    """Every field by name, nested records as dicts, containers rebuilt and other values deep
    copied, so a caller may change the dict without touching the (often frozen) record."""
    return {name: _plain(value) for name, value in msgspec.structs.asdict(record).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return record_dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)  # a record not (yet) a Struct, as asdict gave it
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return type(value)((_plain(key), _plain(item)) for key, item in value.items())
    return copy.deepcopy(value)
