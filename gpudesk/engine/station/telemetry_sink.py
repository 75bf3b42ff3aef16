"""The engine's end of telemetry: the monitor and its sampler thread, samples taken in on the loop,
the downsampled series and usage written to the store, energy today, and lost GPUs.

The sampler thread only reads the GPUs and queues what it read; everything else happens on the
engine's loop, which owns the store.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from collections.abc import Callable, Iterable, Mapping

import msgspec

from gpudesk.core.records import JobSeries
from gpudesk.core.station import StationConfig
from gpudesk.core.wire.jobs import AttemptUsageView, UsageSummary
from gpudesk.core.wire.telemetry import Snapshot
from gpudesk.engine.state import CurrentStation
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import GPU_ENERGY_METRIC
from gpudesk.hw.telemetry.backend import make_backend
from gpudesk.hw.telemetry.energy import AttemptUsage, summarize
from gpudesk.hw.telemetry.monitor import (
    JOB_POWER_SERIES,
    JOB_SERIES,
    JOB_SIMULATED_SERIES,
    MigLayout,
    Monitor,
    RawSample,
    TrackedAttempt,
    mig_layout,
)
from gpudesk.hw.telemetry.sampler import SamplerThread
from gpudesk.hw.telemetry.xid import xid_messages

log = logging.getLogger("gpudesk.engine")

STORE_SAMPLES_EVERY_S = 10.0  # the store keeps means over this window; live views get every sample
SAMPLE_RETENTION_S = 30 * 24 * 3600.0
PRUNE_EVERY_S = 3600.0
# What `show` with `series` returns of a job: its stored series, at most this many points each.
SHOWN_JOB_SERIES = (*JOB_SERIES, JOB_POWER_SERIES)
MAX_SERIES_POINTS = 2000


class TelemetrySink:
    def __init__(
        self,
        store: Store,
        station: CurrentStation,
        wake: Callable[[], None],
        publish: Callable[[Snapshot], None],
        on_change: Callable[[], None],
    ) -> None:
        """`wake` wakes the loop (called on the sampler thread), `publish` sends a telemetry
        frame to subscribers, `on_change` asks for placement to look again."""
        self.store = store
        self.station = station  # its config says the backend, interval and grid intensity
        self.wake = wake
        self.publish = publish
        self.on_change = on_change
        self.samples: queue.SimpleQueue[RawSample] = queue.SimpleQueue()
        self.tracked: tuple[TrackedAttempt, ...] = ()  # read by the sampler thread
        self.monitor = self._make_monitor(station.config)
        self.sampler: SamplerThread | None = None
        self.lost_gpus: frozenset[int] = frozenset()
        self.mig_layout: MigLayout | None = None  # as the latest sample showed it
        self.store_samples_at = time.monotonic() + STORE_SAMPLES_EVERY_S
        self.prune_at = time.monotonic()
        # GPU index -> the monitor's energy count when the store last got an energy point; what
        # it counted since then is "energy today" not yet in the store.
        self.energy_stored_upto_j: dict[int, float] = {}

    # ------------------------------------------------------------ life cycle
    def _make_monitor(self, config: StationConfig) -> Monitor:
        saved = self.store.setting("idle_power_w")
        monitor = Monitor(
            make_backend(config.backend, mig=config.mig),
            grid_g_per_kwh=config.grid_intensity,
            idle_power_w=saved if isinstance(saved, dict) else None,
            interval_s=config.sample_interval,
        )
        monitor.open()  # the inventory is needed for placement before the first sample
        return monitor

    def start(self) -> None:
        self.sampler = SamplerThread(
            self.monitor, self.station.config.sample_interval, lambda: self.tracked, self._deliver
        )
        self.sampler.start()

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(Exception):  # best effort: a full disk must not block exit
            self.flush(force=True)
        self.monitor.close()

    def restart(self) -> None:
        """The station's backend, interval or grid intensity changed: a fresh monitor, usage
        carried over."""
        self.stop()
        self.ingest()
        # the window not stored yet ends here: its means would go with the old monitor
        self.flush(force=True)
        usage = self.monitor.usage
        unstored = self._energy_not_stored()
        self.monitor.close()
        self.monitor = self._make_monitor(self.station.config)
        self.monitor.usage.update(usage)
        # The new monitor counts energy from zero: the next stored point carries the old one's.
        self.energy_stored_upto_j = {index: -joules for index, joules in unstored.items()}
        self.lost_gpus = frozenset()
        self.start()

    def track(self, attempts: Iterable[TrackedAttempt]) -> None:
        """Tell the sampler which attempts run where (it reads `tracked` on its thread). The
        engine calls it whenever an attempt starts or ends, so these are the running ones."""
        self.tracked = tuple(attempts)

    # --------------------------------------------------------------- samples
    def _deliver(self, raw: RawSample) -> None:
        """Called on the sampler thread: queue the sample and wake the loop."""
        self.samples.put(raw)
        self.wake()

    def ingest(self) -> None:
        """Take in what the sampler delivered, publish each view, note GPUs lost, and write to
        the store when its window is due. A sample taken before an attempt ended does not
        credit it again: only the tracked (running) attempts count."""
        running = {t.attempt_id for t in self.tracked}
        while True:
            try:
                raw = self.samples.get_nowait()
            except queue.Empty:
                break
            first = self.monitor.latest is None
            view = self.monitor.ingest(raw, running=running)
            layout = mig_layout(view)
            if first:
                self.on_change()  # GPU jobs held back until the GPUs were read can go now
            elif layout != self.mig_layout:
                # MIG instances came or went (gpudesk's own repartition, or an admin's
                # nvidia-smi): jobs waiting for a slice may fit one now. Nothing else would
                # make placement look again.
                self.on_change()
            self.mig_layout = layout
            for message in xid_messages(raw.reading):  # an admin wants to know: log, events
                log.warning(message)
                self.store.add_event("gpu", message)
            self._note_lost(frozenset(g.index for g in view.gpus if g.lost))
            self.publish(view)
        self.flush()

    def snapshot(self) -> Snapshot | None:
        """The latest view as clients get it (reply and event alike), None before a sample."""
        return self.monitor.latest

    def _note_lost(self, lost: frozenset[int]) -> None:
        if lost == self.lost_gpus:
            return
        for index in sorted(lost - self.lost_gpus):
            message = f"GPU {index} is lost (fell off the bus); no job is placed on it"
            log.warning(message)
            self.store.add_event("gpu", message)
        self.lost_gpus = lost
        self.on_change()

    def await_sample_after(self, after: float, timeout: float) -> None:
        """Ingest samples until one taken after `after` (time.time()) is in, for at most
        `timeout` s: placement must see a changed MIG layout before it places a job on it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ingest()
            latest = self.monitor.latest
            if latest is not None and latest.taken_at >= after:
                return
            time.sleep(0.01)

    # ------------------------------------------------------------ the store
    def flush(self, force: bool = False) -> None:
        """Write the downsampled series and running attempts' usage to the store."""
        now = time.monotonic()
        if not force and now < self.store_samples_at:
            return
        self.store_samples_at = now + STORE_SAMPLES_EVERY_S
        ts = time.time()
        self._store_samples(ts)
        self.record_usage(self.monitor.usage.values())
        self._store_idle_power()
        if now >= self.prune_at:
            self.prune_at = now + PRUNE_EVERY_S
            self.store.prune_samples(ts - SAMPLE_RETENTION_S)

    def _store_samples(self, ts: float) -> None:
        averages = self.monitor.drain_averages()
        gpu_rows = [
            (ts, index, metric, mean.value)
            for (index, metric), mean in averages.gpus.items()
            if mean.value is not None
        ]
        unstored = self._energy_not_stored()
        gpu_rows += [
            (ts, index, GPU_ENERGY_METRIC, joules)
            for index, joules in unstored.items()
            if joules > 0
        ]
        job_rows = [
            (ts, job, attempt, metric, mean.value)
            for (job, attempt, metric), mean in averages.jobs.items()
            if mean.value is not None
        ]
        self.store.add_samples(gpu_rows, job_rows)
        for index, joules in unstored.items():
            self.energy_stored_upto_j[index] = self.energy_stored_upto_j.get(index, 0.0) + joules

    def _store_idle_power(self) -> None:
        """Each real GPU's learnt idle power, so the next engine splits energy from the start."""
        latest = self.monitor.latest
        if not latest:
            return
        idle = {
            g.uuid: g.idle_power_w
            for g in latest.gpus
            if g.uuid and g.idle_power_w is not None and not self.monitor.simulated
        }
        if idle:
            self.store.set_setting("idle_power_w", idle)

    def job_series(self, job_id: int) -> JobSeries:
        """The job's stored series and, while a window is open, its means so far."""
        points = {
            metric: self.store.job_series_thinned(job_id, metric, MAX_SERIES_POINTS)
            for metric in SHOWN_JOB_SERIES
        }
        now = time.time()
        pending = self.monitor.pending_job_means(job_id)
        for metric, value in pending.items():
            if metric in points:
                points[metric].append((now, value))
        simulated = JOB_SIMULATED_SERIES in pending or self.store.job_has_series(
            job_id, JOB_SIMULATED_SERIES
        )
        if not simulated and not points[JOB_POWER_SERIES]:
            # stored before the engine marked simulated samples: the backend it has now
            simulated = self.monitor.simulated
        return JobSeries(STORE_SAMPLES_EVERY_S, simulated, points)

    def record_usage(self, usages: Iterable[AttemptUsage]) -> None:
        grid = self.station.config.grid_intensity
        self.store.record_usage([(u.attempt_id, u.job_id, u.figures(grid)) for u in usages])

    def finish(self, attempt_id: int) -> None:
        """An attempt ended: store its last usage figures. Its outcome is stored already, so
        losing these is logged, not raised."""
        usage = self.monitor.finish(attempt_id)
        if usage is None:
            return
        try:
            self.record_usage([usage])
        except Exception:
            log.exception("could not store the usage of attempt %d", attempt_id)

    # ---------------------------------------------------------------- energy
    def energy_today(self) -> dict[int, float]:
        """Joules per GPU since local midnight: stored windows plus what is not stored yet."""
        gpus = [info.index for info in self.monitor.inventory]
        energy = self.store.gpu_energy_since(gpus, local_midnight(time.time()))
        for index, joules in self._energy_not_stored().items():
            energy[index] = energy.get(index, 0.0) + joules
        return {index: round(joules, 1) for index, joules in sorted(energy.items())}

    def _energy_not_stored(self) -> dict[int, float]:
        """Joules each GPU used since its last stored energy point."""
        meter = self.monitor.meter
        return {
            info.index: energy - self.energy_stored_upto_j.get(info.index, 0.0)
            for info in self.monitor.inventory
            if (energy := meter.energy_j(info.index)) is not None
        }

    def job_usage(
        self, job_ids: list[int], attempt_numbers: Mapping[int, int]
    ) -> dict[int, UsageSummary]:
        """Each job's usage summed over its attempts; a running attempt's figures are live.
        `attempt_numbers`: running attempt id -> its number within its job."""
        grid = self.station.config.grid_intensity
        stored = self.store.usage(job_ids)
        live = {u.attempt_id: u for u in self.monitor.usage.values()}
        result = {}
        for job_id in job_ids:
            attempts = {a.attempt: a for a in stored.get(job_id, [])}
            for attempt_id, usage in live.items():
                if usage.job_id == job_id and attempt_id in attempt_numbers:
                    number = attempt_numbers[attempt_id]
                    figures = msgspec.structs.asdict(usage.figures(grid))
                    attempts[number] = AttemptUsageView(attempt=number, **figures)
            ordered = [attempts[n] for n in sorted(attempts)]
            summary = summarize(ordered, grid)
            if summary is not None:
                result[job_id] = UsageSummary(
                    **msgspec.structs.asdict(summary), grid_g_per_kwh=grid, per_attempt=ordered
                )
        return result


def local_midnight(now: float) -> float:
    """The epoch time of the local midnight that began the day `now` falls in."""
    day = time.localtime(now)
    return time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))
