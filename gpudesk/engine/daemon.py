"""The engine daemon: one per GPUDESK_HOME.

A single-threaded loop owns the store, the queue and the running attempts. It answers requests on
its control socket (`control_socket`: a Unix stream socket whose peers the kernel names), sends
job events to the connections that subscribed, notices attempts ending (SIGCHLD for its
own children, polling for attempts it re-adopted after a restart) and calls the placement policy
whenever something changed. Jobs never depend on the daemon being alive: stopping or killing it
leaves them running, and the next daemon re-adopts or settles them.

This module keeps the loop, signals and the wiring (the single-instance lock, the database
opened and the starting config are `startup`'s); the work is done by
collaborators that each own their state (docs/architecture.md, "The engine's collaborators"):
requests (the op table), attempts, job_control, scheduler, telemetry.sink, mps.watch, mig.control
and loaders.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpudesk import __version__, diskspace, joblog
from gpudesk.core.datasets import DatasetSpec
from gpudesk.core.identity import Caller, group_id, no_such_group
from gpudesk.core.station import DEFAULT_JOB_MEMORY_FRACTION, StationConfig, host_cores
from gpudesk.core.wire.telemetry import Snapshot
from gpudesk.engine.activity import EngineActivity
from gpudesk.engine.archive import Archiver
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.backends.local import LocalBackend
from gpudesk.engine.backends.slurm import SlurmBackend
from gpudesk.engine.control_socket import CannotListen, ControlSocket, SocketAccess, SocketLimits
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.home_keeper import HomeKeeper
from gpudesk.engine.job_control import Backends, JobControl
from gpudesk.engine.learning import StationLearning
from gpudesk.engine.logcap import LogCap
from gpudesk.engine.offloop import OffLoop, Pending
from gpudesk.engine.requests import EngineParts, RequestHandlers
from gpudesk.engine.scheduler import Scheduler
from gpudesk.engine.services.loaders import CHECK_EVERY_S, LoaderSupervisor
from gpudesk.engine.services.metrics.exporter import MetricsExporter
from gpudesk.engine.services.tracking.tracker import Tracking
from gpudesk.engine.startup import EXIT_BAD_HOME, home_config, open_store, stopped_on
from gpudesk.engine.state import CurrentStation, PlacementDue
from gpudesk.engine.station.mps_watch import MpsWatch
from gpudesk.engine.station.repartition.control import MigControl
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.home_lock import EXIT_ALREADY_RUNNING, AlreadyRunning, EngineLock
from gpudesk.hw.containment import Containment, limits_for
from gpudesk.hw.job_hooks import JobEndHooks
from gpudesk.metrics.loop_timing import LoopTiming
from gpudesk.paths import (
    SYSTEM_ADMIN_GROUP,
    SYSTEM_GROUP,
    SYSTEM_SOCKET,
    SYSTEM_STATE_DIR,
    Home,
    HomeError,
)
from gpudesk.policy.access import Access
from gpudesk.policy.mig_planner import any_whole_gpu, mig_candidates
from gpudesk.policy.queue import JobQueue

log = logging.getLogger("gpudesk.engine")

EXIT_STORE_REPLACED = 1  # a failure to systemd: its next engine opens the file put there
RUNNING_PID = "running_engine_pid"  # the settings key of the pid of the engine that runs
IDLE_POLL_S = 1.0
RETRY_AFTER_ERROR_S = 2.0
FULL_DISK_REPEAT_S = 300.0  # how often a disk that stays full is mentioned again in the log


class Engine:
    """The loop and the wiring: it builds the collaborators, hands requests to the handler
    table, and runs each collaborator's periodic step."""

    def __init__(
        self,
        home: Home,
        store: Store,
        config: StationConfig,
        access: Access | None = None,
        station_group: int | None = None,
        *,
        lock: EngineLock,
        containment: Containment | None = None,
    ) -> None:
        self.home = home
        self.store = store
        self.containment = containment or Containment.probe(home.root)
        log.info("job containment: %s", self.containment.describe())
        self.stopping, self.signal = False, ""  # stopped by a signal: " on SIGTERM"
        self.disk_full_said: float | None = None  # when the log last said the disk is full
        access = access or Access.personal()
        self._build_door(config, access, station_group)
        self._build_station()
        self._build_jobs()
        self._build_services()
        self.handlers = RequestHandlers(self._parts(access))
        logs = self.logcap.engine_log
        self.keeper = HomeKeeper(home, lock, store, self.control, self.attempts, logs)

    # ---------------------------------------------------------------- wiring
    # Built in the order they need each other: the door and the shared state, what watches the
    # station, what runs and places jobs, then what is served beside them.
    def _build_door(self, config: StationConfig, access: Access, station_group: int | None) -> None:
        """The control socket, the wake-up pipe, and the small states everyone shares."""
        # A system engine's socket is for the station's group (0660; its folder 0750): who
        # may connect is the kernel's call, what each caller may do is `access`'s.
        # Who is an admin decides which connections the per-user bounds apply to (none on a
        # personal engine: its callers are all admins).
        self.control = ControlSocket(
            self.home.control_socket,
            self._handle,
            SocketAccess(0o660, station_group) if self.home.is_system else SocketAccess(),
            access.is_admin,
            SocketLimits.from_env(),
        )
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.due = PlacementDue()
        self.station = CurrentStation(self.store, config)
        self.events = EventPublisher(self.control, self.store)
        self.queue = JobQueue()
        self.activity = EngineActivity()  # what the metrics count: placements, OOMs, decisions

    def _build_station(self) -> None:
        """What watches the station: telemetry, MLflow tracking of its samples, MPS, loaders."""
        home, store = self.home, self.store
        self.telemetry = TelemetrySink(
            store, self.station, self._wake, self._publish_telemetry, self.due.mark
        )
        self.tracking = Tracking(
            home, store, self.telemetry, lambda: self.attempts.attempt_numbers(), self.due
        )
        self.events.listeners.append(self.tracking.job_changed)
        # hooks.toml: the station's job-end hook, read again when it changes
        self.hooks = JobEndHooks.at(home.root, home.is_system, self._wake)
        self.events.listeners.append(self.hooks.job_changed)  # runs them off the loop
        self.mps_watch = MpsWatch(
            home.root,
            store,
            lambda: self.telemetry.monitor,
            self.due.mark,
            shared=home.is_system,
        )
        self.loaders = LoaderSupervisor(home)
        with contextlib.suppress(Exception):  # a bad stored value must not stop the engine
            self.loaders.register(
                [DatasetSpec.from_dict(d) for d in store.setting("datasets") or []]
            )

    def _build_jobs(self) -> None:
        """What runs and places jobs: attempts, learning, log caps, MIG control, scheduling."""
        store = self.store
        self.attempts = Attempts(
            self.home,
            store,
            self.queue,
            self.loaders,
            self.telemetry,
            self.mps_watch,
            self.events,
            self.due,
            self.tracking,
            self.containment,
            self.activity,
            lambda: limits_for(
                self.station.config.job_pids_max,
                self.station.config.job_memory_max_gb,
                DEFAULT_JOB_MEMORY_FRACTION,
            ),
            self.control.access.group,
        )
        self.learning = StationLearning(store, self.attempts, self.telemetry)
        self.logcap = LogCap(
            lambda: self.station.config,
            lambda: [a.attempt.log_path for a in self.attempts],
            self.attempts.take_settled_logs,
            joblog.written_by_stdout(self.home.engine_log),
        )
        self.mig = MigControl(
            self.station,
            store,
            self.telemetry,
            lambda: mig_candidates(
                self.queue,
                self.attempts.demands,
                any_whole_gpu(self.scheduler.station_view(queued_demands=False).gpu_states),
            ),
            self.attempts.running_by_gpu,
            self.due.mark,
            lambda gpu_model: self.learning.model.params(gpu_model),
        )
        self.scheduler = Scheduler(
            self.station,
            store,
            self.queue,
            self.attempts,
            self.telemetry,
            self.mps_watch,
            self.events,
            self.due,
            host_cores(),
            self.learning,
            self.mig,
            self.tracking,
            self.activity,
        )

    def _build_services(self) -> None:
        """What is served beside the jobs: loop timing, metrics, Slurm, archiving, job
        control, and the work done off the loop."""
        store = self.store
        self.loop_timing = LoopTiming()  # what held the loop: requests, periodic steps
        self.metrics = MetricsExporter(
            self.station,
            store,
            self.telemetry,
            self.loaders,
            self.events,
            self.activity,
            loop=self.loop_timing,
        )
        self.slurm = SlurmBackend(self.home, store, self.events, self.due, self._wake)
        self.archiver = Archiver(store, lambda: self.station.config)
        local = LocalBackend(
            self.home,
            store,
            self.station,
            self.queue,
            self.attempts,
            self.scheduler,
            self.telemetry,
            self.events,
            self.due,
        )
        self.job_control = JobControl(store, Backends.of_engine(local, self.slurm))
        self.offloop = OffLoop(self._wake)
        self.loaders.offload = self.tracking.offload = self._offload_work

    def _parts(self, access: Access) -> EngineParts:
        """The collaborators the request handlers reach."""
        return EngineParts(
            home=self.home,
            store=self.store,
            station=self.station,
            queue=self.queue,
            attempts=self.attempts,
            control=self.job_control,
            scheduler=self.scheduler,
            learning=self.learning,
            telemetry=self.telemetry,
            mps=self.mps_watch,
            mig=self.mig,
            loaders=self.loaders,
            metrics=self.metrics,
            events=self.events,
            due=self.due,
            tracking=self.tracking,
            slurm=self.slurm,
            started_at=time.time(),
            cores=self.scheduler.cores,
            stop=self.stop,
            offloop=self.offloop,
            access=access,
            loop=self.loop_timing,
        )

    # ----------------------------------------------------------- life cycle
    def bind(self) -> None:
        self.control.bind()  # a socket left there is a dead engine's: we hold the lock
        with contextlib.suppress(FileNotFoundError):  # a gpudesk before 0.2 published here
            os.unlink(self.home.socket_dir / "events.sock")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort: a full disk must not block exit
            self.tracking.close()
        self.slurm.close()
        self.hooks.close()  # a hook still running goes with the engine (its process group)
        self.offloop.close()
        self.metrics.close()
        self.attempts.containment.close()
        self.telemetry.close()
        self.wake_r.close()
        self.wake_w.close()
        self.control.close()

    def _publish_telemetry(self, snapshot: Snapshot) -> None:
        self.events.telemetry(snapshot)
        self.tracking.sample(snapshot)

    def _handle(self, raw: bytes, caller: Caller) -> bytes | Pending:
        return self.handlers.handle(raw, caller)

    def recover(self) -> None:
        """Re-adopt attempts that are still running, settle those that ended while we were down."""
        adopted, settled = self.attempts.recover()
        self.store.cancel_cut_short_submissions()
        self.queue.replace(self.store.queued())
        self.attempts.track()
        self.tracking.recover()
        died = self.store.setting(RUNNING_PID)  # an engine's until it stops (`run`'s end)
        self.store.set_setting(RUNNING_PID, os.getpid())
        if adopted or settled or died:
            message = f"re-adopted {adopted} running attempt(s), settled {settled}"
            if died:  # killed: what came of its jobs, and why they had to be taken up
                message = (
                    f"the last engine (pid {died}) ended without stopping (killed, the OOM "
                    f"killer, a crash or the machine going down); {message}"
                )
            (log.warning if died else log.info)(message)
            self.store.add_event("engine", message)

    def stop(self) -> None:
        self.stopping = True

    def _wake(self) -> None:
        """Wake the loop (from the sampler thread)."""
        with contextlib.suppress(OSError):  # a full wakeup pipe already means "wake up"
            self.wake_w.send(b"s")

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        wake_r = self.wake_r
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop_signal)
        signal.signal(signal.SIGINT, self._stop_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.telemetry.start()
        self.metrics.apply()  # [station] metrics_listen: a port in use is logged, not fatal
        log.info(
            "engine %s ready (pid %d, station %s, GPU backend %s)",
            __version__,
            os.getpid(),
            json.dumps(self.station.config.to_dict()),
            self.telemetry.monitor.backend.name,
        )
        while not self.stopping:
            poller = select.poll()
            poller.register(wake_r.fileno(), select.POLLIN)
            self.control.register(poller)
            self.tracking.register(poller)
            ready = dict(poller.poll(self._poll_timeout_ms()))
            if wake_r.fileno() in ready:
                try:
                    while wake_r.recv(4096):
                        pass
                except BlockingIOError:
                    pass
            self.control.serve(ready)
            self.offloop.deliver()  # replies worked out off the loop go out
            self._steps()
        log.info("engine stopping%s; %d attempt(s) keep running", self.signal, len(self.attempts))
        # Producers of running jobs keep serving them (the next engine adopts them); one that
        # no running job reads would outlive every engine, so it goes now.
        with contextlib.suppress(Exception):
            self.store.set_setting(RUNNING_PID, None)  # a stop (`recover`), on a full disk too
            self.loaders.stop_all_but(set(self.attempts.dataset_of.values()), "the engine stopped")
        signal.set_wakeup_fd(-1)

    def _steps(self) -> None:
        # A failing step (a full disk, say) is logged and retried; it never stops the engine,
        # which would strand the jobs it watches.
        full = False
        clock = time.perf_counter
        timed: list[tuple[str, float]] = []  # each step's time: a slow one stalls every client
        for name, step in (
            ("attempts", self.attempts.check),
            ("containment", self.attempts.containment.retry),
            ("schedule", self.scheduler.schedule_if_due),
            ("fairshare", self.scheduler.fair_usage.step),
            ("telemetry", self.telemetry.ingest),
            ("tracking", self.tracking.step),
            ("slurm", self.slurm.step),
            ("metrics", self.metrics.step),
            ("learning", self.learning.step),
            # settled peaks into their command family's history (engine/job_demand.py)
            (
                "family",
                lambda: self.attempts.demands.watch(self.attempts, self.telemetry.monitor.usage),
            ),
            ("mps", self.check_mps),
            ("loaders", self.check_loaders),
            ("logcap", self.logcap.check),
            ("archive", self.archiver.step),
            ("hooks", lambda: self.hooks.drain(self.store.add_event)),  # hooks that ended
            ("home", lambda: self.stop() if self.keeper.step() else None),
        ):
            started = clock()
            try:
                step()
            except Exception as exc:
                if diskspace.is_full(exc, self.home.root):
                    full = True  # said once below, not as a traceback every second
                else:
                    log.exception("engine step failed; retrying in %g s", RETRY_AFTER_ERROR_S)
                self.scheduler.retry_in(RETRY_AFTER_ERROR_S)
            timed.append((name, clock() - started))
        self.loop_timing.turn(timed)
        self._say_disk(full)

    def _say_disk(self, full: bool) -> None:
        """Log a full disk when it starts (and now and then while it lasts), and its end."""
        now = time.monotonic()
        if full:
            if self.disk_full_said is None or now - self.disk_full_said >= FULL_DISK_REPEAT_S:
                log.error("%s", diskspace.running_text(self.home.root))
                self.disk_full_said = now
        elif self.disk_full_said is not None:
            free = diskspace.free_bytes(self.home.root)
            if free is None or free >= diskspace.LOW_BYTES:
                log.info("the disk holding gpudesk's state folder has space again; carrying on")
                self.disk_full_said = None

    def _stop_signal(self, signum: int, _frame: Any) -> None:
        # said by `run`: a log write here may land inside the loop's own (a reentrant call)
        self.stopping, self.signal = True, f" on {signal.Signals(signum).name}"

    def _poll_timeout_ms(self) -> int:
        timeout = self.scheduler.poll_timeout(IDLE_POLL_S)
        timeout = self.attempts.poll_timeout(timeout)
        timeout = self.logcap.poll_timeout(timeout)
        timeout = self.archiver.poll_timeout(timeout)
        timeout = self.tracking.poll_timeout(timeout)
        timeout = self.offloop.poll_timeout(timeout)
        timeout = self.scheduler.fair_usage.poll_timeout(timeout)
        timeout = self.control.poll_timeout(timeout)
        if self.loaders.producers:
            timeout = min(timeout, CHECK_EVERY_S)
        if self.due.pending:
            timeout = 0.0
        return int(timeout * 1000)

    # ------------------------------------------------------ periodic checks
    def check_mps(self) -> None:
        self.mps_watch.check(self.attempts.mps_gpus())

    def _offload_work(
        self, what: str, work: Callable[[], Any], done: Callable[[Any], None], bound_s: float
    ) -> None:
        """The services' work that may wait, off the loop, counted against no user's slow
        requests: asking the shared loaders for their status (one that does not answer made
        the loop wait up to a second each time), or the user database whom a producer or a
        tracking worker runs as."""

        def settled(result: Any, error: BaseException | None) -> None:
            if error is not None:
                log.warning("%s: %s", what, error)
            done(result if error is None else None)

        self.offloop.submit(None, what, work, settled, bound_s)  # uncounted: never Busy

    def check_loaders(self) -> None:
        """Start, restart and stop dataset producers as the jobs need them."""
        messages = self.loaders.supervise(
            set(self.attempts.dataset_of.values()),
            lambda: [(j.spec.dataset, j.spec.selection) for j in self.queue.placeable()],
        )
        for message in messages:
            log.info("%s", message)
            self.store.add_event("engine", message)


def serve(
    home: Home,
    requested: Mapping[str, Any] | None = None,
    access: Access | None = None,
    station_group: int | None = None,
) -> int:
    """Run the engine in this process until stopped. Returns the exit status. A system engine
    (`home.is_system`) serves the members of `station_group`."""
    if home.is_system:
        # Root's files hold every user's environment: none readable by anyone else unless made
        # so on purpose (the socket, the folders owners pass through to their own logs).
        os.umask(0o077)
    try:
        home.ensure(station_group)
        lock = EngineLock.take(home.lock)
        # before the database: an engine that lost its state folder would take one for a backup
        containment = Containment.probe(home.root)
    except AlreadyRunning as exc:
        log.error("%s", exc)
        return EXIT_ALREADY_RUNNING
    except HomeError as exc:  # another user's home, or a link or foreign file in it
        log.error("%s", exc)
        return EXIT_BAD_HOME
    try:
        try:
            store = open_store(home)
        except HomeError as exc:
            log.error("%s", exc)
            return EXIT_BAD_HOME
        try:
            kept = home_config(store, requested)
            config = kept.with_env_override()
        except ValueError as exc:
            log.error("%s", exc)
            store.close()
            return 2
        engine = Engine(
            home, store, config, access, station_group, lock=lock, containment=containment
        )
        # not GPUDESK_BACKEND: this engine's, not the home's
        engine.station.keep(None if kept.backend == config.backend else kept.backend)
        try:
            engine.bind()
        except CannotListen as exc:  # a file in the socket's place: one paragraph, no traceback
            log.error("%s", exc)
            engine.close()
            store.close()
            return EXIT_ALREADY_RUNNING if exc.busy else EXIT_BAD_HOME
        try:
            engine.recover()
            engine.run()
        finally:
            engine.close()
            store.close()
    finally:
        lock.close()
    return EXIT_STORE_REPLACED if store.replaced else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpudesk-engine", description="the gpudesk engine daemon")
    parser.add_argument("--home", help="GPUDESK_HOME (default: environment or XDG state dir)")
    parser.add_argument("--station", help="station config as JSON")
    parser.add_argument(
        "--system",
        action="store_true",
        help="the station's engine (root): jobs run as their owners, the socket serves a group",
    )
    parser.add_argument(
        "--state-dir", default=str(SYSTEM_STATE_DIR), help="a system engine's state"
    )
    parser.add_argument("--socket", default=str(SYSTEM_SOCKET), help="a system engine's socket")
    parser.add_argument(
        "--group", default=SYSTEM_GROUP, help="the group whose members may use a system engine"
    )
    parser.add_argument(
        "--admin-group",
        metavar="NAME",
        help="a group whose members are admins: they act on every job and change station "
        f"settings (a system engine's; its default is {SYSTEM_ADMIN_GROUP})",
    )
    return parser


class BadArguments(Exception):
    """An argument the engine cannot start with; logged, exit status 2."""


def _station_group(args: argparse.Namespace) -> int | None:
    """A system engine's group (whose members it serves); None for a personal engine."""
    if not args.system:
        return None
    gid = group_id(args.group)
    if gid is None:
        log.error("%s", no_such_group("--group", args.group))
        raise BadArguments
    return gid


def _access(args: argparse.Namespace) -> Access | None:
    """Who is an admin: --admin-group's members (a system engine's default group, where it
    exists), else root alone; None for a personal engine without --admin-group."""
    admin_group = args.admin_group or (SYSTEM_ADMIN_GROUP if args.system else None)
    if not admin_group:
        return None
    gid = group_id(admin_group)
    if gid is None and args.admin_group:
        log.error("%s", no_such_group("--admin-group", admin_group))
        raise BadArguments
    if gid is None:
        log.warning(
            "there is no group %s: only root is an admin of this station (create it and "
            "add the admins: `sudo groupadd %s`, `sudo usermod -aG %s USER`)",
            admin_group,
            admin_group,
            admin_group,
        )
        return None
    return Access.with_admin_group(gid)


def _requested(args: argparse.Namespace) -> dict[str, Any] | None:
    """--station's settings, checked here: a bad one is the caller's error."""
    if not args.station:
        return None
    try:
        requested: dict[str, Any] = json.loads(args.station)
        StationConfig.from_dict(requested)
    except ValueError as exc:
        log.error("bad station config: %s", exc)
        raise BadArguments from None
    return requested


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        station_group = _station_group(args)
        if args.system:
            home = Home.system(Path(args.socket), Path(args.state_dir))
        else:
            home = Home.from_env(args.home)
        access = _access(args)
        requested = _requested(args)
    except BadArguments:
        return 2
    try:
        return serve(home, requested, access, station_group)
    except Exception as exc:
        return stopped_on(exc, home)


if __name__ == "__main__":
    sys.exit(main())
