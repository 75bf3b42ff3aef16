"""The station: which backend describes the hardware, which policy places jobs, and the slots
a CPU-only station offers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpudesk.engine.jobs import describe

# Backends this version can drive. `auto` means NVML when a driver answers, else `none`; NVML and
# the simulated stations arrive with the telemetry work, until then `auto` resolves to `none`.
BACKENDS: tuple[str, ...] = ("auto", "none")
POLICIES: tuple[str, ...] = ("fifo",)
MAX_SLOTS = 4096
STATION_KEYS = ("backend", "policy", "slots")


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_backend(value: Any) -> str:
    if value not in BACKENDS:
        raise ValueError(f"expected one of {', '.join(BACKENDS)}, found {describe(value)}")
    return value


def check_policy(value: Any) -> str:
    if value not in POLICIES:
        raise ValueError(f"expected one of {', '.join(POLICIES)}, found {describe(value)}")
    return value


def check_slots(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLOTS:
        raise ValueError(f"expected a whole number from 1 to {MAX_SLOTS}, found {describe(value)}")
    return value


STATION_CHECKS = {"backend": check_backend, "policy": check_policy, "slots": check_slots}


@dataclass(frozen=True)
class StationConfig:
    backend: str = "auto"
    policy: str = "fifo"
    slots: int | None = None  # concurrent jobs on a CPU-only station; None = number of cores

    @property
    def effective_slots(self) -> int:
        return self.slots if self.slots is not None else host_cores()

    @property
    def effective_backend(self) -> str:
        return "none" if self.backend == "auto" else self.backend

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StationConfig:
        """Validate untrusted input; raises ValueError naming the key."""
        if not isinstance(data, Mapping):
            raise ValueError(f"station: expected a table, found {describe(data)}")
        unknown = sorted(set(data) - set(STATION_KEYS))
        if unknown:
            raise ValueError(f"station.{unknown[0]}: unknown key")
        values: dict[str, Any] = {}
        for key, check in STATION_CHECKS.items():
            if key in data and data[key] is not None:
                try:
                    values[key] = check(data[key])
                except ValueError as exc:
                    raise ValueError(f"station.{key}: {exc}") from None
        return cls(**values)

    def with_env_override(self, env: Mapping[str, str] | None = None) -> StationConfig:
        """`GPUDESK_BACKEND`, when set, wins over what a profile or the store says."""
        env = os.environ if env is None else env
        backend = env.get("GPUDESK_BACKEND")
        if not backend:
            return self
        try:
            checked = check_backend(backend)
        except ValueError as exc:
            raise ValueError(f"GPUDESK_BACKEND: {exc}") from None
        return StationConfig(backend=checked, policy=self.policy, slots=self.slots)
