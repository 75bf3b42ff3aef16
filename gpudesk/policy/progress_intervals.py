"""Learning from progress, the pure part: an attempt's run cut into intervals under one tenancy,
and an ended interval turned into what the learner is told.

A *tenancy* is where an attempt runs and beside whom: its GPU, its mode, its MIG slice and the
other attempts on its GPU. While it stays the same, the attempt's progress lines (DONE, read by
the engine from its log) make one interval; when it changes (a co-tenant starts or ends) or the
attempt ends, the interval ends. An interval long enough, over which DONE grew, has a rate (DONE
per second from its first to its last line). Alone, that rate is the job's speed alone; shared,
its ratio to the speed alone is an `interference.Observation`. While an attempt is alone, its
GPU's telemetry (`AloneActivity`: SM activity and kernel-active time) measures its kernel-active
gap, another observation.

A command's rate alone is remembered as the mean over its runs (`AloneRate`). What an interval
taught is said in words (`progress_lesson`, `telemetry_lesson`) for the job's events.

The engine (`gpudesk.engine.learning`) reads the logs, knows who runs where, remembers rates
alone in its store and feeds the learner; this module holds no file, clock or store, so the
rules can be read and tested on their own (docs/interference.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudesk.core.mig_profiles import compute_slices, memory_slices, table_for_gpu
from gpudesk.policy.interference import Observation, Workload, kernel_active_gap


@dataclass(frozen=True)
class CoTenant:
    attempt_id: int
    job_id: int
    work: Workload = field(compare=False)  # fixed for an attempt; compared by its id


@dataclass(frozen=True)
class Tenancy:
    """Where an attempt runs and beside whom: an interval lasts while this stays the same."""

    gpu: int
    mode: str
    mig_slice: str | None = None
    others: tuple[CoTenant, ...] = ()  # the other attempts on its GPU (none on a MIG slice)
    compute_slices: int = 0  # its MIG slice's
    memory_slices: int = 0

    @property
    def alone(self) -> bool:
        return self.mode != "mig" and not self.others


@dataclass(frozen=True)
class Placed:
    """A running single-GPU attempt as tenancies are built from: where it runs, and its
    workload (what its co-tenants' observations say it brought)."""

    attempt_id: int
    job_id: int
    gpu: int
    mode: str
    work: Workload
    mig_slice: str | None = None
    compute_slices: int = 0  # its MIG slice's, where the engine could read them
    memory_slices: int = 0


def tenancies(placed: Sequence[Placed]) -> dict[int, Tenancy]:
    """Each attempt's tenancy, by attempt id. An attempt on a MIG slice has no co-tenants (its
    slice is its own); the others share their GPU with every non-MIG attempt on it."""
    result = {}
    for attempt in placed:
        if attempt.mode == "mig":
            result[attempt.attempt_id] = Tenancy(
                attempt.gpu,
                "mig",
                attempt.mig_slice,
                (),
                attempt.compute_slices,
                attempt.memory_slices,
            )
            continue
        others = tuple(
            CoTenant(other.attempt_id, other.job_id, other.work)
            for other in placed
            if other is not attempt and other.mode != "mig" and other.gpu == attempt.gpu
        )
        result[attempt.attempt_id] = Tenancy(attempt.gpu, attempt.mode, None, others)
    return result


@dataclass
class Point:
    at: float  # time.monotonic() when the line was read
    done: float


@dataclass(frozen=True)
class Interval:
    """An ended interval that counts: long enough, and DONE grew over it."""

    tenancy: Tenancy
    seconds: float
    done: float  # DONE's growth over it

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    def observation(self, work: Workload, alone_rate: float) -> Observation:
        """What a shared interval tells the learner: the job's rate here against `alone_rate`,
        beside its co-tenants' workloads (or on its MIG slice)."""
        t = self.tenancy
        return Observation(
            t.mode,
            work,
            tuple(o.work for o in t.others),
            self.rate / alone_rate,
            t.compute_slices,
            t.memory_slices,
        )


@dataclass
class Progress:
    """One attempt's progress: its interval under the current tenancy, and what its intervals
    alone added up to (its own speed alone, measured in this attempt)."""

    tenancy: Tenancy
    first: Point | None = None  # the interval's first progress line
    last: Point | None = None  # its latest
    alone_done: float = 0.0  # over this attempt's intervals alone
    alone_s: float = 0.0

    @property
    def alone_rate(self) -> float | None:
        return self.alone_done / self.alone_s if self.alone_s > 0 else None

    def add(self, at: float, done: float) -> None:
        """A progress line read at `at`. DONE going back (a restarted count) starts the
        interval afresh: what came before it is not comparable."""
        if self.last is not None and done < self.last.done:
            self.first = None
        point = Point(at, done)
        if self.first is None:
            self.first = point
        self.last = point

    def end(self, min_s: float) -> Interval | None:
        """The interval ends (its tenancy changed, or the attempt ended): the interval if it
        counts (at least `min_s` long, DONE grew), else None. One alone adds to the attempt's
        speed alone. The next interval starts at the next line read."""
        first, last = self.first, self.last
        self.first = self.last = None
        if first is None or last is None:
            return None
        seconds = last.at - first.at
        if seconds < min_s or last.done <= first.done:
            return None
        interval = Interval(self.tenancy, seconds, last.done - first.done)
        if self.tenancy.alone:
            self.alone_done += interval.done
            self.alone_s += seconds
        return interval


# Telemetry samples an alone interval needs before its kernel-active gap counts: the monitor
# samples every few seconds, and one sample can catch a job between epochs (an assumption:
# three keep one such sample from deciding the mean).
MIN_ACTIVITY_SAMPLES = 3


@dataclass
class AloneActivity:
    """What telemetry read of an attempt's GPU while the attempt ran there alone (no other
    attempt, no process outside gpudesk): SM activity and kernel-active time, as shares,
    summed over the samples. Their means tell the kernel-active gap of the job."""

    samples: int = 0
    sm: float = 0.0
    kernel_active: float = 0.0
    first_at: float | None = None
    last_at: float | None = None

    def add(self, at: float, sm: float, kernel_active: float) -> None:
        if self.last_at is not None and at <= self.last_at:
            return  # the same sample, read again
        self.samples += 1
        self.sm += sm
        self.kernel_active += kernel_active
        if self.first_at is None:
            self.first_at = at
        self.last_at = at

    def observation(self, work: Workload, min_s: float) -> Observation | None:
        """The observation the samples make (at least `min_s` apart from first to last, and
        `MIN_ACTIVITY_SAMPLES` of them), or None. Its workload's SM share is the one measured
        here, beside the kernel-active time it is compared with."""
        if self.samples < MIN_ACTIVITY_SAMPLES or self.first_at is None or self.last_at is None:
            return None
        if self.last_at - self.first_at < min_s:
            return None
        sm = self.sm / self.samples
        active = self.kernel_active / self.samples
        if kernel_active_gap(sm, active) is None:
            return None
        return Observation("exclusive", Workload(sm, work.membw), (), 1.0, kernel_active=active)


def slice_size(
    latest: Mapping[str, Any] | None, gpu: int, mig_slice: str | None
) -> tuple[int, int]:
    """The compute and memory slices of MIG device `mig_slice` on GPU `gpu`, as the latest
    telemetry sample (`latest`: the monitor's view) names it; (0, 0) where it does not."""
    for reading in latest["gpus"] if latest else ():
        if reading["index"] != gpu:
            continue
        for device in reading.get("mig_devices", ()):
            if device["uuid"] == mig_slice and device["name"]:
                table = table_for_gpu(reading.get("name") or "")
                return compute_slices(device["name"]), memory_slices(device["name"], table)
    return 0, 0


@dataclass(frozen=True)
class AloneRate:
    """A command's progress rate (its DONE units per second) alone on a GPU, over its runs."""

    rate: float
    runs: int
    updated_at: float


def alone_rate_after(old: AloneRate | None, rate: float, at: float) -> AloneRate:
    """A command's rate alone once one more of its runs measured `rate` (at `at`): the mean
    over its runs."""
    runs = old.runs if old else 0
    mean = (old.rate * runs + rate) / (runs + 1) if old else rate
    return AloneRate(mean, runs + 1, at)


def progress_lesson(
    interval: Interval, obs: Observation, gpu_model: str, name: str, value: float
) -> str:
    """What a shared interval of a job's progress taught: parameter `name` is now `value`."""
    tenancy = interval.tenancy
    beside = ", ".join(f"job {o.job_id}" for o in tenancy.others) or tenancy.mig_slice or "-"
    return (
        f"learned from progress: {obs.rate:.2f}x its speed alone under {tenancy.mode} "
        f"beside {beside} over {interval.seconds:.0f} s; {name} on "
        f"{gpu_model or 'this GPU'} is now {value:.3f}"
    )


def telemetry_lesson(
    obs: Observation, seconds: float, gpu_model: str, name: str, value: float
) -> str:
    """What a job's telemetry alone over `seconds` taught (its kernel-active gap): parameter
    `name` is now `value`."""
    return (
        f"learned from telemetry: alone, kernel-active {obs.kernel_active:.0%} of the time "
        f"against SM activity {obs.job.sm:.0%} over {seconds:.0f} s; {name} on "
        f"{gpu_model or 'this GPU'} is now {value:.3f}"
    )
