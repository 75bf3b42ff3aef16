"""A shared loader's dataset, as a profile's `[datasets.NAME]` table names it and the engine
registers it: the factory and its arguments, batch size, workers, seed, slots, and the
data-selection preset its jobs train on. The engine's supervisor (gpudesk.engine.services.loaders)
starts one producer per dataset from `argv()`."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from gpudesk.core.jobs import check_selection
from gpudesk.core.local_selection import ENV_SELECTION
from gpudesk.core.record_dict import record_dict
from gpudesk.spawn import module_argv

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")  # a loader's (a dataset's) name
VARIANT_SEPARATOR = "."  # the engine's loader for dataset NAME under another selection: NAME.P

LOADER_KEYS = (
    "args",
    "batch_size",
    "workers",
    "seed",
    "slots",
    "shuffle",
    "selection",
    "selection_target",
    "selection_target_args",
    "device",
    "share",
    "owner",
)
DEVICES = ("cpu", "cuda", "auto")  # where batches are staged for their consumers
# Who may read a system engine's loader (docs/loader.md, "On a shared station"): its owner's
# jobs only, or every job of the station's group. Sharing a loader shares the data.
SHARES = ("private", "group")
# A declared owner: a POSIX user name (useradd's default NAME_REGEX, with upper case and '.').
USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")


class DatasetSpec(msgspec.Struct, frozen=True):
    name: str
    factory: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    batch_size: int = 64
    workers: int = 2
    seed: int = 0
    slots: int = 16
    shuffle: bool = True
    selection: str | None = None  # a data-selection preset: the jobs train on that part
    selection_target: str | None = None  # MODULE:FACTORY of a targeted preset's target set
    selection_target_args: dict[str, Any] = msgspec.field(default_factory=dict)
    device: str = "cpu"  # "cuda": one copy to the GPU for every job there (loader/staging.py)
    share: str = "private"  # "group": other members' jobs may read it (a system engine)
    owner: str | None = None  # whom its producer runs as (a system engine); None: first job's

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)

    @classmethod
    def from_dict(cls, data: Any) -> DatasetSpec:
        """Validate untrusted input (a request); raises ValueError naming the key."""
        if not isinstance(data, dict):
            raise ValueError("expected a table")
        unknown = sorted(set(data) - {"name", "factory", *LOADER_KEYS})
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown key")
        name = data.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise ValueError(
                f"name: {name!r} is not a loader name (1 to 40 letters, digits, '_', '.' or '-')"
            )
        factory = data.get("factory")
        if not isinstance(factory, str) or ":" not in factory:
            raise ValueError("factory: expected MODULE:CALLABLE")
        args = data.get("args") or {}
        if not isinstance(args, dict):
            raise ValueError("args: expected a table")
        try:
            json.dumps(args)
        except (TypeError, ValueError):
            raise ValueError(
                "args: values must be plain numbers, strings, lists or tables"
            ) from None
        ints = {}
        for key, low, high, default in (
            ("batch_size", 1, 1 << 20, 64),
            ("workers", 0, 256, 2),
            ("seed", -(2**63), 2**63 - 1, 0),
            ("slots", 4, 4096, 16),
        ):
            value = data.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(
                    f"{key}: expected a whole number from {low} to {high}, found {value!r}"
                )
            ints[key] = value
        shuffle = data.get("shuffle", True)
        if not isinstance(shuffle, bool):
            raise ValueError(f"shuffle: expected true or false, found {shuffle!r}")
        try:
            selection = check_selection(data.get("selection"))
        except ValueError as exc:
            raise ValueError(f"selection: {exc}") from None
        selection = None if selection == "full" else selection
        target = data.get("selection_target")
        if target is not None and (not isinstance(target, str) or ":" not in target):
            raise ValueError("selection_target: expected MODULE:CALLABLE")
        target_args = data.get("selection_target_args") or {}
        if not isinstance(target_args, dict):
            raise ValueError("selection_target_args: expected a table")
        if selection is not None and selection.startswith("less-") and target is None:
            raise ValueError(
                f"selection: {selection} ranks samples by their similarity to a "
                'target set; name one with selection_target = "MODULE:CALLABLE"'
            )
        device = data.get("device", "cpu")
        if device not in DEVICES:
            raise ValueError(f"device: expected one of {', '.join(DEVICES)}, found {device!r}")
        share, owner = _check_sharing(data)
        return cls(
            name,
            factory,
            dict(args),
            device=device,
            share=share,
            owner=owner,
            shuffle=shuffle,
            selection=selection,
            selection_target=target,
            selection_target_args=dict(target_args),
            **ints,
        )

    def variant(self, selection: str | None) -> DatasetSpec:
        """This dataset under another selection: its own loader, `NAME.PRESET`."""
        chosen = check_selection(selection)
        chosen = None if chosen == "full" else chosen
        if chosen == self.selection:
            return self
        suffix = f"{VARIANT_SEPARATOR}{chosen or 'full'}"
        return msgspec.structs.replace(
            self, name=self.name[: 40 - len(suffix)] + suffix, selection=chosen
        )

    def argv(self) -> list[str]:
        argv = [
            *module_argv("gpudesk"),
            "loader",
            "serve",
            self.name,
            "--dataset",
            self.factory,
            "--batch-size",
            str(self.batch_size),
            "--workers",
            str(self.workers),
            "--seed",
            str(self.seed),
            "--slots",
            str(self.slots),
            "--managed",
        ]
        for key, value in self.args.items():
            argv += ["--arg", f"{key}={json.dumps(value)}"]
        if not self.shuffle:
            argv.append("--no-shuffle")
        if self.device != "cpu":
            argv += ["--device", self.device]
        if self.share != "private":
            argv += ["--share", self.share]
        if self.selection:
            argv += ["--selection", self.selection]
        if self.selection_target:
            argv += ["--target", self.selection_target]
            for key, value in self.selection_target_args.items():
                argv += ["--target-arg", f"{key}={json.dumps(value)}"]
        return argv


def _check_sharing(data: dict[str, Any]) -> tuple[str, str | None]:
    """`share` and `owner` of a dataset table; raises ValueError naming the key."""
    share = data.get("share", "private")
    if share not in SHARES:
        raise ValueError(f"share: expected one of {', '.join(SHARES)}, found {share!r}")
    owner = data.get("owner")
    if owner is not None and (not isinstance(owner, str) or not USER_NAME.match(owner)):
        raise ValueError(f"owner: expected a user name, found {owner!r}")
    if owner == "root":
        raise ValueError(
            "owner: a shared loader's producer never runs as root (it imports the dataset's "
            "code and reads its files): name the user whose data it is"
        )
    return share, owner


def selection_env(asked: str, served: DatasetSpec) -> str:
    """`ENV_SELECTION`'s value for a job whose loader asks for `asked` and trains on `served`
    (the profile's dataset under its selection)."""
    return json.dumps({"dataset": asked, "served": served.to_dict()}, separators=(",", ":"))


def selection_told(value: str, asked: str) -> DatasetSpec | None:
    """The served dataset `ENV_SELECTION`'s `value` names for a loader asking for `asked`; None
    where it is about another dataset (a job may read several). Raises ValueError, one
    sentence, where it is not what `selection_env` writes: a job must not quietly train on the
    whole dataset instead."""
    try:
        told: Any = json.loads(value)
    except ValueError:
        raise ValueError(f"{ENV_SELECTION} is not JSON") from None
    if not isinstance(told, dict) or set(told) != {"dataset", "served"}:
        raise ValueError(f"{ENV_SELECTION} is not an object of 'dataset' and 'served'")
    if told["dataset"] != asked:
        return None
    try:
        served = DatasetSpec.from_dict(told["served"])
    except ValueError as exc:
        raise ValueError(f"{ENV_SELECTION}'s served dataset: {exc}") from None
    if not served.selection:
        raise ValueError(f"{ENV_SELECTION}'s served dataset names no selection")
    return served
