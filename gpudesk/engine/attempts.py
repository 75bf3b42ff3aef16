"""Attempts and their life cycle: starting one where the policy placed its job, noticing it end,
settling how it ended (retries, the out-of-memory retry on a GPU of its own: `policy.retry`
decides), and re-adopting the ones still running after an engine restart (`attempt_recovery`).
What each job is assumed to need is `job_demand`'s.

An attempt runs in its own process session under the wrapper (`runner`), so it outlives the
engine, and in its own cgroup where the engine may make one (`containment`), so that a cancel and
its end reach every process it started. `LiveAttempt` is the engine's handle on a running one."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from gpudesk import diskspace
from gpudesk.core.job_changes import UnsavedEnd
from gpudesk.core.job_variables import with_job_variables
from gpudesk.core.jobs import DEFAULT_CANCEL_GRACE_S, JobState
from gpudesk.core.records import AttemptRecord, JobRecord
from gpudesk.engine import attempt_recovery, faults
from gpudesk.engine.activity import EngineActivity
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.job_demand import JobDemand
from gpudesk.engine.live_attempt import LiveAttempt, ran_past_limit, ran_s
from gpudesk.engine.services.loaders import LoaderSupervisor
from gpudesk.engine.services.tracking.tracker import Tracking
from gpudesk.engine.state import PlacementDue
from gpudesk.engine.station.mps_watch import MpsWatch
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.suspension import Resume
from gpudesk.hw import boottime, runner
from gpudesk.hw.containment import Containment, JobLimits
from gpudesk.hw.telemetry.energy import AttemptUsage
from gpudesk.hw.telemetry.monitor import TrackedAttempt
from gpudesk.joblog.oom import gpu_oom_line
from gpudesk.paths import Home
from gpudesk.policy.policy import RESERVE_MIB, Placement
from gpudesk.policy.queue import JobQueue
from gpudesk.policy.retry import Ending, ending
from gpudesk.text import safe_text

log = logging.getLogger("gpudesk.engine")
STOPPING = "resumed to be stopped"  # a suspended attempt's resume, said when it is stopped

ADOPTED_POLL_S = 0.2  # how often an attempt this engine did not start is checked for its end
# When even recording an attempt as failed cannot be stored (the store refuses every write), it
# is tried again after SETTLE_RETRY_S, doubling up to SETTLE_RETRY_MAX_S: never a busy loop.
SETTLE_RETRY_S = 2.0
SETTLE_RETRY_MAX_S = 60.0


class Attempts:
    def __init__(
        self,
        home: Home,
        store: Store,
        queue: JobQueue,
        loaders: LoaderSupervisor,
        telemetry: TelemetrySink,
        mps: MpsWatch,
        events: EventPublisher,
        due: PlacementDue,
        tracking: Tracking,
        containment: Containment,  # the home's, held by the engine (`Containment.probe`)
        activity: EngineActivity | None = None,
        job_limits: Callable[[], JobLimits] = JobLimits,
        station_group: int | None = None,  # a system engine's: its jobs' owners must be in it
    ) -> None:
        self.home, self.station_group = home, station_group
        self.store = store
        self.queue = queue
        self.loaders = loaders
        self.telemetry = telemetry
        self.mps = mps
        self.events = events
        self.due = due
        self.tracking = tracking  # MLflow runs: a tracked job's variables
        self.activity = activity if activity is not None else EngineActivity()
        self.live: dict[int, LiveAttempt] = {}  # by attempt id
        self.dataset_of: dict[int, str] = {}  # running job id -> the dataset it names
        self.demands = JobDemand(store)  # what each job is assumed to need
        self.containment = containment
        self.job_limits = job_limits  # each new attempt's cgroup limits, from [station] now
        # A full disk met while settling, for `check` to raise once it has been through every
        # attempt: the engine then says so in one paragraph (Engine._say_disk).
        self.disk_full: Exception | None = None
        # The logs of attempts settled since the log cap last looked (`take_settled_logs`): a
        # job can start, print and end between two of its looks.
        self._settled_logs: set[str] = set()

    # ----------------------------------------------------------------- views
    def __iter__(self) -> Iterator[LiveAttempt]:
        return iter(self.live.values())

    def __len__(self) -> int:
        return len(self.live)

    def by_job(self) -> dict[int, LiveAttempt]:
        return {live.attempt.job_id: live for live in self.live.values()}

    def attempt_numbers(self) -> dict[int, int]:
        """Running attempt id -> its number within its job."""
        return {live.attempt.id: live.attempt.number for live in self.live.values()}

    def running_by_gpu(self) -> dict[int, tuple[int, ...]]:
        """GPU index -> the jobs running on it (whole, shared or on one of its MIG slices)."""
        running: dict[int, list[int]] = {}
        for live in self.live.values():
            for index in live.gpus:
                running.setdefault(index, []).append(live.attempt.job_id)
        return {index: tuple(sorted(ids)) for index, ids in running.items()}

    def unsaved(self) -> dict[int, LiveAttempt]:
        """Job id -> its attempt that ended but whose end the store has not taken yet."""
        return {
            live.attempt.job_id: live
            for live in self.live.values()
            if live.retry is not None and live.unsaved_why is not None
        }

    def mps_gpus(self) -> set[int]:
        """The GPUs with MPS clients running."""
        return {i for live in self.live.values() if live.mode == "mps" for i in live.gpus}

    def poll_timeout(self, timeout: float) -> float:
        """`timeout` shortened to when an adopted attempt, a SIGKILL escalation or the SIGTERM
        that ends a preemption's grace is due."""
        now = time.monotonic()
        for live in self.live.values():
            if not live.is_child:
                timeout = min(timeout, ADOPTED_POLL_S)
            if live.retry is not None:
                timeout = min(timeout, max(0.0, live.retry_at - now))
            for due in (live.kill_at, live.preempt_term_at):
                if due is not None:
                    timeout = min(timeout, max(0.0, due - now))
        return timeout

    def track(self) -> None:
        """Tell telemetry which attempts run where."""
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
                    user=job.user,
                    suspended=live.suspended_since is not None,
                )
            )
        self.telemetry.track(tracked)

    # -------------------------------------------------------------- recovery
    def recover(self) -> tuple[int, int]:
        """Re-adopt attempts that are still running, settle those that ended while no engine
        ran, kill what is left of attempts that are over. Returns (adopted, settled)."""
        return attempt_recovery.recover(self)

    def adopt(self, live: LiveAttempt) -> None:
        """Watch an attempt this engine did not start (re-adopted after a restart)."""
        self.live[live.attempt.id] = live
        job = self.store.job(live.attempt.job_id)
        served = self.loaders.loader_for(job.spec.dataset, job.spec.selection)
        if served:
            self.dataset_of[job.id] = served
        if job.cancel_requested:
            left = (job.kill_deadline or 0.0) - time.time()
            self.terminate(live, max(0.0, left))

    # -------------------------------------------------------------- starting
    def job_env(
        self, job: JobRecord, placement: Placement, attempt: AttemptRecord
    ) -> dict[str, str]:
        env = self.store.base_env(job.id) or dict(os.environ)
        env.update(job.spec.env)
        for key, value in placement.env_defaults.items():
            env.setdefault(key, value)
        env.update(placement.env)
        home = self.home
        return with_job_variables(env, job, attempt.number, home.root, home.system_socket)

    def _loader_env(self, job: JobRecord, placement: Placement) -> dict[str, str]:
        served = self.loaders.loader_for(job.spec.dataset, job.spec.selection)
        env: dict[str, str] = {}
        # The job's first GPU (a UUID, or a MIG device's): where a staging producer stages.
        gpu = placement.env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0] or None
        try:
            env = self.loaders.job_env(served, job.owner, gpu)
        except OSError as exc:  # the producer could not be started: the job can fall back
            log.warning("could not start the shared loader %r: %s", served, exc)
        if served:
            self.dataset_of[job.id] = served
        return env

    def _launch_env(
        self, job: JobRecord, placement: Placement, attempt: AttemptRecord
    ) -> dict[str, str]:
        """The attempt's environment: the job's (`job_env`), the shared loader's, its MLflow
        run's, and an MPS client's settings."""
        env = self.job_env(job, placement, attempt)
        env.update(self._loader_env(job, placement))
        tracking_env, tracking_note = self.tracking.launch(job, placement, attempt.number)
        if tracking_env:
            # The run's settings win over what the submitter's shell exported (an MLFLOW_RUN_ID
            # there names some other run), not over the job's own `env`.
            if "MLFLOW_RUN_ID" not in job.spec.env:
                env.pop("MLFLOW_RUN_ID", None)
            env.update({k: v for k, v in tracking_env.items() if k not in job.spec.env})
        if tracking_note:
            self.store.add_event("tracking", tracking_note, job_id=job.id)
        if placement.mode == "mps" and not self.telemetry.monitor.simulated:
            env.update(
                self.mps.client_env(
                    placement.gpus[0],
                    placement.mps_thread_pct,
                    placement.mps_memory_limit_mib,
                    job.id,
                )
            )
        return env

    def start(self, job: JobRecord, placement: Placement) -> None:
        """Start an attempt of `job` where the policy placed it; a launch that fails fails the
        attempt (on record), a full disk leaves the job queued and raises."""
        # The attempt's folder and the space of its exit record come first: on a full disk the
        # job stays queued, untouched, and the loop tries again (a job that started without
        # room for its outcome could lose it and run twice).
        not_prepared: runner.LaunchError | None = None
        owner = runner.run_as(job.owner)
        try:
            runner.prepare(
                self.home.attempt_dir(job.id, job.attempts + 1), private=owner is not None
            )
        except runner.LaunchError as exc:
            if exc.no_space:
                self.queue.add(job)
                raise
            not_prepared = exc  # fails the attempt below, with the attempt on record
        try:
            attempt = self.store.start_attempt(job.id, placement.to_dict(), self.home.jobs_dir)
        except Exception:
            self.queue.add(job)  # the transaction rolled back: it is still queued
            raise
        env = self._launch_env(job, placement, attempt)
        workdir = job.spec.workdir or env.get("HOME") or "/"
        contained = self.containment.prepare(job.id, attempt.number, self.job_limits())
        try:
            if not_prepared is not None:
                raise not_prepared
            launched = runner.launch(
                Path(attempt.dir), job.spec, workdir, env, contained, owner, self.station_group
            )
        except (runner.LaunchError, ValueError) as exc:  # ValueError: argv or env the OS refuses
            self.containment.release(job.id, attempt.number)
            self.store.finish_attempt(
                attempt,
                attempt_state="launch_failed",
                job_state=JobState.FAILED,
                message=str(exc),
                exit_code=None,
            )
            self.events.job(job.id, str(exc))
            self.due.mark()  # the place it was given is free again: a queued job may take it
            return
        started = boottime.stamp()  # its time limit counts from here, on CLOCK_BOOTTIME
        faults.after_spawn(launched.pid)  # test only: inert unless GPUDESK_FAULT=after-spawn
        if contained.startswith("/"):
            self.containment.move_soon(launched.pid, contained)
        # Watched from now on, whatever happens to the store: it is our child to reap and settle.
        self.live[attempt.id] = LiveAttempt(
            attempt,
            launched.pid,
            launched.start_time,
            placement.slot,
            placement.gpus,
            is_child=True,
            owner=job.owner,
            time_limit_s=job.spec.time_limit_s,
            started_boot=started.at if started else None,
            preemptible=job.spec.preemptible,
        )
        try:
            self.store.attempt_launched(attempt.id, launched.pid, launched.start_time, boot=started)
        except sqlite3.Error as exc:  # a full disk: a restarted engine finds it by its lock
            log.warning("could not record the pid of attempt %d: %s", attempt.id, exc)
        self.track()
        self.events.job(job.id, f"attempt {attempt.number} started on {placement.slot}")

    # ------------------------------------------------------------- watching
    def check(self) -> None:
        """Settle attempts that ended; escalate a cancel whose grace ran out to SIGKILL. Raises
        the full disk that kept an outcome from being recorded, after every attempt was seen."""
        now = time.monotonic()
        self.disk_full = None
        for live in list(self.live.values()):
            if live.retry is not None:  # it ended, but that could not be stored: again when due
                if now >= live.retry_at:
                    returncode, watched = live.retry
                    self.settle(live, returncode, watched=watched)
                continue
            if live.is_child:
                if live.returncode is None:
                    ended, live.returncode = runner.reap(live.pid)
                else:
                    ended = True  # reaped already; settling it failed last time
                if ended:
                    live.kill_at = None  # nothing left to escalate
                    self.settle(live, live.returncode, watched=True)
                    continue
            elif not runner.is_alive(live.pid, live.start_time):
                live.kill_at = None
                self.settle(live, returncode=None, watched=True)
                continue
            if live.time_limit_s is not None and not live.timed_out:
                self._check_time_limit(live)
            if live.preempt_term_at is not None and now >= live.preempt_term_at:
                live.preempt_term_at = None  # its grace is over: as a cancel from here on
                self.terminate(live, DEFAULT_CANCEL_GRACE_S)
            if live.kill_at is not None and now >= live.kill_at:
                log.info(
                    "attempt %d of job %d ignored SIGTERM; sending SIGKILL",
                    live.attempt.number,
                    live.attempt.job_id,
                )
                self.kill(live)
                live.kill_at = None
        if self.disk_full is not None:
            raise self.disk_full

    def _check_time_limit(self, live: LiveAttempt) -> None:
        """Stop an attempt whose time limit has passed, as a cancel does. Timed on
        CLOCK_BOOTTIME since it started (LiveAttempt.elapsed_s): a stepped wall clock neither
        ends it early nor lets it run over, and an engine restarted meanwhile finds it over
        the limit all the same."""
        limit, elapsed = live.time_limit_s, live.elapsed_s()
        if limit is None or elapsed is None or elapsed < limit:
            return
        live.timed_out = True
        self.terminate(live, DEFAULT_CANCEL_GRACE_S)
        try:
            self.store.add_event(
                "time_limit",
                f"time limit of {limit:g} s reached: SIGTERM, then SIGKILL after "
                f"{DEFAULT_CANCEL_GRACE_S:g} s",
                job_id=live.attempt.job_id,
            )
        except sqlite3.Error as exc:
            # best effort, as every event: the job is stopped, its end says why; the turn's
            # check of the others goes on (a full disk said after it, as a settle's)
            log.warning("job %d: its time limit event was not stored: %s", live.attempt.job_id, exc)
            if diskspace.is_full(exc, self.home.root):
                self.disk_full = exc

    def terminate(self, live: LiveAttempt, grace: float, resume: Resume | None = None) -> None:
        """SIGTERM to every process of the attempt (its cgroup's, else its process group's);
        SIGKILL when `grace` runs out (`check`). A suspended attempt is continued after its
        SIGTERM (stopped, it would never see it), its resume stored before any signal is sent:
        here, or by the caller with its own change in one transaction (`resume`: a cancel's).
        A store that refuses it (a full disk) leaves the attempt suspended, sent nothing."""
        stopped = live.suspended_since is not None
        if stopped:
            if resume is None:
                resume = self.resume_of(live, STOPPING)
                self.store.set_resumed(resume)
            self._mark_resumed(live, resume)
        deadline = time.monotonic() + grace
        live.kill_at = deadline if live.kill_at is None else min(live.kill_at, deadline)
        self.send(live, signal.SIGTERM)
        if stopped:
            self.send(live, signal.SIGCONT)

    def send(self, live: LiveAttempt, sig: int) -> bool:
        """`sig` to every process of the attempt: its cgroup's, else its process group's (the
        wrapper's pid this engine started or re-adopted). False when none was there."""
        attempt = live.attempt
        if self.containment.signal(attempt.job_id, attempt.number, sig):
            return True
        return runner.signal_group(live.pid, sig)

    def resumed(self, live: LiveAttempt, message: str) -> None:
        """A suspended attempt is continued (SIGCONT): its suspension ends, stored with the time
        it took (its time limit's clock runs again), and said. Stored first: a store that
        refuses it (a full disk) leaves the attempt suspended, here as in the store."""
        resume = self.resume_of(live, message)
        self.store.set_resumed(resume)
        self._mark_resumed(live, resume)

    @staticmethod
    def resume_of(live: LiveAttempt, message: str) -> Resume:
        """What continuing a suspended attempt now stores (nothing is changed)."""
        assert live.suspended_since is not None
        return Resume(live.attempt.job_id, live.attempt.id, live.suspended_for(), message)

    def _mark_resumed(self, live: LiveAttempt, resume: Resume) -> None:
        """The stored `resume` of a suspended attempt, here too, and said."""
        took = resume.suspended_s - live.suspended_s
        live.suspended_s, live.suspended_since = resume.suspended_s, None
        self.events.job(live.attempt.job_id, f"{resume.message} after {took:.0f} s suspended")

    def preempt(self, live: LiveAttempt, sig: int, grace: float, for_job: int) -> bool:
        """Ask a preemptible attempt to checkpoint and leave: `sig` to its processes (its
        cgroup's, else its own process group's, the wrapper's pid this engine started or
        re-adopted, checked to be that same process), SIGTERM after `grace` (`check`). False
        when it is gone already."""
        if live.suspended_since is not None or not runner.is_alive(live.pid, live.start_time):
            return False  # a suspended job is left as its owner stopped it
        if not self.send(live, sig):
            return False
        live.preempted_for = for_job
        live.preempt_term_at = time.monotonic() + grace
        return True

    def kill(self, live: LiveAttempt) -> None:
        self.containment.kill(live.attempt.job_id, live.attempt.number)
        runner.signal_group(live.pid, signal.SIGKILL)

    def take_settled_logs(self) -> set[str]:
        """The logs of the attempts settled since the last call (for the log cap's last look)."""
        taken, self._settled_logs = self._settled_logs, set()
        return taken

    # ------------------------------------------------------------- settling
    def settle(self, live: LiveAttempt, returncode: int | None, *, watched: bool = False) -> None:
        """Record how an attempt ended and move its job on; `watched` when it ended while this
        engine ran. Never raises: an attempt that cannot be settled is recorded as failed with
        the reason, so it can stop neither the settling of the others nor an engine start."""
        self._settled_logs.add(live.attempt.log_path)
        try:
            self._settle(live, returncode, watched)
        except Exception as exc:
            self._settle_failed(live, exc, (returncode, watched))
            return
        if live.settle_failures:
            log.info(
                "recorded how attempt %d of job %d ended, at try %d",
                live.attempt.number,
                live.attempt.job_id,
                live.settle_failures + 1,
            )

    def _settle(self, live: LiveAttempt, returncode: int | None, watched: bool) -> None:
        attempt = live.attempt
        self.dataset_of.pop(attempt.job_id, None)
        record = runner.read_exit(attempt.dir)
        if record is None and returncode is not None:
            record = runner.describe_returncode(returncode)
        # Whatever of the attempt outlived its command: daemons too where it has a cgroup. Both
        # may count the same processes, hence max.
        leftovers = self.containment.release(attempt.job_id, attempt.number)
        if live.pid:
            leftovers = max(leftovers, runner.kill_leftovers(live.pid))
        live.leftovers_killed += leftovers  # said below, once stored (a retry may say them)
        runner.clean(attempt.dir)
        job = self.store.job(attempt.job_id)
        if record is None:  # watched: a re-adopted wrapper is not our child: its signal unknown
            attempt_state, exit_code, signal_number = "lost", None, None
            outcome = (
                f"the job's wrapper (pid {live.pid}) was killed while the engine watched it and "
                "left no exit record (most likely by SIGKILL or the out-of-memory killer)"
                if watched
                else "the job's processes ended while the engine was down and left no exit record"
            )
        else:  # not `ran`: its wrapper refused her as it started (runner.read_exit): no retry
            attempt_state = "exited" if record.ran else "launch_failed"
            exit_code, signal_number = record.exit_code if record.ran else None, record.signal
            outcome = record.description
        usage = self.telemetry.monitor.usage.get(attempt.id)
        ended_at = record.ended_at if record and record.ended_at else time.time()
        timed_out = ran_past_limit(live, watched, ended_at)
        ending = self._ending(job, attempt, exit_code, outcome, usage, timed_out, live, record)
        raised = ending.raised_demand
        # worked out before anything is written: a store that refuses the writes below (a full
        # disk) leaves the views showing this end, not a job still running
        live.unsaved = UnsavedEnd(ending.state, exit_code, ending.message, ended_at)
        if live.leftovers_killed:
            self.store.add_event(
                "cleanup",
                f"killed {live.leftovers_killed} leftover process(es) of attempt {attempt.number}",
                job_id=attempt.job_id,
            )
            live.leftovers_killed = 0
        self.store.finish_attempt(
            attempt,
            attempt_state=attempt_state,
            job_state=ending.state,
            message=ending.message,
            exit_code=exit_code,
            signal=signal_number,
            ended_at=record.ended_at if record else None,
            demand=raised.to_dict() if raised else None,
            preempted_for=live.preempted_for if ending.preempted else None,
        )
        self.demands.ended(
            job,
            attempt,
            usage,
            ran_s(live, watched, ended_at),
            ending.state is JobState.SUCCEEDED,
        )
        self.live.pop(attempt.id, None)  # only once the outcome is stored
        self.track()
        self.telemetry.finish(attempt.id)
        if ending.state is JobState.QUEUED:
            self.queue.add(self.store.job(job.id))
        if raised is not None:
            self.activity.oom_recovered()  # counted once its requeue is stored
        self.due.mark()
        self.events.job(job.id, ending.message)

    def _settle_failed(
        self, live: LiveAttempt, exc: Exception, asked: tuple[int | None, bool]
    ) -> None:
        """Settling `live` raised. On a full disk, settle it again (as `asked`) shortly, from
        `check`. Else end it as failed with a reason that cannot fail the same way; when even
        that cannot be stored, settle it again later, backing off. Logged once."""
        attempt = live.attempt
        live.settle_failures += 1
        if diskspace.is_full(exc, self.home.root):
            # Neither the attempt's fault nor for ever: its outcome waits in its folder, and it
            # is settled when the disk has room. Never recorded as failed for it (that would
            # turn a success into a failure, and a retry into a second run).
            live.retry, live.retry_at = asked, time.monotonic() + SETTLE_RETRY_S
            live.unsaved_why = diskspace.unsaved_text(self.home.root)  # for the views
            self.live[attempt.id] = live  # one from recover() is not there yet
            self.disk_full = exc
            return
        live.unsaved = None  # it is to be stored as failed now, or settled again later
        if live.settle_failures == 1:
            log.error(
                "could not record how attempt %d of job %d ended",
                attempt.number,
                attempt.job_id,
                exc_info=exc,
            )
        reason = (
            f"gpudesk could not record how this attempt ended ({type(exc).__name__}: "
            f"{safe_text(str(exc))[:200]}); the engine log has the details"
        )
        try:
            self.store.abandon_attempt(attempt, reason)
        except Exception:
            delay = min(SETTLE_RETRY_MAX_S, SETTLE_RETRY_S * 2 ** (live.settle_failures - 1))
            live.retry, live.retry_at = asked, time.monotonic() + delay
            live.unsaved_why = f"not yet saved: the store refuses it ({type(exc).__name__})"
            self.live[attempt.id] = live  # one from recover() is not there yet
            if live.settle_failures == 1:
                log.warning(
                    "the store refuses to record attempt %d of job %d as failed too; trying "
                    "again every %g s at most (not logged again)",
                    attempt.number,
                    attempt.job_id,
                    SETTLE_RETRY_MAX_S,
                )
            return
        self.live.pop(attempt.id, None)
        self.dataset_of.pop(attempt.job_id, None)
        self.due.mark()
        for step in (self.track, lambda: self.telemetry.finish(attempt.id)):
            try:
                step()
            except Exception:
                log.exception(
                    "after giving up on attempt %d of job %d", attempt.number, attempt.job_id
                )
        with contextlib.suppress(Exception):  # best effort, as every event
            self.events.job(attempt.job_id, reason)

    def _ending(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        exit_code: int | None,
        outcome: str,
        usage: AttemptUsage | None,
        timed_out: bool,
        live: LiveAttempt,
        record: runner.ExitRecord | None,
    ) -> Ending:
        oom = (
            gpu_oom_line(attempt.log_path, exit_code, runner.log_owner_uid(job.owner))
            if job.spec.gpus
            else None
        )
        return ending(
            job,
            attempt.number,
            exit_code,
            outcome,
            timed_out=timed_out,
            oom=oom,
            after_oom=lambda: self.demands.of(job).after_oom(
                usage.gpu_memory_peak_mib if usage else None,
                self._usable_alone_mib(),
                self._had_whole(attempt),
            ),
            usable_mib=self._usable_alone_mib(),
            preempted_for=live.preempted_for,
            ran=record is None or record.ran,
        )

    # --------------------------------------------------------------- demand
    def _usable_alone_mib(self) -> float | None:
        """What the largest GPU offers a job alone: where an OOM re-estimate stops growing."""
        totals = [
            g.memory_total_mib for g in self.telemetry.monitor.inventory if g.memory_total_mib
        ]
        return max(totals) - RESERVE_MIB if totals else None

    def _had_whole(self, attempt: AttemptRecord) -> bool:
        """Whether the attempt ran alone on whole GPUs of the largest size, with all their
        memory (no MPS limit): then an OOM measures a need beyond every GPU."""
        if attempt.placement.get("mode") != "exclusive":
            return False
        totals = {
            g.index: g.memory_total_mib
            for g in self.telemetry.monitor.inventory
            if g.memory_total_mib
        }
        gpus = [int(i) for i in attempt.placement.get("gpus", ())]
        largest = max(totals.values(), default=0.0)
        return bool(gpus) and all(totals.get(i, 0.0) >= largest for i in gpus)
