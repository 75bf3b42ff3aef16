"""The engine's side of its metrics: when `[station] metrics_listen` is set, an endpoint serving
them, moved or stopped when an admin changes the setting, and a fresh snapshot built on the
engine's loop whenever there is something new to show.

Off (the default), this costs nothing: prometheus_client is not even imported (the collector and
server modules are imported when an endpoint is first started), no snapshot is built.

A port that cannot be bound (in use, not an address of this machine, below 1024 without root)
never stops the engine: it is said once in engine.log and as an engine event, shown by `gpudesk
engine status` and in the `configure` reply that asked for it, and tried again every
RETRY_BIND_S until it works or the setting changes.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpudesk import __version__
from gpudesk.core.listen import ListenAddress, bind_problem, parse_listen
from gpudesk.engine.activity import EngineActivity
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.services.loaders import LoaderSupervisor
from gpudesk.engine.state import CurrentStation
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.hw.telemetry.monitor import RawSample
from gpudesk.metrics.loop_timing import LoopTiming
from gpudesk.paths import user_name

if TYPE_CHECKING:  # the snapshot is built only when asked for (`build`): most engines never are
    from gpudesk.metrics.server import MetricsServer
    from gpudesk.metrics.snapshot import JobCount, MetricsSnapshot

log = logging.getLogger("gpudesk.engine")

RETRY_BIND_S = 30.0  # how often an address that could not be bound is tried again
# The job counts are read again at least this often even when no job event was published (a
# state change made behind the engine's events, as recovery at start-up does).
JOB_COUNTS_EVERY_S = 30.0
# The loop's request and step histograms change with every request: the snapshot is built again
# for them at most this often (assumption: a scrape interval is 5 s or more, Prometheus's
# default is 1 min, so a second-old histogram loses nothing a scrape would see).
LOOP_TIMES_EVERY_S = 1.0


class MetricsExporter:
    def __init__(
        self,
        station: CurrentStation,
        store: Store,
        telemetry: TelemetrySink,
        loaders: LoaderSupervisor,
        events: EventPublisher,
        activity: EngineActivity,
        clock: Callable[[], float] = time.monotonic,
        loop: LoopTiming | None = None,
    ) -> None:
        self.station = station
        self.store = store
        self.telemetry = telemetry
        self.loaders = loaders
        self.events = events
        self.activity = activity
        self.clock = clock
        self.loop = loop or LoopTiming()  # how long requests and steps held the loop
        self.hostname = socket.gethostname()  # dcgm-exporter's Hostname label
        # The one reference the HTTP thread reads; replaced whole, never changed in place.
        self.snapshot: MetricsSnapshot | None = None
        self.server: MetricsServer | None = None
        self.wanted: str | None = None  # the metrics_listen in force
        self.problem: str | None = None  # why `wanted` is not served, if it is not
        self._retry_at = 0.0
        # What the latest snapshot was built from: the sample (by identity) and the job events.
        self._built_raw: RawSample | None = None
        self._built_events = -1
        self._counts_at = -JOB_COUNTS_EVERY_S
        self._built_at = -LOOP_TIMES_EVERY_S
        self._built_requests = -1  # the loop's request count the latest snapshot has
        self._counts_events = -1
        self._counts: tuple[JobCount, ...] = ()
        self._names: dict[int | None, str] = {}

    # ------------------------------------------------------------------- the endpoint
    @property
    def url(self) -> str | None:
        """Where the metrics are served now (the real port when 0 was asked), or None."""
        return self.server.url if self.server is not None else None

    def apply(self) -> str | None:
        """Serve what `[station] metrics_listen` says now: start, move or stop the endpoint.
        Returns why it is not served, or None (served, or off)."""
        wanted = self.station.config.metrics_listen
        if wanted == self.wanted and (self.server is not None or wanted is None):
            return self.problem
        self._stop()
        self.wanted, self.problem = wanted, None
        if wanted is not None:
            self._start(parse_listen(wanted))
        return self.problem

    def close(self) -> None:
        """The engine stops: free the port."""
        self._stop()

    def _stop(self) -> None:
        self.snapshot = None
        if self.server is not None:
            server, self.server = self.server, None
            server.close()
            log.info("metrics: no longer serving %s", server.url)

    def _start(self, address: ListenAddress) -> None:
        try:
            # Imported here, not above: prometheus_client and the HTTP server cost start-up
            # time the engine should not pay with metrics off.
            from prometheus_client import CollectorRegistry

            from gpudesk.metrics.collector import SnapshotCollector
            from gpudesk.metrics.server import MetricsServer

            registry = CollectorRegistry(auto_describe=False)  # this engine's, not the global
            registry.register(SnapshotCollector(lambda: self.snapshot))
            self.server = MetricsServer(address, registry)
        except ImportError as exc:
            self._failed(
                f"metrics: prometheus_client cannot be imported ({exc}); gpudesk needs it for "
                "[station] metrics_listen: pip install 'prometheus-client>=0.17'"
            )
            return
        except OSError as exc:
            self._failed(
                f"metrics: not serving {address.text()}: {bind_problem(address, exc, RETRY_BIND_S)}"
            )
            return
        if self.problem is not None:
            log.info("metrics: %s is free again", address.text())
        self.problem = None
        self._built_events = -1  # build one now, not at the next sample
        where = "" if address.loopback else " (not loopback: reachable from other machines)"
        log.info("metrics: serving %s%s", self.server.url, where)

    def _failed(self, message: str) -> None:
        self._retry_at = self.clock() + RETRY_BIND_S
        if message != self.problem:  # once, not every retry
            log.error("%s", message)
            try:
                self.store.add_event("engine", message)
            except Exception:  # an event is best effort; the log line is written
                log.exception("could not store the metrics event")
        self.problem = message

    # ------------------------------------------------------------------- the loop's step
    def step(self) -> None:
        """Each turn of the loop: retry a failed bind when due; build a snapshot when a sample
        came in or a job changed since the last one. Cheap when nothing did."""
        if self.wanted is None:
            return
        if self.server is None:
            if self.clock() < self._retry_at:
                return
            self._start(parse_listen(self.wanted))
            if self.server is None:
                return
        raw = self.telemetry.monitor.latest_raw
        events = self.events.job_events
        now = self.clock()
        same = raw is self._built_raw and events == self._built_events
        loop_new = (
            self.loop.requests != self._built_requests
            and now - self._built_at >= LOOP_TIMES_EVERY_S
        )
        if same and not loop_new and now - self._counts_at < JOB_COUNTS_EVERY_S:
            return
        self._built_raw, self._built_events = raw, events
        self._built_at, self._built_requests = now, self.loop.requests
        self.snapshot = self.build()

    def build(self) -> MetricsSnapshot:
        """What is exported, from the collaborators as they are now (on the loop's thread)."""
        from gpudesk.metrics import snapshot

        monitor = self.telemetry.monitor
        raw = monitor.latest_raw
        energy = {
            info.index: joules
            for info in monitor.inventory
            if (joules := monitor.meter.energy_j(info.index)) is not None
        }
        by_op, by_step = self.loop.histograms()
        return snapshot.MetricsSnapshot(
            backend=monitor.backend.name,
            simulated=monitor.simulated,
            hostname=self.hostname,
            version=__version__,
            taken_at=raw.reading.taken_at if raw is not None else None,
            devices=snapshot.device_readings(
                raw.reading if raw is not None else None,
                raw.attempts if raw is not None else (),
                energy,
            ),
            running=snapshot.running_jobs(
                self.telemetry.tracked, monitor.usage, self.station.config.grid_intensity
            ),
            jobs=self._job_counts(),
            placements=tuple(sorted(self.activity.placements.items())),
            oom_recoveries=self.activity.oom_recoveries,
            decisions=self.activity.decision_times(),
            loaders=snapshot.loader_figures(self.loaders.summary()),
            requests=by_op,
            steps=by_step,
        )

    def _job_counts(self) -> tuple[JobCount, ...]:
        """Jobs per state and owner, read again only after a job event (or now and then)."""
        now = self.clock()
        if self._counts_events != self.events.job_events or now - self._counts_at >= (
            JOB_COUNTS_EVERY_S
        ):
            self._counts_events, self._counts_at = self.events.job_events, now
            from gpudesk.metrics.snapshot import job_counts

            self._counts = job_counts(self.store.counts_by_owner(), self._user_name)
        return self._counts

    def _user_name(self, uid: int | None) -> str:
        """A uid's name: as stored with its jobs (NSS may hang), else looked up; once per engine."""
        if uid not in self._names:
            stored = self.store.owner_login(uid) if uid is not None else None
            self._names[uid] = stored or user_name(uid if uid is not None else os.getuid())
        return self._names[uid]
