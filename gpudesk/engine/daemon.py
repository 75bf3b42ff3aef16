"""The engine daemon: one per GPUDESK_HOME.

A single-threaded loop owns the store, the queue and the running attempts. It answers requests on
a zmq ROUTER socket, publishes job events on a PUB socket, notices attempts ending (SIGCHLD for its
own children, polling for attempts it re-adopted after a restart) and calls the placement policy
whenever something changed. Jobs never depend on the daemon being alive: stopping or killing it
leaves them running, and the next daemon re-adopts or settles them.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import queue
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import zmq

from gpudesk import __version__
from gpudesk.engine import protocol, runner
from gpudesk.engine.jobs import (
    PRIORITY_RANGE,
    TERMINAL_STATES,
    JobSpec,
    JobState,
    SpecError,
    check_env,
    check_priority,
)
from gpudesk.engine.loaders import DatasetSpec, LoaderSupervisor
from gpudesk.engine.mig.nvidia_smi import LayoutError, MigError, MigUsageError
from gpudesk.engine.mig.planner import QueuedDemand
from gpudesk.engine.mig.profiles import compute_slices
from gpudesk.engine.mig.station import SETTLE_S as MIG_SETTLE_S
from gpudesk.engine.mig.station import (
    MigApplyRefused,
    apply_on_gpu,
    check_change,
    station_plans,
)
from gpudesk.engine.mps.manager import MpsError, MpsManager
from gpudesk.engine.oom import gpu_oom_line
from gpudesk.engine.placement.demand import (
    DEFAULT_SM_PCT,
    Demand,
    from_hints,
    reservation,
    signature,
)
from gpudesk.engine.placement.policy import (
    GpuState,
    MigSlice,
    Placement,
    StationView,
    Tenant,
    make_policy,
)
from gpudesk.engine.placement.queue import JobQueue
from gpudesk.engine.protocol import ProtocolError
from gpudesk.engine.station import StationConfig, host_cores
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.records import AttemptRecord, JobRecord
from gpudesk.engine.store.schema import GPU_ENERGY_METRIC, UnknownJob
from gpudesk.engine.telemetry.backend import make_backend
from gpudesk.engine.telemetry.energy import AttemptUsage, summarize
from gpudesk.engine.telemetry.monitor import Monitor, RawSample, TrackedAttempt
from gpudesk.engine.telemetry.sampler import SamplerThread
from gpudesk.paths import Home

log = logging.getLogger("gpudesk.engine")

MAX_JOBS_PER_REQUEST = 10_000
DEFAULT_CANCEL_GRACE_S = 10.0
MAX_CANCEL_GRACE_S = 3600.0
ADOPTED_POLL_S = 0.2
IDLE_POLL_S = 1.0
LOCK_RETRY_S = 1.0
RETRY_AFTER_ERROR_S = 2.0
STORE_SAMPLES_EVERY_S = 10.0  # the store keeps means over this window; live views get every sample
SAMPLE_RETENTION_S = 30 * 24 * 3600.0
PRUNE_EVERY_S = 3600.0
MAX_HISTORY_POINTS = 600
MPS_CHECK_S = 10.0  # how often MPS servers are checked for FAULT and drained GPUs
OOM_RETRIES = 2  # attempts an out-of-memory death adds to a job's max_attempts
SM_WINDOW_SAMPLES = 30  # "recent SM activity" for placement: CARMA's 30-sample window
LOADER_CHECK_S = 0.5  # how often dataset producers are checked (restarted, stopped)


class AlreadyRunning(RuntimeError):
    pass


@dataclass
class LiveAttempt:
    attempt: AttemptRecord
    pid: int
    start_time: float | None
    slot: str
    gpus: tuple[int, ...] = ()
    is_child: bool = False  # started by this engine (reaped by it); False when re-adopted
    returncode: int | None = None  # the wrapper's status once reaped
    kill_at: float | None = None  # when to escalate a cancel to SIGKILL


@dataclass(frozen=True)
class JobOutcome:
    """What a job-control action did to one job. `ok` is False only when the action was
    refused (holding a running job, say); a no-op such as holding a held job is ok."""

    message: str
    ok: bool = True


def _state_phrase(job: JobRecord) -> str:
    """ "running", or "already failed" for a finished job: the start of a refusal."""
    return f"already {job.state.value}" if job.state.terminal else job.state.value


def acquire_lock(path: Path, wait_s: float = LOCK_RETRY_S) -> IO[str]:
    """Hold the home's single-instance lock for the life of the process.

    Retries briefly because a client probing whether an engine runs holds it for an instant."""
    handle = open(path, "a+")  # noqa: SIM115 - held until the process exits
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
    def __init__(self, home: Home, store: Store, config: StationConfig) -> None:
        self.home = home
        self.store = store
        self.config = config
        self.policy = make_policy(config.policy)
        self.cores = host_cores()
        self.started_at = time.time()
        self.queue = JobQueue()
        self.live: dict[int, LiveAttempt] = {}  # by attempt id
        self.dirty = True
        self.retry_at: float | None = None  # when to retry after a failed step
        self.stopping = False
        self.handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "ping": self.op_ping,
            "status": self.op_status,
            "submit": self.op_submit,
            "jobs": self.op_jobs,
            "show": self.op_show,
            "cancel": self.op_cancel,
            "hold": self.op_hold,
            "release": self.op_release,
            "priority": self.op_priority,
            "requeue": self.op_requeue,
            "configure": self.op_configure,
            "shutdown": self.op_shutdown,
            "telemetry": self.op_telemetry,
            "datasets": self.op_datasets,
            "mig_plan": self.op_mig_plan,
            "mig_apply": self.op_mig_apply,
        }
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.control = self.ctx.socket(zmq.ROUTER)
        self.events = self.ctx.socket(zmq.PUB)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.samples: queue.SimpleQueue[RawSample] = queue.SimpleQueue()
        self.tracked: tuple[TrackedAttempt, ...] = ()  # read by the sampler thread
        self.monitor = self._make_monitor(config)
        self.sampler: SamplerThread | None = None
        self.lost_gpus: frozenset[int] = frozenset()
        self.overtaken: dict[int, int] = {}  # queued job id -> later jobs started before it
        self.history = store.demand_history()  # command signature -> measured (MiB, SM %, runs)
        self.mps = MpsManager(home.root, command_timeout=2.0)
        self.mps_faults: dict[str, str] = {}  # GPU UUID -> why its MPS server cannot be used
        self.mps_checked_at = time.monotonic()
        self.store_samples_at = time.monotonic() + STORE_SAMPLES_EVERY_S
        self.prune_at = time.monotonic()
        # GPU index -> the monitor's energy count when the store last got an energy point; what
        # it counted since then is "energy today" not yet in the store.
        self.energy_stored_upto_j: dict[int, float] = {}
        self.loaders = LoaderSupervisor(home)
        self.loaders_checked_at = 0.0
        self.dataset_of: dict[int, str] = {}  # running job id -> the dataset it names
        with contextlib.suppress(Exception):  # a bad stored value must not stop the engine
            self.loaders.register(
                [DatasetSpec.from_dict(d) for d in store.setting("datasets") or []]
            )

    # ----------------------------------------------------------- life cycle
    def bind(self) -> None:
        for sock, endpoint in (
            (self.control, self.home.control_endpoint),
            (self.events, self.home.events_endpoint),
        ):
            path = endpoint.removeprefix("ipc://")
            if os.path.exists(path):
                os.unlink(path)  # stale, from a daemon that died; we hold the lock
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_MESSAGE_BYTES)
            sock.bind(endpoint)
            os.chmod(path, 0o600)

    def close(self) -> None:
        self._stop_sampler()
        with contextlib.suppress(Exception):  # best effort: a full disk must not block exit
            self._flush_telemetry(force=True)
        self.monitor.close()
        self.wake_r.close()
        self.wake_w.close()
        for sock, endpoint in (
            (self.control, self.home.control_endpoint),
            (self.events, self.home.events_endpoint),
        ):
            sock.close(linger=0)
            path = endpoint.removeprefix("ipc://")
            if os.path.exists(path):
                os.unlink(path)

    def recover(self) -> None:
        """Re-adopt attempts that are still running, settle those that ended while we were down."""
        adopted = settled = 0
        for attempt in self.store.live_attempts():
            pid, start_time = attempt.pid, attempt.pid_started
            if pid is None:  # the last engine died between starting the wrapper and recording it
                pid = runner.read_wrapper_pid(attempt.dir)
                start_time = None
            slot = str(attempt.placement.get("slot", "?"))
            gpus = tuple(int(i) for i in attempt.placement.get("gpus", ()))
            live = LiveAttempt(attempt, pid or 0, start_time, slot, gpus)
            if pid and runner.is_alive(pid, start_time):
                self.live[attempt.id] = live
                adopted += 1
                job = self.store.job(attempt.job_id)
                served = self.loaders.loader_for(job.spec.dataset, job.spec.selection)
                if served:
                    self.dataset_of[job.id] = served
                if job.cancel_requested:
                    left = (job.kill_deadline or 0.0) - time.time()
                    self._terminate(live, max(0.0, left))
            elif pid is None and runner.read_exit(attempt.dir) is None:
                self._requeue_unstarted(attempt)
                settled += 1
            else:
                self.settle(live, returncode=None)
                settled += 1
        self.queue = JobQueue(self.store.queued())
        self._track()
        if adopted or settled:
            message = f"re-adopted {adopted} running attempt(s), settled {settled}"
            log.info(message)
            self.store.add_event("engine", message)

    def _requeue_unstarted(self, attempt: AttemptRecord) -> None:
        message = "the engine stopped before this attempt started; back in the queue"
        self.store.finish_attempt(
            attempt,
            attempt_state="launch_failed",
            job_state=JobState.QUEUED,
            message=message,
            exit_code=None,
        )
        self.publish_job(attempt.job_id, message)

    def run(self) -> None:
        wake_r = self.wake_r
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop_signal)
        signal.signal(signal.SIGINT, self._stop_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        poller = zmq.Poller()
        poller.register(self.control, zmq.POLLIN)
        poller.register(wake_r.fileno(), zmq.POLLIN)
        self._start_sampler()
        log.info(
            "engine %s ready (pid %d, station %s, GPU backend %s)",
            __version__,
            os.getpid(),
            json.dumps(self.config.to_dict()),
            self.monitor.backend.name,
        )
        while not self.stopping:
            ready = dict(poller.poll(self._poll_timeout_ms()))
            if wake_r.fileno() in ready:
                try:
                    while wake_r.recv(4096):
                        pass
                except BlockingIOError:
                    pass
            if self.control in ready:
                self._serve_requests()
            # A failing step (a full disk, say) is logged and retried; it never stops the engine,
            # which would strand the jobs it watches.
            for step in (
                self.check_attempts,
                self._schedule_if_due,
                self.ingest_samples,
                self.check_mps,
                self.check_loaders,
            ):
                try:
                    step()
                except Exception:
                    log.exception("engine step failed; retrying in %g s", RETRY_AFTER_ERROR_S)
                    self.retry_at = time.monotonic() + RETRY_AFTER_ERROR_S
        log.info("engine stopping; %d attempt(s) keep running", len(self.live))
        # Producers of running jobs keep serving them (the next engine adopts them); one that
        # no running job reads would outlive every engine, so it goes now.
        with contextlib.suppress(Exception):
            self.loaders.stop_all_but(set(self.dataset_of.values()), "the engine stopped")
        signal.set_wakeup_fd(-1)

    def _stop_signal(self, signum: int, _frame: Any) -> None:
        log.info("received %s", signal.Signals(signum).name)
        self.stopping = True

    def _schedule_if_due(self) -> None:
        if self.dirty or (self.retry_at is not None and time.monotonic() >= self.retry_at):
            self.retry_at = None
            self.schedule()

    def _poll_timeout_ms(self) -> int:
        timeout = IDLE_POLL_S
        now = time.monotonic()
        if self.retry_at is not None:
            timeout = min(timeout, max(0.0, self.retry_at - now))
        for live in self.live.values():
            if not live.is_child:
                timeout = min(timeout, ADOPTED_POLL_S)
            if live.kill_at is not None:
                timeout = min(timeout, max(0.0, live.kill_at - now))
        if self.loaders.producers:
            timeout = min(timeout, LOADER_CHECK_S)
        if self.dirty:
            timeout = 0.0
        return int(timeout * 1000)

    # -------------------------------------------------------------- requests
    def _serve_requests(self) -> None:
        while True:
            try:
                frames = self.control.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) < 2:
                continue  # nothing we could address a reply to
            identity, envelope, raw = frames[0], frames[1:-1], frames[-1]
            reply = self.handle(raw)
            try:
                self.control.send_multipart([identity, *envelope, reply], zmq.NOBLOCK)
            except zmq.ZMQError as exc:
                log.warning("could not reply to a client: %s", exc)

    def handle(self, raw: bytes) -> bytes:
        request_id = None
        try:
            request = protocol.decode_request(raw)
            request_id = request.id
            handler = self.handlers.get(request.op)
            if handler is None:
                raise ProtocolError(
                    protocol.UNKNOWN_OP,
                    f"unknown operation {request.op!r}; known: {', '.join(sorted(self.handlers))}",
                )
            return protocol.encode_result(request_id, handler(request.args))
        except ProtocolError as exc:
            return protocol.encode_error(exc.request_id or request_id, exc.code, exc.message)
        except UnknownJob as exc:
            return protocol.encode_error(request_id, protocol.UNKNOWN_JOB, str(exc))
        except Exception as exc:
            log.exception("request failed")
            return protocol.encode_error(
                request_id, protocol.INTERNAL, f"the engine failed on this request: {exc}"
            )

    def op_ping(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {"pid": os.getpid(), "version": __version__, "protocol": protocol.PROTOCOL_VERSION}

    def op_status(self, args: dict[str, Any]) -> dict[str, Any]:
        if args.get("fresh_loaders") and self.loaders.producers:
            self.loaders.refresh_status()
        view = self.station_view()
        return {
            "pid": os.getpid(),
            "version": __version__,
            "protocol": protocol.PROTOCOL_VERSION,
            "home": str(self.home.root),
            "started_at": self.started_at,
            "station": {
                **self.config.to_dict(),
                "effective_backend": self.monitor.backend.name,
                "simulated": self.monitor.simulated,
                "gpu_problem": view.gpu_problem,
                "effective_slots": self.config.effective_slots,
                "cores": self.cores,
                "gpus": view.gpu_count,
                "mps": {"available": self.mps.available, "faults": dict(self.mps_faults)},
            },
            "slots": {"total": len(view.slots), "busy": len(view.busy_slots)},
            "gpus": {
                "total": view.gpu_count,
                "busy": len(view.busy_gpus),
                "lost": len(view.lost_gpus),
            },
            "counts": self.store.counts(),
            "loaders": self.loaders.summary(),
        }

    def op_submit(self, args: dict[str, Any]) -> dict[str, Any]:
        raw_jobs = args.get("jobs")
        if not isinstance(raw_jobs, list) or not raw_jobs:
            raise ProtocolError(protocol.INVALID_ARGS, "'jobs' must be a non-empty list")
        if len(raw_jobs) > MAX_JOBS_PER_REQUEST:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"at most {MAX_JOBS_PER_REQUEST} jobs per request, found {len(raw_jobs)}",
            )
        specs: list[JobSpec] = []
        for index, raw in enumerate(raw_jobs):
            try:
                specs.append(JobSpec.from_dict(raw))
            except SpecError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"jobs[{index}].{exc}") from None
        base_env = args.get("env")
        if base_env is not None:
            try:
                base_env = check_env(base_env)
            except ValueError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"env: {exc}") from None
        records = self.store.submit(specs, base_env)
        for record in records:
            self.queue.add(record)
            self.publish_job(record.id, "submitted", record)
        self.dirty = True
        return {"ids": [r.id for r in records]}

    def op_jobs(self, args: dict[str, Any]) -> dict[str, Any]:
        states = None
        if args.get("states") is not None:
            try:
                states = [JobState(s) for s in args["states"]]
            except (TypeError, ValueError):
                raise ProtocolError(
                    protocol.INVALID_ARGS,
                    f"'states' must list states among {', '.join(s.value for s in JobState)}",
                ) from None
        group = args.get("group")
        if group is not None and not isinstance(group, str):
            raise ProtocolError(protocol.INVALID_ARGS, "'group' must be a string")
        ids = args.get("ids")
        if ids is not None and (
            not isinstance(ids, list) or not all(isinstance(i, int) for i in ids)
        ):
            raise ProtocolError(protocol.INVALID_ARGS, "'ids' must be a list of job ids")
        limit = args.get("limit")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ProtocolError(protocol.INVALID_ARGS, "'limit' must be a positive integer")
        jobs = self.store.jobs(states=states, group=group, ids=ids, limit=limit)
        live_by_job = self._live_by_job()
        result = [self.job_dict(job, live_by_job) for job in jobs]
        if args.get("usage"):
            usage = self.job_usage([job.id for job in jobs])
            for data in result:
                data["usage"] = usage.get(data["id"])
        return {"jobs": result}

    def op_show(self, args: dict[str, Any]) -> dict[str, Any]:
        job = self.resolve(args.get("job"))
        result: dict[str, Any] = {
            "job": self.job_dict(job),
            "attempts": [a.to_dict() for a in self.store.attempts(job.id)],
            "events": [e.to_dict() for e in self.store.events(job.id)],
            "waiting": None,
            "usage": self.job_usage([job.id]).get(job.id),
        }
        if job.state is JobState.QUEUED and job.held:
            result["waiting"] = f"held: it will not start until released (gpudesk release {job.id})"
        elif job.state is JobState.QUEUED:
            queue = self.queue.placeable()
            result["waiting"] = self.policy.explain_wait(job, queue, self.station_view())
        if args.get("env"):
            result["env"] = {**self.store.base_env(job.id), **job.spec.env}
        return result

    def act_on_jobs(
        self,
        args: dict[str, Any],
        action: Callable[[JobRecord], JobOutcome],
        *,
        can_refuse: bool = True,
    ) -> dict[str, Any]:
        """The shape of every job-control op: resolve all of `args["jobs"]` (ids or names)
        first, so one unknown job fails the request with none touched, then act on each job
        once, in the order given. Returns {"results": [{"id", "name", "outcome", "ok"}]};
        "ok" only for an op that `can_refuse` a job (cancel never does)."""
        refs = args.get("jobs")
        if not isinstance(refs, list) or not refs:
            raise ProtocolError(protocol.INVALID_ARGS, "'jobs' must be a non-empty list")
        if len(refs) > MAX_JOBS_PER_REQUEST:
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"at most {MAX_JOBS_PER_REQUEST} jobs per request, found {len(refs)}",
            )
        jobs: dict[int, JobRecord] = {}
        for ref in refs:
            job = self.resolve(ref)
            jobs.setdefault(job.id, job)
        results = []
        for job in jobs.values():
            outcome = action(job)
            result = {"id": job.id, "name": job.name, "outcome": outcome.message}
            if can_refuse:
                result["ok"] = outcome.ok
            results.append(result)
        return {"results": results}

    def op_cancel(self, args: dict[str, Any]) -> dict[str, Any]:
        grace = args.get("grace", DEFAULT_CANCEL_GRACE_S)
        if (
            isinstance(grace, bool)
            or not isinstance(grace, (int, float))
            or not 0 <= grace <= MAX_CANCEL_GRACE_S
        ):
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'grace' must be 0 to {MAX_CANCEL_GRACE_S:g} seconds"
            )
        return self.act_on_jobs(
            args, lambda job: JobOutcome(self.cancel(job, grace)), can_refuse=False
        )

    def op_hold(self, args: dict[str, Any]) -> dict[str, Any]:
        """{"jobs": [refs]}: hold queued jobs. The placement policy never starts a held job; it
        keeps its place in the queue. Outcomes: "held", "already held", or (ok false) why
        not, e.g. "running: only a queued job can be held"."""
        return self.act_on_jobs(args, self.hold)

    def op_release(self, args: dict[str, Any]) -> dict[str, Any]:
        """{"jobs": [refs]}: release held jobs. Outcomes: "released", "not held" (also for a
        job that is not queued, e.g. "not held (running)")."""
        return self.act_on_jobs(args, self.release)

    def op_priority(self, args: dict[str, Any]) -> dict[str, Any]:
        """{"jobs": [refs], "priority": int} sets the priority (submit's range), or
        {"jobs": [refs], "delta": int} moves it (+1 raises, -1 lowers; kept in the range).
        A queued job moves in the queue at once; a running or finished one keeps the new
        priority for a retry or a requeue, and its outcome says it changes nothing now."""
        priority, delta = args.get("priority"), args.get("delta")
        if (priority is None) == (delta is None):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "give either 'priority' (the new value) "
                "or 'delta' (+1 raises, -1 lowers), not both",
            )
        if priority is not None:
            try:
                wanted = check_priority(priority)
            except ValueError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, f"'priority': {exc}") from None
            return self.act_on_jobs(args, lambda job: self.set_priority(job, wanted))
        low, high = PRIORITY_RANGE
        if (
            isinstance(delta, bool)
            or not isinstance(delta, int)
            or not -(high - low) <= delta <= high - low
        ):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                f"'delta' must be a whole number from {low - high} to {high - low}, e.g. 1 or -1",
            )
        return self.act_on_jobs(
            args, lambda job: self.set_priority(job, min(high, max(low, job.spec.priority + delta)))
        )

    def op_requeue(self, args: dict[str, Any]) -> dict[str, Any]:
        """{"jobs": [refs]}: put finished jobs (failed, cancelled, or succeeded to rerun them)
        back in the queue as the same job, with a fresh attempt budget; attempt numbers
        continue. Outcomes: "requeued", "already queued", or (ok false)
        "running: only a finished job can be requeued"."""
        return self.act_on_jobs(args, self.requeue)

    def op_configure(self, args: dict[str, Any]) -> dict[str, Any]:
        try:
            config = StationConfig.from_dict(args.get("station") or {})
            config = config.with_env_override()
            policy = make_policy(config.policy)
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None
        changed = config != self.config
        if changed:
            log.info("station reconfigured: %s -> %s", self.config.to_dict(), config.to_dict())
            self.store.add_event("engine", f"station reconfigured: {json.dumps(config.to_dict())}")
            keys = ("backend", "sample_interval", "grid_intensity", "mig")
            telemetry_changed = any(getattr(config, k) != getattr(self.config, k) for k in keys)
            self.config, self.policy = config, policy
            self.store.set_setting("station", config.to_dict())
            if telemetry_changed:
                self._restart_telemetry()
            self.dirty = True
        return {"station": config.to_dict(), "changed": changed}

    def op_datasets(self, args: dict[str, Any]) -> dict[str, Any]:
        """Register datasets' shared-loader settings (a profile's [datasets] tables); an empty
        list only lists the registered ones."""
        raw = args.get("datasets")
        if not isinstance(raw, list):
            raise ProtocolError(protocol.INVALID_ARGS, "'datasets' must be a list")
        try:
            specs = [DatasetSpec.from_dict(d) for d in raw]
            self.loaders.register(specs)
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, f"datasets: {exc}") from None
        self.store.set_setting("datasets", [s.to_dict() for s in self.loaders.specs.values()])
        return {
            "datasets": sorted(self.loaders.specs),
            "specs": [s.to_dict() for _, s in sorted(self.loaders.specs.items())],
        }

    # ------------------------------------------------------------------- MIG
    def op_mig_plan(self, args: dict[str, Any]) -> dict[str, Any]:
        """{"gpu": int | null}: the MIG plan of one or every MIG-capable GPU (MigPlan.to_dict):
        the layout the queue would want, the job each slice is for, the nvidia-smi commands
        applying it would run, and whether the engine may apply it, or why not."""
        gpu = _mig_gpu_arg(args, required=False)
        try:
            plans = station_plans(
                self.monitor.backend,
                self._mig_queue(),
                self._running_by_gpu(),
                repartition_allowed=self.config.mig_repartition,
                gpu=gpu,
            )
        except MigError as exc:
            raise _mig_protocol_error(exc) from None
        return {"plans": [p.to_dict() for p in plans], "simulated": self.monitor.simulated}

    def op_mig_apply(self, args: dict[str, Any]) -> dict[str, Any]:
        """{"gpu": int, "profiles": [str, ...], "confirm": true}: give an idle MIG-mode GPU this
        layout, destroying its instances, only where [station] mig_repartition allows it and
        only with confirm. A simulated station's `mig` table changes (telemetry and placement
        see the new slices); a real GPU is repartitioned through nvidia-smi. The queue is not
        touched. Never enables MIG mode or resets a GPU."""
        gpu = _mig_gpu_arg(args, required=True)
        assert gpu is not None
        profiles = args.get("profiles")
        if (
            not isinstance(profiles, list)
            or not profiles
            or not all(isinstance(p, str) and p.strip() for p in profiles)
        ):
            raise ProtocolError(
                protocol.INVALID_ARGS,
                "'profiles' must be a non-empty list of "
                'MIG profile names, e.g. ["3g.20gb", "2g.10gb"]',
            )
        confirm = args.get("confirm", False)
        if not isinstance(confirm, bool):
            raise ProtocolError(protocol.INVALID_ARGS, "'confirm' must be true or false")
        try:
            change, _ = check_change(
                self.monitor.backend,
                gpu,
                profiles,
                self._running_by_gpu(),
                repartition_allowed=self.config.mig_repartition,
            )
        except MigError as exc:
            raise _mig_protocol_error(exc) from None
        previous = list(change.gpu.current)
        result = {
            "gpu": gpu,
            "previous": previous,
            "profiles": list(change.profiles),
            "commands": list(change.commands),
            "mig_devices": [],
            "simulated": self.monitor.simulated,
        }
        if change.unchanged:
            return {
                **result,
                "applied": False,
                "message": f"GPU {gpu} already has this layout; nothing was changed",
            }
        if not confirm:
            raise ProtocolError(
                protocol.REFUSED,
                f"not confirmed: applying destroys GPU {gpu}'s MIG instances "
                f"({', '.join(previous) or 'none'}) and creates "
                f"{', '.join(change.profiles)}; send confirm: true to apply it",
            )
        started = time.time()
        if self.monitor.simulated:
            self._set_simulated_mig_layout(gpu, change.profiles)
        else:
            try:
                result["mig_devices"] = [s.to_dict() for s in apply_on_gpu(change)]
            except MigError as exc:
                self.store.add_event("mig", f"MIG layout of GPU {gpu} not applied: {exc}")
                raise _mig_protocol_error(exc) from None
        message = (
            f"MIG layout of GPU {gpu} applied: {', '.join(change.profiles)} (was "
            f"{', '.join(previous) or 'no instances'})"
            + (" [SIMULATED]" if self.monitor.simulated else "")
        )
        log.info(message)
        self.store.add_event("mig", message)
        self.dirty = True
        self._await_sample_after(started, MIG_SETTLE_S)
        return {**result, "applied": True, "message": message}

    def _set_simulated_mig_layout(self, gpu: int, profiles: tuple[str, ...]) -> None:
        """A simulated GPU's new layout: the station's `mig` table changes as a reconfigure
        would change it, and telemetry restarts on it."""
        layout = {**(self.config.mig or {}), str(gpu): ",".join(profiles)}
        try:
            config = StationConfig.from_dict({**self.config.to_dict(), "mig": layout})
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None
        self.config = config
        self.store.set_setting("station", config.to_dict())
        self._restart_telemetry()

    def _await_sample_after(self, after: float, timeout: float) -> None:
        """Ingest samples until one taken after `after` (time.time()) is in, for at most
        `timeout` s: placement must see a changed MIG layout before it places a job on it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ingest_samples()
            latest = self.monitor.latest
            if latest is not None and latest["taken_at"] >= after:
                return
            time.sleep(0.01)

    def _mig_queue(self) -> list[QueuedDemand]:
        """The queued single-GPU jobs a MIG slice could take, in placement order, held ones
        included (hold a sweep, repartition for it, release it). A job that must run alone
        (after an out-of-memory death) is left to whole GPUs."""
        queued = []
        for job in self.queue.ordered():
            if job.spec.gpus != 1:
                continue
            demand = self.demand(job)
            if not demand.exclusive:
                queued.append(
                    QueuedDemand(job.id, job.name, demand.memory_mib, demand.sm_pct, job.held)
                )
        return queued

    def _running_by_gpu(self) -> dict[int, tuple[int, ...]]:
        """GPU index -> the jobs running on it (whole, shared or on one of its MIG slices)."""
        running: dict[int, list[int]] = {}
        for live in self.live.values():
            for index in live.gpus:
                running.setdefault(index, []).append(live.attempt.job_id)
        return {index: tuple(sorted(ids)) for index, ids in running.items()}

    def check_loaders(self) -> None:
        """Start, restart and stop dataset producers as the jobs need them."""
        now = time.monotonic()
        if now - self.loaders_checked_at < LOADER_CHECK_S:
            return
        self.loaders_checked_at = now
        if not self.loaders.specs and not self.loaders.producers:
            return  # no [datasets] registered: nothing to start, and no queue scan every 0.5 s
        running = set(self.dataset_of.values())
        needed = running | {
            served
            for j in self.queue.placeable()
            if (served := self.loaders.loader_for(j.spec.dataset, j.spec.selection))
        }
        if not needed and not self.loaders.producers:
            return
        self.loaders.tick(needed, running)
        for message in self.loaders.events:
            log.info("%s", message)
            self.store.add_event("engine", message)
        self.loaders.events.clear()

    def op_shutdown(self, _args: dict[str, Any]) -> dict[str, Any]:
        self.stopping = True
        return {"running_attempts": len(self.live)}

    def op_telemetry(self, args: dict[str, Any]) -> dict[str, Any]:
        """The latest station view (None before the first sample) and, on request, the last
        `history` points of each GPU's series.

        `energy_today_j` is {GPU index: joules} (the index a string on the wire, as JSON keys
        are): what each GPU used since local midnight, from the energy points the store keeps
        (one per STORE_SAMPLES_EVERY_S window, so across engine restarts) plus what the monitor
        counted since the last of them. It counts only while an engine samples, and a window
        that spans midnight counts for the new day."""
        points = args.get("history", 0)
        if (
            isinstance(points, bool)
            or not isinstance(points, int)
            or not 0 <= points <= MAX_HISTORY_POINTS
        ):
            raise ProtocolError(
                protocol.INVALID_ARGS, f"'history' must be 0 to {MAX_HISTORY_POINTS} points"
            )
        self.ingest_samples()  # anything the sampler delivered since the loop last looked
        snapshot = self.monitor.latest
        if snapshot is not None:
            snapshot = {**snapshot, "interval_s": self.config.sample_interval}
        history = list(self.monitor.history)[-points:] if points else []
        return {"snapshot": snapshot, "history": history, "energy_today_j": self.energy_today()}

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

    # ------------------------------------------------------------- telemetry
    def _make_monitor(self, config: StationConfig) -> Monitor:
        saved = self.store.setting("idle_power_w")
        monitor = Monitor(
            make_backend(config.backend, mig=config.mig),
            grid_g_per_kwh=config.grid_intensity,
            idle_power_w=saved if isinstance(saved, dict) else None,
        )
        monitor.open()  # the inventory is needed for placement before the first sample
        return monitor

    def _start_sampler(self) -> None:
        self.sampler = SamplerThread(
            self.monitor, self.config.sample_interval, lambda: self.tracked, self._deliver
        )
        self.sampler.start()

    def _stop_sampler(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None

    def _restart_telemetry(self) -> None:
        """A new backend, interval or grid intensity: a fresh monitor, usage carried over."""
        self._stop_sampler()
        self.ingest_samples()
        usage = self.monitor.usage
        unstored = self._energy_not_stored()
        self.monitor.close()
        self.monitor = self._make_monitor(self.config)
        self.monitor.usage.update(usage)
        # The new monitor counts energy from zero: the next stored point carries the old one's.
        self.energy_stored_upto_j = {index: -joules for index, joules in unstored.items()}
        self.lost_gpus = frozenset()
        self._start_sampler()

    def _deliver(self, raw: RawSample) -> None:
        """Called on the sampler thread: queue the sample and wake the loop."""
        self.samples.put(raw)
        with contextlib.suppress(OSError):  # a full wakeup pipe already means "wake up"
            self.wake_w.send(b"s")

    def ingest_samples(self) -> None:
        while True:
            try:
                raw = self.samples.get_nowait()
            except queue.Empty:
                break
            first = self.monitor.latest is None
            view = self.monitor.ingest(raw, running=self.live.keys())
            if first:
                self.dirty = True  # GPU jobs held back until the GPUs were read can go now
            lost = frozenset(g["index"] for g in view["gpus"] if g["lost"])
            if lost != self.lost_gpus:
                for index in sorted(lost - self.lost_gpus):
                    message = f"GPU {index} is lost (fell off the bus); no job is placed on it"
                    log.warning(message)
                    self.store.add_event("gpu", message)
                self.lost_gpus, self.dirty = lost, True
            # NOBLOCK: a slow subscriber must never stall the engine.
            with contextlib.suppress(zmq.ZMQError):
                self.events.send_multipart(protocol.encode_event("telemetry", view), zmq.NOBLOCK)
        self._flush_telemetry()

    def _flush_telemetry(self, force: bool = False) -> None:
        """Write the downsampled series and running attempts' usage to the store."""
        now = time.monotonic()
        if not force and now < self.store_samples_at:
            return
        self.store_samples_at = now + STORE_SAMPLES_EVERY_S
        averages = self.monitor.drain_averages()
        ts = time.time()
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
        self._record_usage(self.monitor.usage.values())
        latest = self.monitor.latest
        if latest:
            idle = {
                g["uuid"]: g["idle_power_w"]
                for g in latest["gpus"]
                if g["uuid"] and g["idle_power_w"] is not None and not self.monitor.simulated
            }
            if idle:
                self.store.set_setting("idle_power_w", idle)
        if now >= self.prune_at:
            self.prune_at = now + PRUNE_EVERY_S
            self.store.prune_samples(ts - SAMPLE_RETENTION_S)

    def _record_usage(self, usages: Iterable[AttemptUsage]) -> None:
        grid = self.config.grid_intensity
        self.store.record_usage([(u.attempt_id, u.job_id, u.to_dict(grid)) for u in usages])

    def job_usage(self, job_ids: list[int]) -> dict[int, dict[str, Any]]:
        """Each job's usage summed over its attempts; a running attempt's figures are live."""
        grid = self.config.grid_intensity
        stored = self.store.usage(job_ids)
        live = {u.attempt_id: u for u in self.monitor.usage.values()}
        numbers = {
            live_attempt.attempt.id: live_attempt.attempt.number
            for live_attempt in self.live.values()
        }
        result = {}
        for job_id in job_ids:
            attempts = {a["attempt"]: a for a in stored.get(job_id, [])}
            for attempt_id, usage in live.items():
                if usage.job_id == job_id and attempt_id in numbers:
                    attempts[numbers[attempt_id]] = {
                        "attempt": numbers[attempt_id],
                        **usage.to_dict(grid),
                    }
            ordered = [attempts[n] for n in sorted(attempts)]
            summary = summarize(ordered, grid)
            if summary is not None:
                result[job_id] = {**summary, "grid_g_per_kwh": grid, "per_attempt": ordered}
        return result

    def _track(self) -> None:
        """Tell the sampler which attempts run where (it reads `self.tracked` on its thread)."""
        tracked = []
        for live in self.live.values():
            job = self.store.job(live.attempt.job_id)
            tracked.append(
                TrackedAttempt(
                    attempt_id=live.attempt.id,
                    job_id=job.id,
                    name=job.name,
                    pgid=live.pid,
                    slot=live.slot,
                    gpus=live.gpus,
                    memory_gb=job.spec.memory_gb,
                    sm_pct=job.spec.sm_pct,
                    started_at=live.attempt.started_at or job.started_at,
                    mig_slice=live.attempt.placement.get("mig_slice"),
                )
            )
        self.tracked = tuple(tracked)

    # ------------------------------------------------------------ job logic
    def resolve(self, ref: Any) -> JobRecord:
        """A job by id (int or digits) or by name (the newest job of that name)."""
        if isinstance(ref, bool) or not isinstance(ref, (int, str)) or ref == "":
            raise ProtocolError(protocol.INVALID_ARGS, "a job is named by its id or its name")
        if isinstance(ref, int) or ref.isdigit():
            return self.store.job(int(ref))
        jobs = self.store.jobs_named(ref)
        if not jobs:
            raise UnknownJob(f"no job with id or name {ref!r}")
        return jobs[-1]

    def _live_by_job(self) -> dict[int, LiveAttempt]:
        return {live.attempt.job_id: live for live in self.live.values()}

    def job_dict(
        self, job: JobRecord, live_by_job: dict[int, LiveAttempt] | None = None
    ) -> dict[str, Any]:
        live = (live_by_job if live_by_job is not None else self._live_by_job()).get(job.id)
        data = job.to_dict()
        data["slot"] = live.slot if live else None
        data["pgid"] = live.pid if live else None  # the attempt's process group, while it runs
        data["log"] = (
            str(self.home.attempt_dir(job.id, job.attempts) / runner.LOG_FILE)
            if job.attempts
            else None
        )
        # the shared loader it reads: its dataset's, or the dataset's variant for its selection
        data["loader"] = self.loaders.loader_for(job.spec.dataset, job.spec.selection)
        return data

    def cancel(self, job: JobRecord, grace: float) -> str:
        if job.state in TERMINAL_STATES:
            return f"already {job.state.value}"
        if job.state is JobState.QUEUED:
            self.queue.remove(job.id)
            self.store.finish_queued(job.id, JobState.CANCELLED, "cancelled while queued")
            self.publish_job(job.id, "cancelled while queued")
            self.dirty = True
            return "cancelled"
        self.store.request_cancel(job.id, grace)
        for live in self.live.values():
            if live.attempt.job_id == job.id:
                self._terminate(live, grace)
        return "stopping"

    def hold(self, job: JobRecord) -> JobOutcome:
        if job.state is not JobState.QUEUED:
            return JobOutcome(f"{_state_phrase(job)}: only a queued job can be held", ok=False)
        if job.held:
            return JobOutcome("already held")
        self._job_changed(self.store.set_held(job.id, True), "held by user")
        return JobOutcome("held")

    def release(self, job: JobRecord) -> JobOutcome:
        if job.state is not JobState.QUEUED:
            return JobOutcome(f"not held ({_state_phrase(job)})")
        if not job.held:
            return JobOutcome("not held")
        self._job_changed(self.store.set_held(job.id, False), "released by user")
        return JobOutcome("released")

    def set_priority(self, job: JobRecord, priority: int) -> JobOutcome:
        old = job.spec.priority
        if priority == old:
            low, high = PRIORITY_RANGE
            limit = " (the highest)" if old == high else " (the lowest)" if old == low else ""
            return JobOutcome(f"priority stays {old}{limit}")
        message = f"priority {old} -> {priority}"
        self._job_changed(self.store.set_priority(job.id, priority), f"{message} by user")
        if job.state is JobState.QUEUED:
            return JobOutcome(message)
        later = "a retry" if job.state is JobState.RUNNING else "a requeue"
        return JobOutcome(
            f"{message}; {_state_phrase(job)}, so it changes nothing now "
            f"(it orders the queue after {later})"
        )

    def requeue(self, job: JobRecord) -> JobOutcome:
        if job.state is JobState.QUEUED:
            return JobOutcome("already queued" + (" (held)" if job.held else ""))
        if job.state is JobState.RUNNING:
            return JobOutcome("running: only a finished job can be requeued", ok=False)
        record = self.store.requeue(job.id)
        self._job_changed(
            record,
            f"requeued by user (was {job.state.value}); attempt "
            f"{record.attempts + 1} next, {record.spec.max_attempts} allowed",
        )
        return JobOutcome("requeued")

    def _job_changed(self, job: JobRecord, message: str) -> None:
        """A user changed a job (its store record and event are written): keep the queue's
        copy current (re-sorted by `add`), tell subscribers, and let the policy look again."""
        if job.state is JobState.QUEUED:
            self.queue.add(job)
        self.publish_job(job.id, message, job)
        self.dirty = True

    def _terminate(self, live: LiveAttempt, grace: float) -> None:
        runner.signal_group(live.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        live.kill_at = deadline if live.kill_at is None else min(live.kill_at, deadline)

    def station_view(self) -> StationView:
        busy = frozenset(live.slot for live in self.live.values() if not live.gpus)
        monitor = self.monitor
        return StationView(
            config=self.config,
            cores=self.cores,
            busy_slots=busy,
            backend=monitor.backend.name,
            gpu_states=self._gpu_states(),
            gpu_problem=None if monitor.opened else monitor.open_problem,
            simulated=monitor.simulated,
            overtaken=self.overtaken,
            demands=self._demands_beyond_hints(),
        )

    def _demands_beyond_hints(self) -> dict[int, Demand]:
        """Queued jobs whose demand is not just their own hints: raised after an OOM, or
        completed by what earlier runs measured. The policy derives every other job's demand
        from its hints itself, so a long queue costs nothing here."""
        return {
            job.id: self.demand(job)
            for job in self.queue.placeable()
            if job.spec.gpus
            and (
                job.demand
                or (self.history and (job.spec.memory_gb is None or job.spec.sm_pct is None))
            )
        }

    def _gpu_states(self) -> tuple[GpuState, ...]:
        """Each GPU as the collocation policies see it: the latest readings, SM activity over
        the last `SM_WINDOW_SAMPLES` samples, and the attempts placed on it."""
        latest = self.monitor.latest
        readings = {g["index"]: g for g in latest["gpus"]} if latest else {}
        recent = list(self.monitor.history)[-SM_WINDOW_SAMPLES:]
        tenants: dict[int, list[Tenant]] = {}
        now = time.monotonic()
        for live in self.live.values():
            placement = live.attempt.placement
            demand = placement.get("demand") or {}
            usage = self.monitor.usage.get(live.attempt.id)
            peak = usage.gpu_memory_peak_mib if usage else None
            settled = (
                now - usage.gpu_memory_peak_at
                if usage and usage.gpu_memory_peak_at is not None
                else None
            )
            per_gpu = peak / max(1, len(live.gpus)) if peak is not None else None
            memory = reservation(float(demand.get("memory_mib", 0.0)), per_gpu, settled)
            for index in live.gpus:
                tenants.setdefault(index, []).append(
                    Tenant(
                        live.attempt.job_id,
                        str(placement.get("mode", "exclusive")),
                        memory,
                        float(demand.get("sm_pct", 0.0)),
                        placement.get("mig_slice"),
                    )
                )
        states = []
        for info in self.monitor.inventory:
            reading = readings.get(info.index, {})
            window = [
                p["sm_activity_pct"]
                for point in recent
                for p in point["gpus"]
                if p["index"] == info.index and p["sm_activity_pct"] is not None
            ]
            held = {t.mig_slice for t in tenants.get(info.index, ()) if t.mig_slice}
            slices = tuple(
                MigSlice(
                    m["uuid"],
                    profile,
                    m["memory_total_mib"] or 0.0,
                    compute_slices(profile),
                    busy=m["uuid"] in held,
                )
                for m in reading.get("mig_devices", ())
                if m["uuid"]
                for profile in [(m["name"] or "").rsplit(" ", 1)[-1]]
            )
            states.append(
                GpuState(
                    index=info.index,
                    uuid=info.uuid,
                    memory_total_mib=info.memory_total_mib
                    or reading.get("memory_total_mib")
                    or 0.0,
                    memory_used_mib=reading.get("memory_used_mib") or 0.0,
                    sm_activity_pct=sum(window) / len(window) if window else None,
                    tenants=tuple(tenants.get(info.index, ())),
                    mig_enabled=bool(reading.get("mig_enabled")),
                    mig_slices=slices,
                    lost=info.index in self.lost_gpus,
                    mps_usable=self._mps_usable(info.uuid),
                )
            )
        return tuple(states)

    # ------------------------------------------------------------------- MPS
    def _gpu_uuid(self, index: int) -> str | None:
        return next((g.uuid for g in self.monitor.inventory if g.index == index), None)

    def _mps_usable(self, uuid: str | None) -> bool:
        # Simulated GPUs have no MPS server to start; their jobs are time-sliced.
        if self.monitor.simulated:
            return True  # a simulated MPS server: placement and load, no daemon
        return bool(uuid) and self.mps.available and uuid not in self.mps_faults

    def _mps_env(self, job: JobRecord, placement: Placement) -> dict[str, str]:
        """Start (or reuse) the GPU's MPS control daemon and give the job its client settings.
        If MPS cannot run there the job is time-sliced instead, and the GPU takes no more MPS
        clients until its server is healthy again."""
        uuid = self._gpu_uuid(placement.gpus[0]) or ""
        try:
            self.mps.ensure(uuid)
            return self.mps.client_env(
                uuid, placement.mps_thread_pct, placement.mps_memory_limit_mib
            )
        except (MpsError, ValueError) as exc:
            self.mps_faults[uuid] = str(exc)
            message = f"MPS is not usable on GPU {placement.gpus[0]} ({exc}); time-sliced instead"
            log.warning(message)
            self.store.add_event("mps", message, job_id=job.id)
            return {}

    def check_mps(self) -> None:
        """Every MPS_CHECK_S: a server in FAULT takes no new clients; a drained GPU's daemon
        is stopped; a GPU whose server recovered takes clients again."""
        now = time.monotonic()
        if now - self.mps_checked_at < MPS_CHECK_S or not self.mps.available:
            return
        self.mps_checked_at = now
        busy = {
            self._gpu_uuid(i)
            for live in self.live.values()
            if live.attempt.placement.get("mode") == "mps"
            for i in live.gpus
        }
        for uuid in self.mps.known_uuids():
            status = self.mps.status(uuid)
            if not status.usable and status.state == "fault":
                if uuid not in self.mps_faults:
                    self.store.add_event(
                        "mps",
                        f"MPS server of {uuid} is in FAULT: "
                        f"{status.message}; new jobs there are time-sliced",
                    )
                self.mps_faults[uuid] = status.message
            elif (status.usable or status.state == "stopped") and self.mps_faults.pop(
                uuid, None
            ) is not None:
                # Healthy again, or stopped: the next MPS client starts a fresh daemon.
                self.store.add_event("mps", f"MPS on {uuid} is usable again ({status.state})")
                self.dirty = True
        try:
            self.mps.stop_idle(u for u in busy if u)
        except MpsError as exc:
            log.warning("stopping idle MPS daemons: %s", exc)

    def schedule(self) -> None:
        self.dirty = False
        if not self.queue:
            return
        jobs = self.queue.placeable()
        if self.monitor.inventory and self.monitor.latest is None:
            # The GPUs are known but not read yet (the engine or its telemetry just started):
            # a MIG GPU would look whole and memory in use would be missed. GPU jobs wait for
            # the first sample, which schedules again.
            jobs = [job for job in jobs if not job.spec.gpus]
        decision = self.policy.place(jobs, self.station_view())
        for job_id, count in decision.overtaken.items():
            self.overtaken[job_id] = self.overtaken.get(job_id, 0) + count
        for rejection in decision.rejections:
            self.queue.remove(rejection.job_id)
            self.store.finish_queued(rejection.job_id, JobState.FAILED, rejection.reason)
            self.publish_job(rejection.job_id, rejection.reason)
        for placement in decision.placements:
            job = self.queue.remove(placement.job_id)
            assert job is not None, f"the policy placed job {placement.job_id}, not queued"
            self.overtaken.pop(job.id, None)
            self.start(job, placement)

    def job_env(
        self, job: JobRecord, placement: Placement, attempt: AttemptRecord
    ) -> dict[str, str]:
        env = self.store.base_env(job.id) or dict(os.environ)
        env.update(job.spec.env)
        for key, value in placement.env_defaults.items():
            env.setdefault(key, value)
        env.update(placement.env)
        env.update(
            {
                "GPUDESK_HOME": str(self.home.root),
                "GPUDESK_JOB_ID": str(job.id),
                "GPUDESK_JOB_NAME": job.name,
                "GPUDESK_ATTEMPT": str(attempt.number),
            }
        )
        return env

    def start(self, job: JobRecord, placement: Placement) -> None:
        try:
            attempt = self.store.start_attempt(job.id, placement.to_dict(), self.home.jobs_dir)
        except Exception:
            self.queue.add(job)  # the transaction rolled back: it is still queued
            raise
        env = self.job_env(job, placement, attempt)
        served = self.loaders.loader_for(job.spec.dataset, job.spec.selection)
        try:
            env.update(self.loaders.job_env(served))
        except OSError as exc:  # the producer could not be started: the job can fall back
            log.warning("could not start the shared loader %r: %s", served, exc)
        if served:
            self.dataset_of[job.id] = served
        if placement.mode == "mps" and not self.monitor.simulated:
            env.update(self._mps_env(job, placement))
        workdir = job.spec.workdir or env.get("HOME") or "/"
        try:
            launched = runner.launch(
                Path(attempt.dir), job.spec.command, job.spec.shell, workdir, env
            )
        except runner.LaunchError as exc:
            self.store.finish_attempt(
                attempt,
                attempt_state="launch_failed",
                job_state=JobState.FAILED,
                message=str(exc),
                exit_code=None,
            )
            self.publish_job(job.id, str(exc))
            return
        self.store.attempt_launched(attempt.id, launched.pid, launched.start_time)
        self.live[attempt.id] = LiveAttempt(
            attempt,
            launched.pid,
            launched.start_time,
            placement.slot,
            placement.gpus,
            is_child=True,
        )
        self._track()
        self.publish_job(job.id, f"attempt {attempt.number} started on {placement.slot}")

    def check_attempts(self) -> None:
        now = time.monotonic()
        for live in list(self.live.values()):
            if live.is_child:
                if live.returncode is None:
                    ended, live.returncode = runner.reap(live.pid)
                else:
                    ended = True  # reaped already; settling it failed last time
                if ended:
                    self.settle(live, live.returncode)
                    continue
            elif not runner.is_alive(live.pid, live.start_time):
                self.settle(live, returncode=None)
                continue
            if live.kill_at is not None and now >= live.kill_at:
                log.info(
                    "attempt %d of job %d ignored SIGTERM; sending SIGKILL",
                    live.attempt.number,
                    live.attempt.job_id,
                )
                runner.signal_group(live.pid, signal.SIGKILL)
                live.kill_at = None

    def settle(self, live: LiveAttempt, returncode: int | None) -> None:
        """Record how an attempt ended and move its job on."""
        attempt = live.attempt
        self.dataset_of.pop(attempt.job_id, None)
        record = runner.read_exit(attempt.dir)
        if record is None and returncode is not None:
            record = runner.describe_returncode(returncode)
        if live.pid:
            leftovers = runner.kill_leftovers(live.pid)
            if leftovers:
                self.store.add_event(
                    "cleanup",
                    f"killed {leftovers} leftover process(es) of attempt {attempt.number}",
                    job_id=attempt.job_id,
                )
        job = self.store.job(attempt.job_id)
        if record is None:
            attempt_state, exit_code, signal_number = "lost", None, None
            outcome = "the job's processes ended while the engine was down and left no exit record"
        else:
            attempt_state, exit_code, signal_number = "exited", record.exit_code, record.signal
            outcome = record.description
        usage = self.monitor.usage.get(attempt.id)
        raised: dict[str, Any] | None = None
        oom = gpu_oom_line(attempt.log_path, exit_code) if job.spec.gpus else None
        if job.cancel_requested and exit_code != 0:
            state, message = JobState.CANCELLED, f"cancelled ({outcome})"
        elif exit_code == 0:
            state, message = JobState.SUCCEEDED, outcome
        elif oom and job.attempts_since_requeue < job.spec.max_attempts + OOM_RETRIES:
            # An out-of-memory death is retried whatever max_attempts says: with more memory
            # and a GPU to itself, so the next attempt cannot die the same way or hurt others.
            demand = self.demand(job).after_oom(usage.gpu_memory_peak_mib if usage else None)
            raised = demand.to_dict()
            state = JobState.QUEUED
            message = (
                f"attempt {attempt.number} ran out of GPU memory ({oom}); back in the "
                f"queue needing {demand.memory_mib / 1024:.1f} GiB on a GPU of its own"
            )
        elif job.attempts_since_requeue < job.spec.max_attempts:
            left = job.spec.max_attempts - job.attempts_since_requeue
            state = JobState.QUEUED
            message = f"attempt {attempt.number} failed ({outcome}); retrying, {left} left"
        else:
            state, message = JobState.FAILED, outcome
        self.store.finish_attempt(
            attempt,
            attempt_state=attempt_state,
            job_state=state,
            message=message,
            exit_code=exit_code,
            signal=signal_number,
            ended_at=record.ended_at if record else None,
            demand=raised,
        )
        if (
            state is JobState.SUCCEEDED
            and usage is not None
            and usage.gpu_memory_peak_mib is not None
        ):
            self._remember_demand(job, usage)
        self.live.pop(attempt.id, None)  # only once the outcome is stored
        self._track()
        usage = self.monitor.finish(attempt.id)
        if usage is not None:
            try:
                self._record_usage([usage])
            except Exception:  # the outcome is stored; losing the last usage figures is not fatal
                log.exception("could not store the usage of attempt %d", attempt.id)
        if state is JobState.QUEUED:
            self.queue.add(self.store.job(job.id))
        self.dirty = True
        self.publish_job(job.id, message)

    def demand(self, job: JobRecord) -> Demand:
        """What a job is assumed to need: raised after an OOM, else its hints completed by what
        earlier runs of the same command measured, else defaults."""
        if job.demand:
            return Demand(
                float(job.demand["memory_mib"]),
                float(job.demand["sm_pct"]),
                str(job.demand.get("source", "after OOM")),
                bool(job.demand.get("exclusive", True)),
            )
        known = self.history.get(signature(job.spec.command, job.spec.workdir))
        history = Demand(known[0], known[1], "history") if known else None
        return from_hints(job.spec.memory_gb, job.spec.sm_pct, history)

    def _remember_demand(self, job: JobRecord, usage: AttemptUsage) -> None:
        key = signature(job.spec.command, job.spec.workdir)
        sm = usage.gpu_sm_mean_pct
        if sm is None:
            sm = job.spec.sm_pct if job.spec.sm_pct is not None else DEFAULT_SM_PCT
        try:
            self.store.record_demand(key, usage.gpu_memory_peak_mib or 0.0, sm)
        except Exception:  # a hint for later runs; never worth failing a settle over
            log.exception("could not record the measured demand of job %d", job.id)
            return
        old = self.history.get(key)
        runs = old[2] if old else 0
        memory = (
            max(old[0], usage.gpu_memory_peak_mib or 0.0)
            if old
            else usage.gpu_memory_peak_mib or 0.0
        )
        mean = (old[1] * runs + sm) / (runs + 1) if old else sm
        self.history[key] = (memory, mean, runs + 1)

    def publish_job(self, job_id: int, message: str, job: JobRecord | None = None) -> None:
        job = job or self.store.job(job_id)
        payload = {
            "ts": time.time(),
            "id": job.id,
            "name": job.name,
            "state": job.state.value,
            "group": job.spec.group,
            "attempts": job.attempts,
            "exit_code": job.exit_code,
            "held": job.held,
            "priority": job.spec.priority,
            "message": message,
        }
        # NOBLOCK: a slow subscriber must never stall the engine; events are in the store too.
        with contextlib.suppress(zmq.ZMQError):
            self.events.send_multipart(protocol.encode_event("job", payload), zmq.NOBLOCK)


def local_midnight(now: float) -> float:
    """The epoch time of the local midnight that began the day `now` falls in."""
    day = time.localtime(now)
    return time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))


def _mig_gpu_arg(args: dict[str, Any], *, required: bool) -> int | None:
    gpu = args.get("gpu")
    if gpu is None and not required:
        return None
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
        raise ProtocolError(
            protocol.INVALID_ARGS,
            "'gpu' must be a GPU index (0, 1, ...)"
            + ("" if required else ", or null for every GPU"),
        )
    return gpu


def _mig_protocol_error(exc: MigError) -> ProtocolError:
    """Refused (config, MIG mode, a busy GPU), a bad request (no such GPU, a layout that does
    not fit), or nvidia-smi failing: each its own code, with MigError's one-paragraph message."""
    if isinstance(exc, MigApplyRefused):
        return ProtocolError(protocol.REFUSED, str(exc))
    if isinstance(exc, (MigUsageError, LayoutError)):
        return ProtocolError(protocol.INVALID_ARGS, str(exc))
    return ProtocolError(protocol.MIG_FAILED, str(exc))


def initial_config(store: Store, requested: StationConfig | None) -> StationConfig:
    """What the client asked for, else what the last engine of this home used, else defaults."""
    if requested is not None:
        config = requested
    else:
        saved = store.setting("station")
        try:
            config = StationConfig.from_dict(saved) if saved else StationConfig()
        except ValueError:
            config = StationConfig()
    return config.with_env_override()


def serve(home: Home, requested: StationConfig | None = None) -> int:
    """Run the engine in this process until stopped. Returns the exit status."""
    home.ensure()
    try:
        lock = acquire_lock(home.lock)
    except AlreadyRunning as exc:
        log.error("%s", exc)
        return 3
    try:
        store = Store.open(home.db)
        try:
            config = initial_config(store, requested)
        except ValueError as exc:
            log.error("%s", exc)
            store.close()
            return 2
        store.set_setting("station", config.to_dict())
        engine = Engine(home, store, config)
        engine.bind()
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
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    home = Home.from_env(args.home)
    requested = None
    if args.station:
        try:
            requested = StationConfig.from_dict(json.loads(args.station))
        except ValueError as exc:
            log.error("bad station config: %s", exc)
            return 2
    try:
        return serve(home, requested)
    except Exception:
        log.exception("the engine stopped on an unexpected error")
        return 1


if __name__ == "__main__":
    sys.exit(main())
