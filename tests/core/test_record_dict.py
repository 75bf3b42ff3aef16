"""`record_dict` gives for a msgspec Struct what `dataclasses.asdict` gave for the same record as
a dataclass (the records were dataclasses until session 59): nested records as dicts, tuples kept
tuples, containers and values copied so that changing the dict leaves the record as it was."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from gpudesk.core.record_dict import record_dict
from gpudesk.core.station import StationConfig


class Inner(msgspec.Struct, frozen=True):
    name: str
    sizes: list[int]


class Outer(msgspec.Struct, frozen=True):
    inner: Inner
    pairs: tuple[Inner, ...]
    table: dict[str, Any]
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class InnerDc:
    name: str
    sizes: list[int]


@dataclasses.dataclass(frozen=True)
class OuterDc:
    inner: InnerDc
    pairs: tuple[InnerDc, ...]
    table: dict[str, Any]
    note: str | None = None


def test_it_is_what_asdict_gave_for_the_dataclass() -> None:
    table = {"a": [1, 2], "b": {"c": (3, 4)}}
    got = record_dict(Outer(Inner("x", [1]), (Inner("y", [2]), Inner("z", [])), table))
    wanted = dataclasses.asdict(
        OuterDc(InnerDc("x", [1]), (InnerDc("y", [2]), InnerDc("z", [])), table)
    )
    assert got == wanted
    assert list(got) == list(wanted)  # the same keys in the same order
    assert type(got["pairs"]) is tuple and type(got["table"]["b"]["c"]) is tuple


def test_changing_the_dict_leaves_the_record() -> None:
    record = Outer(Inner("x", [1]), (), {"a": [1, 2]})
    got = record_dict(record)
    got["inner"]["sizes"].append(9)
    got["table"]["a"].append(3)
    assert record.inner.sizes == [1] and record.table == {"a": [1, 2]}


def test_a_station_config_keeps_its_mig_layout_apart() -> None:
    config = StationConfig(mig={"0": "3g.20gb,3g.20gb"})
    table = config.to_dict()
    table["mig"]["0"] = "7g.40gb"
    assert config.mig == {"0": "3g.20gb,3g.20gb"}
