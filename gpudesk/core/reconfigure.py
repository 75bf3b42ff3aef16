"""A request to change station settings, weighed key by key: what changes (old -> new) and what
is not applied, and why.

Station settings are the station's: a profile's `[station]` table names only the keys it cares
about, and only those are weighed (a key it leaves out keeps the station's value; a key given as
null goes back to its default). A key the station already has changes nothing and is not
mentioned. `GPUDESK_BACKEND` in the engine's environment wins over a requested backend, and a
caller who is no admin changes nothing: each differing key is reported as not applied, so the
one who asked can see what the station runs instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gpudesk.core.station import (
    NO_LIMIT_WHEN_UNSET,
    STATION_KEYS,
    StationConfig,
    mig_layout_problem,
)
from gpudesk.core.wire import station as wire


class SettingChange(msgspec.Struct, frozen=True):
    """One station setting the request changed."""

    key: str
    old: Any
    new: Any
    note: str | None = None  # what the change does to the queue, where it does something

    @property
    def message(self) -> str:
        """ "policy auto → fifo" """
        old, new = setting_text(self.old, self.key), setting_text(self.new, self.key)
        text = f"{self.key} {old} → {new}"
        return f"{text} ({self.note})" if self.note else text

    def view(self) -> wire.SettingChange:
        return wire.SettingChange(key=self.key, old=self.old, new=self.new, message=self.message)


class SettingNotApplied(msgspec.Struct, frozen=True):
    """One station setting the request asked for and did not get."""

    key: str
    value: Any  # what was asked
    current: Any  # what the station keeps
    reason: str

    @property
    def message(self) -> str:
        """ "not applied: policy fifo (the station runs auto; only an admin ... )" """
        return f"not applied: {self.key} {setting_text(self.value, self.key)} ({self.reason})"

    def view(self) -> wire.SettingNotApplied:
        return wire.SettingNotApplied(
            key=self.key,
            value=self.value,
            current=self.current,
            reason=self.reason,
            message=self.message,
        )


class Reconfiguration(msgspec.Struct, frozen=True):
    """The config the station runs after the request, and what the request did to it."""

    config: StationConfig
    changes: tuple[SettingChange, ...]
    not_applied: tuple[SettingNotApplied, ...]


def settings_reply(
    config: StationConfig,
    changes: Sequence[SettingChange],
    not_applied: Sequence[SettingNotApplied],
    *,
    changed: bool,
) -> wire.ConfigureResult:
    """`configure`'s and `check_configure`'s reply: the config in force and what the table
    changed (or would), and what it did not apply."""
    return wire.ConfigureResult(
        station=wire.StationConfigView(**config.view()),
        changed=changed,
        changes=[change.view() for change in changes],
        not_applied=[item.view() for item in not_applied],
    )


def weigh(
    current: StationConfig,
    table: Any,
    *,
    refusal: str | None,
    queued_gpu_jobs: int = 0,
    running_by_gpu: Mapping[int, Sequence[int]] | None = None,
    env: Mapping[str, str] | None = None,
) -> Reconfiguration:
    """Weigh a `[station]` table (untrusted: raises ValueError naming a bad key) against the
    config in force. `refusal` says why the caller may change nothing ("only an admin
    (gpudesk-admin) changes station settings"), None when they may. `queued_gpu_jobs` is how
    many queued jobs ask for GPUs: a new backend decides whether they ever run;
    `running_by_gpu` the jobs running on each GPU: a GPU's MIG layout changes only while it is
    idle, as the driver allows (`mig_not_applied`)."""
    requested = StationConfig.from_dict(table if table is not None else {})
    given = [key for key in STATION_KEYS if key in table] if table else []
    asked = {name: value for key in given for name, value in requested.fields_of(key).items()}
    wanted = msgspec.structs.replace(current, **asked)
    env = os.environ if env is None else env
    overridden = wanted.with_env_override(env)
    not_applied: list[SettingNotApplied] = []
    if "backend" in given and overridden.backend != wanted.backend:
        not_applied.append(
            SettingNotApplied(
                "backend",
                wanted.backend,
                overridden.backend,
                f"GPUDESK_BACKEND={env.get('GPUDESK_BACKEND')} in the engine's environment wins",
            )
        )
    wanted = overridden
    changes: list[SettingChange] = []
    kept: dict[str, Any] = {}
    for key in STATION_KEYS:
        old, new = current.setting(key), wanted.setting(key)
        if old == new:
            continue
        if refusal is not None:
            reason = f"the station runs {setting_text(old, key)}; {refusal}"
            not_applied.append(SettingNotApplied(key, new, old, reason))
            kept.update(current.fields_of(key))
            continue
        if key == "mig":
            why = mig_not_applied(current.mig, wanted.mig, wanted.backend, running_by_gpu or {})
            if why is not None:
                not_applied.append(SettingNotApplied(key, new, old, why))
                kept.update(current.fields_of(key))
                continue
        note = None
        if key == "grid_intensity" and wanted.grid_source is not None:
            note = f"{wanted.grid_intensity:g} g CO2e/kWh, {wanted.grid_source}"
        if key == "backend" and queued_gpu_jobs:
            note = (
                f"{queued_gpu_jobs} queued job(s) ask for GPUs: they run on the new backend's "
                "GPUs, and fail if it has none or too few"
            )
        changes.append(SettingChange(key, old, new, note))
    return Reconfiguration(
        msgspec.structs.replace(wanted, **kept), tuple(changes), tuple(not_applied)
    )


def mig_not_applied(
    old: Mapping[str, str] | None,
    new: Mapping[str, str] | None,
    backend: str,
    running_by_gpu: Mapping[int, Sequence[int]],
) -> str | None:
    """Why a simulated station's MIG layout does not change from `old` to `new`: a layout its
    GPUs cannot take (core.station.mig_layout_problem), or a GPU whose layout would change
    while jobs run on it (nvidia-smi refuses to change a busy GPU's MIG instances, and a job on
    a whole GPU would find it sliced under it); None when it may."""
    problem = mig_layout_problem(backend, new)
    if problem is not None:
        return problem
    old, new = old or {}, new or {}
    for key in sorted(set(old) | set(new), key=int):
        busy = running_by_gpu.get(int(key), ())
        if old.get(key) != new.get(key) and busy:
            jobs = ", ".join(str(job) for job in busy)
            return (
                f"GPU {key} runs job(s) {jobs}: its MIG layout changes only once it is idle, "
                "as the driver allows"
            )
    return None


def setting_text(value: Any, key: str = "") -> str:
    """A setting's value as a person reads it: `auto`, `true`, `2`, `3=3g.20gb,2g.10gb`; unset,
    `none` for `key` whose unset value is no limit (NO_LIMIT_WHEN_UNSET), else `default`."""
    if value is None:
        return "none" if key in NO_LIMIT_WHEN_UNSET else "default"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}={v}" for k, v in sorted(value.items())) or "none"
    return str(value)
