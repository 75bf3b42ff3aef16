"""Placement: which queued jobs start now, and where.

The engine calls a policy every time something changes (a submission, a job ending, a cancel,
a reconfiguration) with the queue in priority order and a view of the station. The policy returns
placements for jobs to start and rejections for jobs that can never run on this station. It must
be pure: the same queue and station give the same decision, so the simulator can reuse it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpudesk.engine.station import StationConfig
from gpudesk.engine.store import JobRecord


@dataclass(frozen=True)
class Placement:
    job_id: int
    slot: str
    mode: str  # "cpu" on a CPU-only station; sharing modes arrive with GPU placement
    reason: str
    gpus: tuple[int, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # set as given (device visibility)
    env_defaults: Mapping[str, str] = field(default_factory=dict)  # unless the job sets them

    def to_dict(self) -> dict[str, Any]:
        return {"slot": self.slot, "mode": self.mode, "reason": self.reason,
                "gpus": list(self.gpus), "env": dict(self.env),
                "env_defaults": dict(self.env_defaults)}


@dataclass(frozen=True)
class Rejection:
    job_id: int
    reason: str


@dataclass(frozen=True)
class Decision:
    placements: list[Placement] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)


@dataclass(frozen=True)
class StationView:
    """What a policy may know about the station right now."""

    config: StationConfig
    cores: int
    busy_slots: frozenset[str] = frozenset()
    gpu_count: int = 0

    @property
    def slots(self) -> list[str]:
        return [f"cpu:{i}" for i in range(self.config.effective_slots)]

    @property
    def free_slots(self) -> list[str]:
        return [s for s in self.slots if s not in self.busy_slots]

    @property
    def threads_per_slot(self) -> int:
        return max(1, self.cores // self.config.effective_slots)


class PlacementPolicy(Protocol):
    name: str

    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision: ...

    def explain_wait(self, job: JobRecord, queue: Sequence[JobRecord],
                     station: StationView) -> str: ...


class FifoPolicy:
    """First come, first served over the station's job slots (higher priority first)."""

    name = "fifo"

    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision:
        free = station.free_slots
        placements: list[Placement] = []
        rejections: list[Rejection] = []
        for job in queue:
            if job.spec.gpus > station.gpu_count:
                rejections.append(Rejection(job.id, _no_gpus(job, station)))
                continue
            if not free:
                continue  # keep scanning only to reject impossible jobs early
            slot = free.pop(0)
            placements.append(Placement(
                job_id=job.id,
                slot=slot,
                mode="cpu",
                reason=f"first come, first served: {slot} was free",
                env={"CUDA_VISIBLE_DEVICES": ""},
                # Without this each torch job starts one thread per core and they fight.
                env_defaults={"OMP_NUM_THREADS": str(station.threads_per_slot)},
            ))
        return Decision(placements, rejections)

    def explain_wait(self, job: JobRecord, queue: Sequence[JobRecord],
                     station: StationView) -> str:
        ahead = sum(1 for other in queue if other.id != job.id and _before(other, job))
        total = len(station.slots)
        busy = total - len(station.free_slots)
        text = f"waiting for a free slot ({busy}/{total} busy"
        return text + (f", {ahead} queued ahead of it)" if ahead else ")")


def _before(a: JobRecord, b: JobRecord) -> bool:
    return (-a.spec.priority, a.id) < (-b.spec.priority, b.id)


def _no_gpus(job: JobRecord, station: StationView) -> str:
    wanted = f"{job.spec.gpus} GPU{'s' if job.spec.gpus != 1 else ''}"
    if station.gpu_count == 0:
        return (f"the job asks for {wanted} but this station has none "
                f"(backend {station.config.effective_backend}); submit it with gpus = 0 "
                "to run on the CPU")
    return f"the job asks for {wanted} but this station has only {station.gpu_count}"


POLICIES: dict[str, type] = {"fifo": FifoPolicy}


def make_policy(name: str) -> PlacementPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
