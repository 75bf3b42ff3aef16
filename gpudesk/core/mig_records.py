"""What nvidia-smi tells about MIG, as records: GPUs and their MIG devices, GPU instance profiles
and where they may sit, the instances a GPU has, and a usable MIG device after apply."""

from __future__ import annotations

from typing import Any

import msgspec

from gpudesk.core.mig_profiles import SliceSpan, compute_slices, short_name
from gpudesk.core.record_dict import record_dict


# ---------------------------------------------------------------------------------- records
class MigEntry(msgspec.Struct, frozen=True):
    """A MIG device as `nvidia-smi -L` lists it under its GPU."""

    gpu: int
    name: str  # profile, e.g. "3g.20gb" or "1c.3g.20gb"
    device: int  # the MIG device index on this GPU
    uuid: str  # "MIG-..."


class GpuEntry(msgspec.Struct, frozen=True):
    index: int
    name: str
    uuid: str
    mig_devices: tuple[MigEntry, ...] = ()


class GiProfile(msgspec.Struct, frozen=True):
    """One row of `nvidia-smi mig -lgip`."""

    gpu: int
    name: str  # "MIG 1g.5gb"
    short_name: str  # "1g.5gb"
    id: int
    free: int
    total: int
    memory_gib: float
    sm: int | None = None
    ce: int | None = None
    dec: int | None = None
    enc: int | None = None
    jpeg: int | None = None
    ofa: int | None = None
    p2p: bool | None = None

    @property
    def compute_slices(self) -> int:
        return compute_slices(self.short_name)


class ProfilePlacements(msgspec.Struct, frozen=True):
    """One line of `nvidia-smi mig -lgipp`: where instances of a profile can sit."""

    gpu: int
    profile_id: int
    placements: tuple[SliceSpan, ...]


class GpuInstance(msgspec.Struct, frozen=True):
    """One row of `nvidia-smi mig -lgi`."""

    gpu: int
    name: str  # "MIG 3g.20gb"
    profile_id: int
    instance_id: int
    placement: SliceSpan

    @property
    def short_name(self) -> str:
        return short_name(self.name)


class ComputeInstance(msgspec.Struct, frozen=True):
    """One row of `nvidia-smi mig -lci`."""

    gpu: int
    gpu_instance_id: int
    name: str  # "MIG 3g.20gb", or "MIG 1c.3g.20gb" for part of a GPU instance
    profile_id: int
    instance_id: int
    placement: SliceSpan | None = None

    @property
    def short_name(self) -> str:
        return short_name(self.name)


class PlannedInstance(msgspec.Struct, frozen=True):
    """A GPU instance to create, in creation order. `placement` is one spot that makes the whole
    set fit; the driver picks the actual spot itself."""

    profile: GiProfile
    placement: SliceSpan


class MigSlot(msgspec.Struct, frozen=True):
    """A usable MIG device after apply: its UUID (for CUDA_VISIBLE_DEVICES) and where it sits.
    The instance IDs and placement are None when they could not be matched for certain."""

    gpu: int
    device: int
    profile: str
    uuid: str
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    placement: SliceSpan | None = None

    def to_dict(self) -> dict[str, Any]:
        data = record_dict(self)
        data["placement"] = None if self.placement is None else str(self.placement)
        return data


class MigLayout(msgspec.Struct, frozen=True):
    """What a GPU is partitioned into now."""

    gpu_instances: tuple[GpuInstance, ...]
    compute_instances: tuple[ComputeInstance, ...]
    slots: tuple[MigSlot, ...]


class MigMode(msgspec.Struct, frozen=True):
    """MIG mode of a GPU from `--query-gpu=mig.mode.current,mig.mode.pending`."""

    current: str  # "enabled", "disabled", or "n/a" (the GPU cannot do MIG)
    pending: str

    @property
    def state(self) -> str:
        """ "enabled", "pending" (enabled, waiting for a GPU reset), "disabled", "unsupported"."""
        if self.current == "enabled":
            return "enabled"
        if self.pending == "enabled":
            return "pending"
        if self.current == "n/a":
            return "unsupported"
        return "disabled"
