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

A command's rate alone is remembered as the mean over its runs (`AloneRate`), and with it its
*steady SM share*: the mean SM activity its GPU read while it ran alone after its first progress
line (`AloneActivity` counts no sample before it), in the phase its rate is measured in. A shared
interval teaches only where every attempt in it, the job and each co-tenant, has a steady SM
share remembered, and its observation's workloads are those shares (`Interval.observation`),
never the placement's SM hints. Why: the learner puts whatever the model's prediction misses
into the sharing mechanism. On an H200 (2026-12-04) eight probe jobs hinted at their life-long
SM average (start-up included: 49/22/26/6 %) ran under MPS at exactly the fair share of their
steady demand (79/33/41/10 %, ~258 % in all); read against the hints (~160 %), the shortfall
became the mechanism's cost: contention 0.228 -> 1.397, mps_tenant_cost 0.04 -> 0.16, and
`auto` with that model ran the same day 1.42 x slower. Nor does a job's SM activity over its
whole time alone serve: start-up included, the heaviest read 54 %, not 79 %.

What an interval taught is said in words (`progress_lesson`, `telemetry_lesson`) for the job's
events.

The engine (`gpudesk.engine.learning`) reads the logs, knows who runs where, remembers rates
alone in its store and feeds the learner; this module holds no file, clock or store, so the
rules can be read and tested on their own (docs/interference.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gpudesk.core.mig_profiles import compute_slices, memory_slices, table_for_gpu
from gpudesk.core.wire.telemetry import Snapshot
from gpudesk.policy.interference import (
    ModelParams,
    Observation,
    kernel_active_gap,
    shared_mechanism,
    workload,
)


class CoTenant(msgspec.Struct, frozen=True):
    attempt_id: int
    job_id: int


class Tenancy(msgspec.Struct, frozen=True):
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


class Placed(msgspec.Struct, frozen=True):
    """A running single-GPU attempt as tenancies are built from: where it runs."""

    attempt_id: int
    job_id: int
    gpu: int
    mode: str
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
        beside = [
            other
            for other in placed
            if other is not attempt and other.mode != "mig" and other.gpu == attempt.gpu
        ]
        others = tuple(CoTenant(other.attempt_id, other.job_id) for other in beside)
        # an MPS client beside a time-sliced context shows time-slicing, not MPS
        mode = attempt.mode
        if mode == "mps":
            mode = shared_mechanism([mode, *(other.mode for other in beside)])
        result[attempt.attempt_id] = Tenancy(attempt.gpu, mode, None, others)
    return result


class Point(msgspec.Struct):
    at: float  # time.monotonic() when the line was read
    done: float


class Interval(msgspec.Struct, frozen=True):
    """An ended interval that counts: long enough, and DONE grew over it."""

    tenancy: Tenancy
    seconds: float
    done: float  # DONE's growth over it

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    def observation(
        self, alone_rate: float, sm_pcts: Sequence[float | None], params: ModelParams
    ) -> Observation | None:
        """What a shared interval tells the learner: the job's rate here against `alone_rate`,
        beside its co-tenants (or on its MIG slice). `sm_pcts`: the steady SM share (%)
        remembered for the job's command, then for each co-tenant's in `tenancy.others`' order;
        the workloads are built from them (bandwidth from `params`). None where any is unknown
        (None): the hints would stand in, and their error be read as the mechanism's cost (the
        module's docstring)."""
        t = self.tenancy
        if len(sm_pcts) != 1 + len(t.others) or any(sm is None for sm in sm_pcts):
            return None
        job, *others = (workload(sm, None, params) for sm in sm_pcts if sm is not None)
        return Observation(
            t.mode, job, tuple(others), self.rate / alone_rate, t.compute_slices, t.memory_slices
        )


class Progress(msgspec.Struct):
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


class AloneActivity(msgspec.Struct):
    """What telemetry read of an attempt's GPU while the attempt ran there alone (no other
    attempt, no process outside gpudesk) in its steady phase (the engine adds no sample taken
    before its first progress line was read): SM activity and kernel-active time, as shares,
    summed over the samples. Their means tell the job's steady SM share and its kernel-active
    gap."""

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

    @property
    def sm_pct(self) -> float | None:
        """The mean SM activity (%), from `MIN_ACTIVITY_SAMPLES` samples or more; else None."""
        return 100.0 * self.sm / self.samples if self.samples >= MIN_ACTIVITY_SAMPLES else None

    def observation(self, params: ModelParams, min_s: float) -> Observation | None:
        """The observation the samples make (at least `min_s` apart from first to last, and
        `MIN_ACTIVITY_SAMPLES` of them), or None. Its workload's SM share is the one measured
        here, beside the kernel-active time it is compared with."""
        sm_pct = self.sm_pct
        if sm_pct is None or self.first_at is None or self.last_at is None:
            return None
        if self.last_at - self.first_at < min_s:
            return None
        active = self.kernel_active / self.samples
        job = workload(sm_pct, None, params)
        if kernel_active_gap(job.sm, active) is None:
            return None
        return Observation("exclusive", job, (), 1.0, kernel_active=active)


def slice_size(latest: Snapshot | None, gpu: int, mig_slice: str | None) -> tuple[int, int]:
    """The compute and memory slices of MIG device `mig_slice` on GPU `gpu`, as the latest
    telemetry sample (the monitor's Snapshot) names it; (0, 0) where it does not."""
    reading = None if latest is None else latest.gpu(gpu)
    if reading is None:
        return 0, 0
    for device in reading.mig_devices:
        if device.uuid == mig_slice and device.name:
            table = table_for_gpu(reading.name or "")
            return compute_slices(device.name), memory_slices(device.name, table)
    return 0, 0


class AloneRate(msgspec.Struct, frozen=True):
    """A command's progress rate (its DONE units per second) alone on a GPU, over its runs, and
    its steady SM share alone (%) over the `sm_runs` of them that read it (None: none did)."""

    rate: float
    runs: int
    updated_at: float
    sm_pct: float | None = None
    sm_runs: int = 0


def alone_rate_after(
    old: AloneRate | None, rate: float, at: float, sm_pct: float | None = None
) -> AloneRate:
    """A command's rate alone once one more of its runs measured `rate` (at `at`), and
    `sm_pct` where it read one: each the mean over the runs that measured it."""
    runs = old.runs if old else 0
    mean = (old.rate * runs + rate) / (runs + 1) if old else rate
    sm_runs, sm = (old.sm_runs, old.sm_pct) if old else (0, None)
    if sm_pct is not None:
        sm = ((sm or 0.0) * sm_runs + sm_pct) / (sm_runs + 1)
        sm_runs += 1
    return AloneRate(mean, runs + 1, at, sm, sm_runs)


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
