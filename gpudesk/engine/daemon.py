"""The engine daemon: one per GPUDESK_HOME.

A single-threaded loop owns the store, the queue and the running attempts. It answers requests on
its control socket (`control_socket`: a Unix stream socket whose peers the kernel names), sends
job events to the connections that subscribed, notices attempts ending (SIGCHLD for its
own children, polling for attempts it re-adopted after a restart) and calls the placement policy
whenever something changed. Jobs never depend on the daemon being alive: stopping or killing it
leaves them running, and the next daemon re-adopts or settles them.

This module keeps the loop, the single-instance lock, signals and the wiring; the work is done by
collaborators that each own their state (docs/architecture.md, "The engine's collaborators"):
requests (the op table), attempts, job_control, scheduler, telemetry.sink, mps.watch, mig.control
and loaders.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
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
from typing import IO, Any

from gpudesk import __version__, diskspace
from gpudesk.core.datasets import DatasetSpec
from gpudesk.core.identity import Caller, group_id
from gpudesk.core.station import DEFAULT_JOB_MEMORY_FRACTION, StationConfig, host_cores
from gpudesk.core.wire.telemetry import Snapshot
from gpudesk.engine.access import DEFAULT_ADMIN_GROUP, Access
from gpudesk.engine.activity import EngineActivity
from gpudesk.engine.archive import Archiver
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.backends.slurm import SlurmBackend
from gpudesk.engine.control_socket import (
    CannotListen,
    ControlSocket,
    SocketAccess,
    SocketLimits,
)
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.job_control import JobControl
from gpudesk.engine.learning import StationLearning
from gpudesk.engine.loaders import CHECK_EVERY_S, LoaderSupervisor, Statuses
from gpudesk.engine.logcap import LogCap
from gpudesk.engine.loop_timing import LoopTiming
from gpudesk.engine.metrics.exporter import MetricsExporter
from gpudesk.engine.mps_watch import MpsWatch
from gpudesk.engine.offloop import Busy, OffLoop, Pending
from gpudesk.engine.repartition.control import MigControl
from gpudesk.engine.requests import EngineParts, RequestHandlers
from gpudesk.engine.scheduler import Scheduler, mig_candidates
from gpudesk.engine.state import CurrentStation, PlacementDue
from gpudesk.engine.store.damage import damaged_text, is_damage
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.schema import IncompatibleStore, StoreError
from gpudesk.engine.telemetry_sink import TelemetrySink
from gpudesk.engine.tracking.tracker import Tracking
from gpudesk.hw.containment import limits_for
from gpudesk.paths import (
    SYSTEM_GROUP,
    SYSTEM_SOCKET,
    SYSTEM_STATE_DIR,
    Home,
    HomeError,
    open_state_file,
)
from gpudesk.policy.queue import JobQueue

log = logging.getLogger("gpudesk.engine")

# Whose work the engine's own off-loop work counts as (gpudesk.engine.offloop bounds each uid's):
# no user's, as no uid is negative.
ENGINE_WORK_UID = -1
LOADER_STATUS_WORK = "asking the shared loaders for their status"
EXIT_BAD_HOME = 4  # the home's state cannot be used as it is: the log says why and what to do
IDLE_POLL_S = 1.0
LOCK_RETRY_S = 1.0
RETRY_AFTER_ERROR_S = 2.0
FULL_DISK_REPEAT_S = 300.0  # how often a disk that stays full is mentioned again in the log


class AlreadyRunning(RuntimeError):
    pass


def acquire_lock(path: Path, wait_s: float = LOCK_RETRY_S) -> IO[str]:
    """Hold the home's single-instance lock for the life of the process.

    Retries briefly because a client probing whether an engine runs holds it for an instant.
    The file is opened never through a link and only when it is a plain file of this user
    (paths.open_private_file, close-on-exec), so the truncation below cannot reach another file.
    """
    fd = open_state_file(path, os.O_RDWR | os.O_CREAT)
    handle = os.fdopen(fd, "r+")  # held until the process exits
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.seek(0)
                pid = handle.read().strip() or "?"
                handle.close()
                raise AlreadyRunning(
                    f"an engine is already running for this home (pid {pid})"
                ) from None
            time.sleep(0.02)
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


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
    ) -> None:
        self.home = home
        self.store = store
        self.stopping = False
        self.disk_full_said: float | None = None  # when the log last said the disk is full
        # A system engine's socket is for the station's group (0660; its folder 0750): who
        # may connect is the kernel's call, what each caller may do is `access`'s.
        access = access or Access.personal()
        # Who is an admin decides which connections the per-user bounds apply to (none on a
        # personal engine: its callers are all admins).
        self.control = ControlSocket(
            home.control_socket,
            self._handle,
            SocketAccess(0o660, station_group) if home.is_system else SocketAccess(),
            access.is_admin,
            SocketLimits.from_env(),
        )
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.due = PlacementDue()
        self.station = CurrentStation(store, config)
        self.events = EventPublisher(self.control, store)
        self.queue = JobQueue()
        self.activity = EngineActivity()  # what the metrics count: placements, OOMs, decisions
        self.telemetry = TelemetrySink(
            store, self.station, self._wake, self._publish_telemetry, self.due.mark
        )
        self.tracking = Tracking(
            home, store, self.telemetry, lambda: self.attempts.attempt_numbers(), self.due
        )
        self.events.listeners.append(self.tracking.job_changed)
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
        self.attempts = Attempts(
            home,
            store,
            self.queue,
            self.loaders,
            self.telemetry,
            self.mps_watch,
            self.events,
            self.due,
            self.tracking,
            self.activity,
            lambda: limits_for(
                self.station.config.job_pids_max,
                self.station.config.job_memory_max_gb,
                DEFAULT_JOB_MEMORY_FRACTION,
            ),
        )
        self.learning = StationLearning(store, self.attempts, self.telemetry)
        self.logcap = LogCap(
            lambda: self.station.config,
            lambda: [a.attempt.log_path for a in self.attempts],
            self.attempts.take_settled_logs,
        )
        self.mig = MigControl(
            self.station,
            store,
            self.telemetry,
            lambda: mig_candidates(self.queue, self.attempts),
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
        self.slurm = SlurmBackend(home, store, self.events, self.due, self._wake)
        self.archiver = Archiver(store, lambda: self.station.config)
        self.job_control = JobControl(
            store, self.queue, self.attempts, self.events, self.due, self.slurm
        )
        self.offloop = OffLoop(self._wake)
        self.loaders.offload = self._offload_loader_status
        self.handlers = RequestHandlers(
            EngineParts(
                home=home,
                store=store,
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
        self.offloop.close()
        self.metrics.close()
        self.attempts.containment.close()
        self.telemetry.close()
        self.wake_r.close()
        self.wake_w.close()
        self.control.close()

    def _publish_telemetry(self, snapshot: Snapshot) -> None:
        self.events.telemetry(snapshot)
        self.tracking.sample(self.telemetry.monitor.latest or {})  # the view it was made from

    def _handle(self, raw: bytes, caller: Caller) -> bytes | Pending:
        return self.handlers.handle(raw, caller)

    def recover(self) -> None:
        """Re-adopt attempts that are still running, settle those that ended while we were down."""
        adopted, settled = self.attempts.recover()
        self.queue.replace(self.store.queued())
        self.attempts.track()
        self.tracking.recover()
        if adopted or settled:
            message = f"re-adopted {adopted} running attempt(s), settled {settled}"
            log.info(message)
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
        log.info("engine stopping; %d attempt(s) keep running", len(self.attempts))
        # Producers of running jobs keep serving them (the next engine adopts them); one that
        # no running job reads would outlive every engine, so it goes now.
        with contextlib.suppress(Exception):
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
            ("mps", self.check_mps),
            ("loaders", self.check_loaders),
            ("logcap", self.logcap.check),
            ("archive", self.archiver.step),
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
                log.info("the disk holding GPUDESK_HOME has space again; carrying on")
                self.disk_full_said = None

    def _stop_signal(self, signum: int, _frame: Any) -> None:
        log.info("received %s", signal.Signals(signum).name)
        self.stopping = True

    def _poll_timeout_ms(self) -> int:
        timeout = IDLE_POLL_S
        retry_at = self.scheduler.retry_at
        if retry_at is not None:
            timeout = min(timeout, max(0.0, retry_at - time.monotonic()))
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

    def _offload_loader_status(
        self,
        work: Callable[[], Statuses],
        done: Callable[[Statuses | None], None],
        bound_s: float,
    ) -> None:
        """Asking the shared loaders for their status (the periodic ask, and a stopping
        producer's final figures), off the loop: a producer that does not answer made the loop
        wait up to a second each time."""

        def settled(result: Statuses | None, error: BaseException | None) -> None:
            if error is not None:
                log.warning("asking the shared loaders for their status: %s", error)
            done(result if error is None else None)

        try:
            self.offloop.submit(ENGINE_WORK_UID, LOADER_STATUS_WORK, work, settled, bound_s)
        except Busy:
            done(None)

    def check_loaders(self) -> None:
        """Start, restart and stop dataset producers as the jobs need them."""
        messages = self.loaders.supervise(
            set(self.attempts.dataset_of.values()),
            lambda: [(j.spec.dataset, j.spec.selection) for j in self.queue.placeable()],
        )
        for message in messages:
            log.info("%s", message)
            self.store.add_event("engine", message)


def initial_config(store: Store, requested: Mapping[str, Any] | None) -> StationConfig:
    """What the last engine of this home used (else defaults) with the settings the client
    asked for laid over it: only the keys `requested` names change."""
    config = saved_config(store.setting("station"))
    if requested:
        asked = StationConfig.from_dict(requested)
        config = dataclasses.replace(config, **{key: getattr(asked, key) for key in requested})
    return config.with_env_override()


def saved_config(saved: object) -> StationConfig:
    """The station config the last engine saved. A setting this version no longer accepts (a
    grid code dropped from a newer table, say) goes back to its default alone, with a warning
    naming it; the admin's other settings are kept."""
    if not isinstance(saved, dict) or not saved:
        return StationConfig()
    try:
        return StationConfig.from_dict(saved)
    except ValueError:
        pass
    kept: dict[str, object] = {}
    for key, value in saved.items():
        try:
            StationConfig.from_dict({key: value})
        except ValueError as exc:
            log.warning("the saved station setting is not used, its default is: %s", exc)
            continue
        kept[key] = value
    return StationConfig.from_dict(kept)


def job_folders(home: Home) -> list[int]:
    """The ids of the jobs whose folders `jobs/` holds: what the database recorded."""
    try:
        return [int(e.name) for e in os.scandir(home.jobs_dir) if e.name.isdecimal()]
    except OSError:
        return []


def lost_database(home: Home) -> str | None:
    """Why the engine must not start afresh here, or None: a database that is missing or empty
    while `jobs/` holds earlier jobs' folders. Starting would reuse their ids and mix new logs
    into theirs, and say nothing of the jobs it forgot."""
    try:
        size = home.db.stat().st_size
    except FileNotFoundError:
        size = 0
    found = len(job_folders(home)) if not size else 0
    if not found:
        return None
    state = "empty" if home.db.exists() else "missing"
    return (
        f"the gpudesk database {home.db} is {state}, but {home.jobs_dir} holds the folders of "
        f"{found} earlier job(s): the record of those jobs is gone, and starting afresh would "
        "reuse their ids and mix new logs into theirs, so the engine does not start. Restore "
        f"{home.db.name} from a backup if there is one; or keep the old folders and start "
        f"afresh: move them aside (`mv {home.jobs_dir} {home.jobs_dir}.old`) and start again."
    )


def open_store(home: Home) -> Store:
    """The home's database, or HomeError saying in one paragraph why it cannot be used."""
    problem = lost_database(home)
    if problem:
        raise HomeError(problem)
    try:
        store = Store.open(home.db)
    except IncompatibleStore as exc:
        raise HomeError(f"{home.db}: {exc}") from None
    except StoreError as exc:
        if diskspace.is_full(exc, home.root):
            raise  # not damage: `main` says the disk is full, and what to do
        raise HomeError(damaged_text(home.db, home.root, str(exc))) from None
    # A database restored from an older backup must not hand out the ids of the jobs that ran
    # after it was taken: their folders are there.
    store.reserve_job_ids(max(job_folders(home), default=0))
    return store


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
        lock = acquire_lock(home.lock)
    except AlreadyRunning as exc:
        log.error("%s", exc)
        return 3
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
            config = initial_config(store, requested)
        except ValueError as exc:
            log.error("%s", exc)
            store.close()
            return 2
        store.set_setting("station", config.to_dict())
        engine = Engine(home, store, config, access, station_group)
        try:
            engine.bind()
        except CannotListen as exc:  # a file in the socket's place: one paragraph, no traceback
            log.error("%s", exc)
            engine.close()
            store.close()
            return EXIT_BAD_HOME
        try:
            engine.recover()
            engine.run()
        finally:
            engine.close()
            store.close()
    finally:
        lock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
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
        f"settings (a system engine's; its default is {DEFAULT_ADMIN_GROUP})",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    station_group = None
    if args.system:
        home = Home.system(Path(args.socket), Path(args.state_dir))
        station_group = group_id(args.group)
        if station_group is None:
            log.error(
                "--group %s: there is no such group on this system. A system engine serves the "
                "members of one group: create it (`sudo groupadd %s`) and add the station's "
                "users (`sudo usermod -aG %s USER`), or name another with --group.",
                args.group,
                args.group,
                args.group,
            )
            return 2
    else:
        home = Home.from_env(args.home)
    access = None
    admin_group = args.admin_group or (DEFAULT_ADMIN_GROUP if args.system else None)
    if admin_group:
        gid = group_id(admin_group)
        if gid is None and args.admin_group:
            log.error("--admin-group %s: there is no such group on this system", admin_group)
            return 2
        if gid is None:
            log.warning(
                "there is no group %s: only root is an admin of this station (create it and "
                "add the admins: `sudo groupadd %s`, `sudo usermod -aG %s USER`)",
                admin_group,
                admin_group,
                admin_group,
            )
        else:
            access = Access.with_admin_group(gid)
    requested = None
    if args.station:
        try:
            requested = json.loads(args.station)
            StationConfig.from_dict(requested)  # checked here: a bad one is the caller's error
        except ValueError as exc:
            log.error("bad station config: %s", exc)
            return 2
    try:
        return serve(home, requested, access, station_group)
    except Exception as exc:
        if diskspace.is_full(exc, home.root):
            # One paragraph, on stderr (engine.log may be the file that cannot grow); the
            # exit status tells `gpudesk engine start` to say the same without the log.
            log.error("%s", diskspace.start_text(home.root))
            return diskspace.EXIT_DISK_FULL
        if is_damage(exc):
            # damage past the database's header, found by a query after the open (a settings
            # row read at start, a job while recovering): the paragraph of a damaged header
            detail = f"cannot read the gpudesk database {home.db}: {exc}"
            log.error("%s", damaged_text(home.db, home.root, detail))
            return EXIT_BAD_HOME
        log.exception("the engine stopped on an unexpected error")
        return 1


if __name__ == "__main__":
    sys.exit(main())
