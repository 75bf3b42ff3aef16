"""The GPUs as the placement policies see them, built from the latest telemetry and the attempts
that run on them: memory, SM activity over CARMA's window, tenants, MIG slices, lost GPUs and
whether their MPS servers take clients. A pure function of the readings: the engine's scheduler
hands it its telemetry monitor (gpudesk.hw.telemetry.monitor.Monitor), read here through the
`Readings` protocol, since policy/ imports no driver."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import msgspec

from gpudesk.core.mig_profiles import compute_slices, short_name
from gpudesk.core.wire.telemetry import GpuView, HistoryPoint, Snapshot
from gpudesk.policy.demand import reservation
from gpudesk.policy.policy import GpuState, MigSlice, Tenant

SM_WINDOW_SAMPLES = 30  # "recent SM activity" for placement: CARMA's 30-sample window


class PeakUsage(Protocol):
    """What telemetry measured of a running attempt's GPU memory (hw.telemetry's AttemptUsage)."""

    @property
    def gpu_memory_peak_mib(self) -> float | None: ...  # the most its processes held

    @property
    def gpu_memory_peak_at(self) -> float | None: ...  # when (monotonic) that peak last grew


class GpuFacts(Protocol):
    """The static facts placement needs about one GPU (hw.telemetry's GpuInfo)."""

    @property
    def index(self) -> int: ...

    @property
    def uuid(self) -> str | None: ...

    @property
    def name(self) -> str | None: ...

    @property
    def memory_total_mib(self) -> float | None: ...


class Readings(Protocol):
    """The telemetry monitor as placement reads it: the GPUs, the latest sample and the recent
    ones (as the wire carries them), and each running attempt's measured usage."""

    @property
    def inventory(self) -> Sequence[GpuFacts]: ...

    @property
    def latest(self) -> Snapshot | None: ...

    @property
    def history(self) -> Iterable[HistoryPoint]: ...

    @property
    def usage(self) -> Mapping[int, PeakUsage]: ...  # by attempt id


class RunningAttempt(msgspec.Struct, frozen=True):
    """A running attempt as placement sees it: where it runs and what it was assumed to need."""

    attempt_id: int
    job_id: int
    gpus: tuple[int, ...]
    mode: str  # "cpu", "exclusive", "naive", "mps" or "mig"
    mig_slice: str | None  # the MIG device UUID it runs on
    memory_mib: float  # the demand its placement assumed
    sm_pct: float
    peak_known: bool = False  # its demand was a peak measured by earlier runs
    uid: int | None = None  # its job's owner (an MPS server serves one uid at a time)
    login: str | None = None  # her name, as stored with her job (Tenant.login)
    remaining_s: float | None = None  # its remaining time (None: unknown; policy/remaining.py)
    measured_remaining_s: float | None = None  # the engine's own figure (Remaining.measured_s)


def tenants_by_gpu(
    running: Iterable[RunningAttempt], usage: Mapping[int, PeakUsage], now: float
) -> dict[int, list[Tenant]]:
    """GPU index -> its tenants. Each holds what its demand reserved until its measured peak
    has settled (`demand.reservation`); `now` is time.monotonic()."""
    tenants: dict[int, list[Tenant]] = {}
    for attempt in running:
        measured = usage.get(attempt.attempt_id)
        peak = measured.gpu_memory_peak_mib if measured else None
        settled = (
            now - measured.gpu_memory_peak_at
            if measured and measured.gpu_memory_peak_at is not None
            else None
        )
        per_gpu = peak / max(1, len(attempt.gpus)) if peak is not None else None
        memory = reservation(attempt.memory_mib, per_gpu, settled, attempt.peak_known)
        for index in attempt.gpus:
            tenants.setdefault(index, []).append(
                Tenant(
                    attempt.job_id,
                    attempt.mode,
                    memory,
                    attempt.sm_pct,
                    attempt.mig_slice,
                    uid=attempt.uid,
                    login=attempt.login,
                    remaining_s=attempt.remaining_s,
                    measured_remaining_s=attempt.measured_remaining_s,
                )
            )
    return tenants


def _mig_slices(reading: GpuView | None, tenants: Iterable[Tenant]) -> tuple[MigSlice, ...]:
    held = {t.mig_slice for t in tenants if t.mig_slice}
    return tuple(
        MigSlice(
            m.uuid,
            profile,
            m.memory_total_mib or 0.0,
            compute_slices(profile),
            busy=m.uuid in held,
        )
        for m in (reading.mig_devices if reading else ())
        if m.uuid
        for profile in [short_name(m.name or "")]
    )


def gpu_states(
    monitor: Readings,
    running: Iterable[RunningAttempt],
    lost: frozenset[int],
    mps_usable: Callable[[str | None], bool],
) -> tuple[GpuState, ...]:
    """Each GPU as the collocation policies see it: the latest readings, SM activity over
    the last `SM_WINDOW_SAMPLES` samples, and the attempts placed on it."""
    latest = monitor.latest
    readings = {g.index: g for g in latest.gpus} if latest else {}
    recent = list(monitor.history)[-SM_WINDOW_SAMPLES:]
    tenants = tenants_by_gpu(running, monitor.usage, time.monotonic())
    states = []
    for info in monitor.inventory:
        reading = readings.get(info.index)
        window = [
            p.sm_activity_pct
            for point in recent
            for p in point.gpus
            if p.index == info.index and p.sm_activity_pct is not None
        ]
        on_gpu = tuple(tenants.get(info.index, ()))
        states.append(
            GpuState(
                index=info.index,
                uuid=info.uuid,
                model=info.name or "",  # the key of its learned interference parameters
                memory_total_mib=info.memory_total_mib
                or (reading.memory_total_mib if reading else None)
                or 0.0,
                memory_used_mib=(reading.memory_used_mib if reading else None) or 0.0,
                sm_activity_pct=sum(window) / len(window) if window else None,
                tenants=on_gpu,
                mig_enabled=bool(reading and reading.mig_enabled),
                mig_slices=_mig_slices(reading, on_gpu),
                lost=info.index in lost,
                mps_usable=mps_usable(info.uuid),
            )
        )
    return tuple(states)
