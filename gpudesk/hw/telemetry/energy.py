"""Energy accounting: each GPU's energy since sampling began, and each job attempt's share.

Per GPU, energy comes from the device's total-energy counter (deltas between readings); where a
device has no counter, power is integrated over time instead and the result says "integrated".
Per attempt, every interval between two readings is attributed:

- a GPU held by one attempt gives it the whole interval (summed over its life this is the
  counter's delta over the job's lifetime, to within one sampling interval at each end);
- a GPU shared by several attempts is split by their processes' SM share where NVML reports it,
  else evenly, and the attempt is marked as an estimate. Under MPS, NVML reports the SM share
  of the MPS server alone, never of a client: the server's share goes to the GPU's MPS clients
  as a group, evenly among them ("mps share" where other tenants keep their own share, "even"
  where the clients are the only tenants);
- the idle baseline (the GPU's idle power × the interval) is split the same way and reported
  separately, so "above idle" is what the job itself added;
- CPU package energy (RAPL) is split by each attempt's share of the host's busy CPU time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from gpudesk.core.wire.jobs import AttemptUsageFigures, AttemptUsageView, UsageFigures
from gpudesk.hw.telemetry.model import MPS_SERVER, BackendReading, GpuReading
from gpudesk.units import carbon_g

IDLE_SMOOTHING = 0.1  # EWMA weight of a new idle-power reading
# How the GPU energy of an attempt was split from its GPU's, least to most approximate.
SPLIT_ORDER = ("exclusive", "sm share", "mps share", "even")


class Interval(msgspec.Struct, frozen=True):
    """What one GPU used between two readings."""

    seconds: float
    energy_j: float
    source: str  # "counter" or "integrated"
    idle_j: float | None  # the idle baseline over the interval; None until it is known


class _GpuState(msgspec.Struct):
    energy_j: float = 0.0
    source: str | None = None
    last_counter_j: float | None = None
    last_power_w: float | None = None
    last_t: float | None = None
    idle_power_w: float | None = None


class GpuEnergyMeter:
    """Energy per GPU since the first reading. `idle_power_w` seeds each GPU's idle baseline (by
    UUID); otherwise it is learned from readings taken while the GPU runs nothing."""

    def __init__(
        self, idle_power_w: Mapping[str, float] | None = None, default_idle_w: float | None = None
    ) -> None:
        self.known_idle = dict(idle_power_w or {})
        self.default_idle_w = default_idle_w
        self.gpus: dict[int, _GpuState] = {}

    def energy_j(self, index: int) -> float | None:
        state = self.gpus.get(index)
        return None if state is None or state.source is None else state.energy_j

    def source(self, index: int) -> str | None:
        state = self.gpus.get(index)
        return state.source if state else None

    def idle_power_w(self, index: int) -> float | None:
        state = self.gpus.get(index)
        return state.idle_power_w if state else None

    def learned_idle(self, readings: Iterable[GpuReading]) -> dict[str, float]:
        """Idle baselines by UUID, for the engine to keep across restarts."""
        return {
            g.uuid: round(s.idle_power_w, 2)
            for g in readings
            if g.uuid and (s := self.gpus.get(g.index)) and s.idle_power_w is not None
        }

    def update(self, reading: BackendReading, busy: Iterable[int] = ()) -> dict[int, Interval]:
        """Fold in a reading; `busy` are GPUs the engine has placed jobs on. Returns what each
        GPU used since the previous reading (nothing for a GPU's first reading)."""
        busy = set(busy)
        intervals: dict[int, Interval] = {}
        now = reading.monotonic
        for gpu in reading.gpus:
            state = self.gpus.get(gpu.index)
            if state is None:
                state = self.gpus[gpu.index] = _GpuState(
                    idle_power_w=self.known_idle.get(gpu.uuid or "", self.default_idle_w)
                )
            if gpu.lost:
                state.last_t = None  # a lost GPU draws nothing we can measure
                continue
            interval = self._interval(state, gpu, now)
            if interval is not None:
                intervals[gpu.index] = interval
                state.energy_j += interval.energy_j
                state.source = (
                    interval.source if state.source in (None, interval.source) else "integrated"
                )
            elif state.source is None and (
                gpu.energy_counter_j is not None or gpu.power_w is not None
            ):
                state.source = "counter" if gpu.energy_counter_j is not None else "integrated"
            state.last_counter_j, state.last_power_w = gpu.energy_counter_j, gpu.power_w
            state.last_t = now
            # An MPS server alone (it outlives its clients) keeps no SM busy: the GPU is idle.
            running = [p for p in gpu.processes if p.mps != MPS_SERVER]
            if gpu.power_w is not None and gpu.index not in busy and not running:
                state.idle_power_w = (
                    gpu.power_w
                    if state.idle_power_w is None
                    else ((1 - IDLE_SMOOTHING) * state.idle_power_w + IDLE_SMOOTHING * gpu.power_w)
                )
        return intervals

    @staticmethod
    def _interval(state: _GpuState, gpu: GpuReading, now: float) -> Interval | None:
        if state.last_t is None or now <= state.last_t:
            return None
        seconds = now - state.last_t
        idle = None if state.idle_power_w is None else state.idle_power_w * seconds
        if (
            gpu.energy_counter_j is not None
            and state.last_counter_j is not None
            and gpu.energy_counter_j >= state.last_counter_j
        ):
            return Interval(seconds, gpu.energy_counter_j - state.last_counter_j, "counter", idle)
        if gpu.power_w is not None and state.last_power_w is not None:
            energy = (gpu.power_w + state.last_power_w) / 2.0 * seconds
            return Interval(seconds, energy, "integrated", idle)
        return None


@dataclass
class AttemptUsage:
    """What one attempt used so far. GPU figures are None for an attempt that holds no GPU."""

    attempt_id: int
    job_id: int
    gpu_j: float | None = None
    gpu_idle_j: float | None = None
    gpu_source: str | None = None  # "counter", "integrated", or "counter+integrated"
    split: str | None = None  # one of SPLIT_ORDER
    cpu_j: float | None = None
    cpu_s: float = 0.0
    rss_peak_bytes: int = 0
    io_read_bytes: int = 0
    io_write_bytes: int = 0
    gpu_memory_peak_mib: float | None = None  # the most GPU memory its processes held
    gpu_memory_peak_at: float | None = None  # when (monotonic) that peak last grew
    gpu_sm_total: float = 0.0  # sum of its SM share over the samples that had one
    gpu_sm_samples: int = 0
    _idle_known: bool = field(default=True, repr=False)

    @property
    def gpu_sm_mean_pct(self) -> float | None:
        return self.gpu_sm_total / self.gpu_sm_samples if self.gpu_sm_samples else None

    def add_gpu_sample(
        self, memory_mib: float | None, sm_pct: float | None, at: float | None = None
    ) -> None:
        if memory_mib is not None:
            # Growth of under 1 % (allocator noise) does not count as a new peak.
            if self.gpu_memory_peak_mib is None or memory_mib > self.gpu_memory_peak_mib * 1.01:
                self.gpu_memory_peak_at = at
            self.gpu_memory_peak_mib = max(self.gpu_memory_peak_mib or 0.0, memory_mib)
        if sm_pct is not None:
            self.gpu_sm_total += sm_pct
            self.gpu_sm_samples += 1

    @property
    def estimate(self) -> bool:
        return self.split not in (None, "exclusive")

    @property
    def gpu_above_idle_j(self) -> float | None:
        if self.gpu_j is None or self.gpu_idle_j is None:
            return None
        return max(0.0, self.gpu_j - self.gpu_idle_j)

    def add_gpu(self, energy_j: float, idle_j: float | None, source: str, split: str) -> None:
        self.gpu_j = (self.gpu_j or 0.0) + energy_j
        if idle_j is None or not self._idle_known:
            self._idle_known = False  # one interval without a baseline leaves the total unknown
            self.gpu_idle_j = None
        else:
            self.gpu_idle_j = (self.gpu_idle_j or 0.0) + idle_j
        if self.gpu_source is None:
            self.gpu_source = source
        elif source not in self.gpu_source.split("+"):
            self.gpu_source = "counter+integrated"
        if self.split is None or SPLIT_ORDER.index(split) > SPLIT_ORDER.index(self.split):
            self.split = split  # the least exact method used in any interval

    def figures(self, g_per_kwh: float) -> AttemptUsageFigures:
        """Its figures as the wire carries them (rounded; carbon at `g_per_kwh`)."""
        total = (
            None
            if self.gpu_j is None and self.cpu_j is None
            else (self.gpu_j or 0.0) + (self.cpu_j or 0.0)
        )
        return AttemptUsageFigures(
            gpu_j=rounded(self.gpu_j),
            gpu_idle_j=rounded(self.gpu_idle_j),
            gpu_above_idle_j=rounded(self.gpu_above_idle_j),
            gpu_source=self.gpu_source,
            split=self.split,
            estimate=self.estimate,
            cpu_j=rounded(self.cpu_j),
            total_j=rounded(total),
            carbon_g=rounded(carbon_g(total, g_per_kwh), 3),
            cpu_s=rounded(self.cpu_s, 2),
            rss_peak_mib=rounded(self.rss_peak_bytes / 2**20),
            io_read_mib=rounded(self.io_read_bytes / 2**20),
            io_write_mib=rounded(self.io_write_bytes / 2**20),
            gpu_memory_peak_mib=rounded(self.gpu_memory_peak_mib),
            gpu_sm_mean_pct=rounded(self.gpu_sm_mean_pct),
        )


def stored_usage(number: int, text: str) -> AttemptUsageView | None:
    """An attempt's stored usage as its type. A row an older engine wrote has fewer fields
    (no GPU memory peak, no mean SM share): None for what it lacks; one a newer engine wrote may
    have more, which are left out. A row that is not usage at all (a damaged store) is none."""
    try:
        stored = json.loads(text)
    except ValueError:
        return None
    if not isinstance(stored, dict):
        return None
    fields = {name: stored.get(name) for name in AttemptUsageFigures.__struct_fields__}
    fields["estimate"] = bool(stored.get("estimate"))
    try:
        return msgspec.convert({**fields, "attempt": number}, AttemptUsageView)
    except msgspec.ValidationError:
        return None


def rounded(value: float | None, digits: int = 1) -> float | None:
    """For JSON views: a figure to `digits` places, None kept as None."""
    return None if value is None else round(value, digits)


class Occupant(msgspec.Struct, frozen=True):
    """An attempt holding a GPU, and the SM share its processes showed in the interval.
    `mps_group`: the share is an even part of the GPU's MPS server's, not its own."""

    attempt_id: int
    sm_pct: float | None
    mps_group: bool = False


def split_interval(interval: Interval, occupants: list[Occupant]) -> list[tuple[int, float, str]]:
    """(attempt id, fraction, method) for each occupant of a GPU over one interval."""
    if not occupants:
        return []
    if len(occupants) == 1:
        return [(occupants[0].attempt_id, 1.0, "exclusive")]
    shares = [o.sm_pct for o in occupants]
    grouped = [o.mps_group for o in occupants]
    if all(s is not None for s in shares) and not all(grouped):
        method = "mps share" if any(grouped) else "sm share"
        total = sum(shares)  # type: ignore[arg-type]
        if total <= 0:  # nobody kept an SM busy: the SM-share split is an even one
            return [(o.attempt_id, 1.0 / len(occupants), method) for o in occupants]
        return [
            (o.attempt_id, o.sm_pct / total, method)  # type: ignore[operator]
            for o in occupants
        ]
    # No share for someone, or only MPS clients (whose parts of the server's are even anyway)
    return [(o.attempt_id, 1.0 / len(occupants), "even") for o in occupants]


def attribute_gpu(
    usage: Mapping[int, AttemptUsage],
    intervals: Mapping[int, Interval],
    occupants: Mapping[int, list[Occupant]],
) -> None:
    """Credit each GPU's interval to the attempts that held it."""
    for index, interval in intervals.items():
        for attempt_id, fraction, method in split_interval(interval, occupants.get(index, [])):
            if attempt_id in usage:
                idle = None if interval.idle_j is None else interval.idle_j * fraction
                usage[attempt_id].add_gpu(
                    interval.energy_j * fraction, idle, interval.source, method
                )


def attribute_cpu(
    usage: Mapping[int, AttemptUsage],
    package_j: float,
    cpu_seconds: Mapping[int, float],
    host_busy_s: float,
) -> None:
    """Split CPU package energy by each attempt's share of the host's busy CPU time."""
    if package_j <= 0 or host_busy_s <= 0:
        for attempt_id in cpu_seconds:
            if attempt_id in usage and usage[attempt_id].cpu_j is None:
                usage[attempt_id].cpu_j = 0.0
        return
    for attempt_id, seconds in cpu_seconds.items():
        if attempt_id in usage:
            share = min(1.0, max(0.0, seconds / host_busy_s))
            usage[attempt_id].cpu_j = (usage[attempt_id].cpu_j or 0.0) + package_j * share


def summarize(figures: Sequence[UsageFigures], g_per_kwh: float) -> UsageFigures | None:
    """Usage summed over attempts, or over jobs (each such a sum); None over none."""
    if not figures:
        return None

    def total(key: str, *, all_known: bool = False) -> float | None:
        values = [getattr(f, key) for f in figures]
        known = [v for v in values if v is not None]
        if not known or (all_known and len(known) != len(values)):
            return None
        return sum(known)

    gpu_j, cpu_j = total("gpu_j"), total("cpu_j")
    everything = None if gpu_j is None and cpu_j is None else (gpu_j or 0.0) + (cpu_j or 0.0)
    sources = sorted({s for f in figures for s in (f.gpu_source or "").split("+") if s})
    splits = [f.split for f in figures if f.split]
    return UsageFigures(
        gpu_j=rounded(gpu_j),
        gpu_idle_j=rounded(total("gpu_idle_j", all_known=True)) if gpu_j is not None else None,
        gpu_above_idle_j=rounded(total("gpu_above_idle_j", all_known=True))
        if gpu_j is not None
        else None,
        gpu_source="+".join(sources) or None,
        split=max(splits, key=SPLIT_ORDER.index) if splits else None,
        estimate=any(f.estimate for f in figures),
        cpu_j=rounded(cpu_j),
        total_j=rounded(everything),
        carbon_g=rounded(carbon_g(everything, g_per_kwh), 3),
        cpu_s=rounded(total("cpu_s"), 2),
        rss_peak_mib=rounded(max((f.rss_peak_mib or 0.0) for f in figures)),
        io_read_mib=rounded(total("io_read_mib")),
        io_write_mib=rounded(total("io_write_mib")),
    )
