"""The engine's collaborator for MLflow tracking (docs/tracking.md): which runs exist and which
are being made, what each gets and when, the workers that talk to the stores, and how they fare.

- A job with `tracking` gets its run when it is first placed (`prepare`), under its sweep's
  parent run when it came from a [[sweeps]] table: MLflow cannot move a run's start, and the
  run's duration is to be the job's (a run made at submit counted the time it queued). The
  placed job waits (`holds`) until its worker made the run, at most RUN_WAIT_S, then starts
  without MLFLOW_RUN_ID; the worker stamps the run's start when it makes it (milliseconds
  before the job's). A job that ends without running gets a run of no length at its end. The
  row in the store (`tracking_runs`) keeps the op that makes it until MLflow named the run,
  and whether its end is in MLflow yet.
- At launch the job gets MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME and MLFLOW_RUN_ID, so its
  own `mlflow.start_run()` logs into the same run.
- Each telemetry sample of a running job becomes metric points (`sample`); its end, its
  totals, result lines and status (`job_changed`), sent until the worker says MLflow has it.
- Workers (`sidecar`) run as the jobs' owners; what they say of their stores (`Health`) is
  logged when a store starts or stops failing and shown by `status` (`store_health`).
- A worker's replies are its owner's to forge: each counts only for a run of the worker's own
  uid (`replies`), and its text is redacted and cut before it is logged or kept.
- A URI can hold a password: the views show it whole to its job's owner and the admins only
  (`sees_secrets`), and the log and the events, which others read, never (`redact_secrets`).

Nothing here waits on a worker: ops go into the worker's outbox, replies are read on the loop.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Callable, Mapping

from gpudesk import diskspace, joblog
from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobState
from gpudesk.core.records import JobRecord
from gpudesk.core.wire.jobs import JobRunView
from gpudesk.core.wire.station import TrackingHealth
from gpudesk.core.wire.telemetry import Snapshot
from gpudesk.engine.offloop import Offload
from gpudesk.engine.services.tracking.runs import TrackedRun, run_wait_s
from gpudesk.engine.services.tracking.sidecar import Sidecar
from gpudesk.engine.services.tracking.store_health import TRACKING_EVENT, SeesSecrets, StoreHealths
from gpudesk.engine.state import PlacementDue
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.tracking import TrackingRow
from gpudesk.hw import runner
from gpudesk.paths import Home
from gpudesk.policy.policy import Placement
from gpudesk.redact import redact_secrets
from gpudesk.results import TAIL_BYTES, last_result, metrics_of
from gpudesk.text import safe_text
from gpudesk.tracking import content, messages
from gpudesk.tracking.rollup import BEST_PREFIX, BestChild, Rollups

log = logging.getLogger("gpudesk.engine")


class Tracking:
    def __init__(
        self,
        home: Home,
        store: Store,
        telemetry: TelemetrySink,
        attempt_numbers: Callable[[], Mapping[int, int]],
        due: PlacementDue,
    ) -> None:
        self.home = home
        self.store = store
        self.telemetry = telemetry
        self.attempt_numbers = attempt_numbers
        self.due = due
        self._station: str | None = None
        self.runs: dict[str, TrackedRun] = {}  # by key, until their end is in MLflow
        self.by_job: dict[int, str] = {}  # job id -> its run's key
        self.awaiting: dict[int, float] = {}  # queued job id -> when it stops waiting (monotonic)
        # A sweep's parent run -> its jobs whose runs have not ended: the parent ends with the
        # last of them (asking the store for the whole sweep only then).
        self.open_children: dict[str, set[int]] = {}
        self.workers: dict[int, Sidecar] = {}  # by owner uid
        self.rollups = Rollups()  # each open sweep's best child (`rollup`)
        self.healths = StoreHealths(store)  # each owner's stores, as her worker finds them
        self.run_wait_s = run_wait_s()
        self.offload: Offload | None = None  # the engine's: a worker's owner asked off the loop

    @property
    def station(self) -> str:
        if self._station is None:
            self._station = self.store.tracking_station()
        return self._station

    # ---------------------------------------------------------------- workers
    def _worker(self, uid: int, owner: Identity | None) -> Sidecar:
        worker = self.workers.get(uid)
        if worker is None:
            folder = self.home.private_subdir(self.home.root / "tracking")
            worker = Sidecar(
                uid,
                owner,
                str(folder / f"worker-{uid}.log"),
                lambda restart: self._restarted(uid, restart),
                self.offload,
            )
            self.workers[uid] = worker
            worker.ensure_running()
        return worker

    def _send(self, run: TrackedRun, op: messages.Op, droppable: bool = False) -> None:
        worker = self.workers.get(run.uid)
        if worker is None:
            worker = self._worker(run.uid, self._owner(run.uid))
        worker.send(op, droppable)

    def _owner(self, uid: int) -> Identity | None:
        """Whom a worker for `uid` runs as (None: the engine's own user): as stored with her
        newest job (the user database, which may hang, is asked off the loop: `Sidecar`)."""
        newest = self.store.jobs(owner_uid=uid, limit=1)
        return runner.run_as(newest[0].owner if newest else Identity.of(uid, uid, ()))

    def _restarted(self, uid: int, restart: bool) -> None:
        """A worker started: what it must know first. The first start of a worker needs
        nothing (what follows tells it); a restart loses what the old one held, so each
        unfinished run of its owner is bound or made again, and ends sent are sent again."""
        worker = self.workers.get(uid)
        if worker is None or not restart:
            return
        # Ahead of the updates that waited in the outbox meanwhile: each names a run the new
        # worker must know first. Parents come first (dicts keep the order runs were made in).
        first: list[messages.Op] = []
        ends: list[messages.Op] = []
        for run in self.runs.values():
            if run.uid != uid:
                continue
            if run.run_id is not None:
                first.append(messages.BindRun(run.uri, run.key, run.run_id))
            else:
                first.append(run.create)
            ends += run.final_ops
        worker.send_first(first)
        for op in ends:
            worker.send(op)

    def register(self, poller: select.poll) -> None:
        """Add the workers' pipes to the loop's poll: replies to read, room to write."""
        for worker in self.workers.values():
            readable, writable = worker.fds()
            if readable is not None:
                poller.register(readable, select.POLLIN)
            if writable is not None:
                poller.register(writable, select.POLLOUT)

    def poll_timeout(self, timeout: float) -> float:
        now = time.monotonic()
        for deadline in self.awaiting.values():
            timeout = min(timeout, max(0.0, deadline - now))
        for worker in self.workers.values():
            if worker.process is None:
                timeout = min(timeout, max(0.0, worker.next_start - now))
        return timeout

    def step(self) -> None:
        """A loop step: runs of jobs just submitted, the workers' pipes and replies, the jobs
        whose wait for their run ended."""
        for uid, worker in list(self.workers.items()):
            worker.ensure_running()
            for reply in worker.pump():
                try:
                    self._on_reply(uid, reply)
                except Exception as exc:  # one worker's replies never stop the others'
                    if diskspace.is_full(exc, self.home.root):
                        raise  # the engine's loop says that once
                    worker.complaints.dropped(f"a reply the engine failed on ({exc!r})")
        now = time.monotonic()
        ended = [job_id for job_id, deadline in self.awaiting.items() if now >= deadline]
        for job_id in ended:
            del self.awaiting[job_id]
        if ended:
            self.due.mark()

    def close(self) -> None:
        """The engine stops: its workers finish what they hold (`Sidecar.close`; the engine
        exits once they are gone), and each unfinished run's step is kept meanwhile."""
        for worker in self.workers.values():
            worker.close()
        deadline = time.monotonic() + messages.EXIT_GRACE_S + 0.5  # theirs, and a margin
        try:
            self.store.set_tracking_steps((r.key, r.step) for r in self.runs.values() if r.job_id)
        finally:
            for worker in self.workers.values():
                worker.reap(deadline)

    # ---------------------------------------------------------------- replies
    def _on_reply(self, uid: int, reply: messages.Reply) -> None:
        """One reply of the worker of `uid`, believed only for a run that worker was handed
        (module docstring)."""
        if isinstance(reply, messages.Health):
            self.healths.heard(uid, reply, self.workers[uid].complaints)
            return
        run = self.runs.get(reply.key)
        if run is None or run.uid != uid:
            # Another user's run, or a key the engine never made (or a run already ended: a
            # late reply). Nothing of it is believed.
            whose = "no run it was handed" if run is None else "another user's run"
            self.workers[uid].complaints.dropped(f"a {reply.kind!r} reply for {whose}")
            return
        if isinstance(reply, messages.RunMade):
            if run.run_id == reply.run_id:
                return
            run.run_id = reply.run_id
            self.store.set_tracking_run_id(reply.key, reply.run_id)
            parent = self.runs.get(run.create.parent or "")
            told = self.rollups.current(parent.key) if parent is not None else None
            if parent is not None and told is not None and told.key == run.key:
                self._tell_best(parent, told)  # the best child's run was not named yet
            if run.job_id is not None and self.awaiting.pop(run.job_id, None) is not None:
                self.due.mark()  # it waited for this run: it may start now
        elif isinstance(reply, messages.Acked):
            del self.runs[reply.key]
            self.store.set_tracking_final(reply.key, True)
            if run.job_id is not None:
                self.store.set_tracking_steps([(run.key, run.step)])
                self.by_job.pop(run.job_id, None)
        elif isinstance(reply, messages.Rejected):
            if not run.events.take():  # a flood of rejections: the first ones are said
                return
            message = (
                "MLflow refused an update of this job's run: "
                f"{redact_secrets(safe_text(reply.message))}"
            )
            log.warning("%s (%s)", message, reply.key)
            if run.job_id is not None:
                self.store.add_event(TRACKING_EVENT, message, job_id=run.job_id)

    def health_list(
        self, sees_secrets: SeesSecrets, name: Callable[[int], str]
    ) -> list[TrackingHealth]:
        """Each store each owner's worker talks to, or is to talk to: what `status` shows
        (`StoreHealths.listing`)."""
        runs = [(run.uid, run.uri) for run in self.runs.values()]
        return self.healths.listing(runs, self.workers, sees_secrets, name)

    # -------------------------------------------------------------- job life
    def job_changed(self, job: JobRecord) -> None:
        """Every job event (gpudesk.engine.events): a tracked job was requeued, started
        without being placed here (a Slurm job), or ended."""
        if job.spec.tracking is None:
            return
        key = self.by_job.get(job.id)
        run = self.runs.get(key) if key else None
        if job.state is JobState.QUEUED:
            if run is not None and run.final_ops:  # requeued after its end: it opens again
                run.final_ops = []
                self._send(run, messages.SetStatus(run.uri, run.key, "SCHEDULED"))
        elif job.state is JobState.RUNNING:
            if run is None and not self._known(job):
                started = job.started_at or time.time()
                self._make(job, "RUNNING", int(started * 1000))
        elif job.state.terminal:
            self.awaiting.pop(job.id, None)
            if run is None and not self._known(job):  # it never ran: a run of no length
                ended = int((job.ended_at or time.time()) * 1000)
                self._make(job, "SCHEDULED", ended)
            self._finish(job)

    def run_made(self, job: JobRecord) -> bool:
        """Whether the job's run exists (it was placed, or ran before): its params are fixed."""
        return (
            job.id in self.by_job or self.store.tracking_runs_of([job.id]).get(job.id) is not None
        )

    def _known(self, job: JobRecord) -> bool:
        """Whether the job's run was made before (its row in the store): if so it is taken up
        again, its parent's too (a job requeued after its run ended, or an engine restart)."""
        row = self.store.tracking_runs_of([job.id]).get(job.id)
        if row is None:
            return False
        if row.key not in self.runs:
            run = self._load(row)
            self.store.set_tracking_final(row.key, False)
            self._reopen_parent(run)
        return True

    def prepare(self, job: JobRecord) -> bool:
        """The scheduler placed a queued job: whether it must wait for its run first. Its run
        is made now (not at submit: MLflow cannot move a run's start, and the run is to last
        as long as the job), started by the worker as it makes it; the job waits (`holds`)
        until the worker names it, at most `run_wait_s`."""
        if job.spec.tracking is None:
            return False
        if job.id not in self.by_job and not self._known(job):
            self._make(job, "RUNNING", None)
            self.awaiting[job.id] = time.monotonic() + self.run_wait_s
            return True
        return self.holds(job)

    def _reopen_parent(self, run: TrackedRun) -> None:
        """A sweep's job runs again after its sweep's run ended: that run opens again too."""
        parent = run.create.parent
        if parent is None or run.job_id is None:
            return
        if parent not in self.runs:
            row = self.store.tracking_run(parent)
            if row is None:
                return
            self._load(row)
            self.store.set_tracking_final(parent, False)
            self._send(self.runs[parent], messages.SetStatus(row.uri, parent, "RUNNING"))
        self.runs[parent].final_ops = []
        self.open_children.setdefault(parent, set()).add(run.job_id)

    def _make(self, job: JobRecord, status: str, start_ms: int | None) -> None:
        """Make the job's run (and its sweep's, if this is the first of it), `status` at first,
        started at `start_ms` (None: when its worker makes it), and store their rows."""
        tracking = job.spec.tracking
        assert tracking is not None
        owner = runner.run_as(job.owner)
        uid = job.owner.uid
        worker = self._worker(uid, owner)
        rows = []
        parent = None
        if job.spec.sweep and job.spec.group:
            parent = content.sweep_key(self.station, uid, job.spec.group, job.spec.sweep)
            if parent not in self.runs:
                row = self.store.tracking_run(parent)
                if row is not None:
                    self._load(row)
                else:
                    create = messages.CreateRun(
                        tracking.mlflow_uri,
                        parent,
                        tracking.experiment,
                        content.sweep_run_name(job.spec.sweep, job.spec.group),
                        status,
                        start_ms,
                        content.sweep_tags(job),
                        tracking.sweep_params,
                    )
                    self.runs[parent] = TrackedRun(parent, None, uid, tracking.mlflow_uri, create)
                    self.runs[parent].running = status == "RUNNING"
                    self.healths.uses(uid, tracking.mlflow_uri)
                    worker.send(create)
                    rows.append(self._row(self.runs[parent]))
        key = content.job_key(self.station, job.id)
        create = messages.CreateRun(
            tracking.mlflow_uri,
            key,
            tracking.experiment,
            job.name,
            status,
            start_ms,
            content.run_tags(job),
            content.run_params(job),
            parent,
        )
        run = self.runs[key] = TrackedRun(key, job.id, uid, tracking.mlflow_uri, create)
        self.healths.uses(run.uid, run.uri)
        self.by_job[job.id] = key
        if parent is not None:
            self.open_children.setdefault(parent, set()).add(job.id)
        worker.send(create)
        rows.append(self._row(run))
        try:
            self.store.add_tracking_runs(rows)
        except Exception:  # the worker finds a run by its key; a restart without the row
            log.exception("could not store %d MLflow run(s) being made", len(rows))

    @staticmethod
    def _row(run: TrackedRun) -> TrackingRow:
        return TrackingRow(
            run.key, run.job_id, run.uid, run.uri, messages.encode(run.create), None, False, 0
        )

    def _load(self, row: TrackingRow) -> TrackedRun:
        """A run from the store into memory (a restart, or a run that opens again)."""
        create = messages.decode_op(row.create_op)
        assert isinstance(create, messages.CreateRun)
        run = TrackedRun(row.key, row.job_id, row.uid, row.uri, create, row.run_id, row.step)
        self.runs[row.key] = run
        self.healths.uses(run.uid, run.uri)
        if row.job_id is not None:
            self.by_job[row.job_id] = row.key
            if create.parent is not None:
                self.open_children.setdefault(create.parent, set()).add(row.job_id)
        if row.run_id is not None:
            self._send(run, messages.BindRun(run.uri, run.key, row.run_id))
        else:
            self._send(run, create)
        return run

    def recover(self) -> None:
        """At engine start: every run whose end is not in MLflow yet, bound or made again;
        then the ends of jobs that ended meanwhile sent (all loaded first: a sweep's run ends
        with the last of its jobs)."""
        now = time.monotonic()
        loaded = []
        for row in self.store.unfinished_tracking_runs():
            try:
                loaded.append(self._load(row))
            except Exception:  # one bad row must not keep the engine from starting
                log.exception("could not take up the MLflow run %s again", row.key)
        for run in loaded:
            if run.job_id is None:
                continue
            try:
                job = self.store.job(run.job_id)
                if job.state.terminal:
                    self._finish(job)
                elif job.state is JobState.QUEUED and run.run_id is None:
                    self.awaiting[job.id] = now + self.run_wait_s
            except Exception:
                log.exception("could not take up the MLflow run %s again", run.key)

    # ---------------------------------------------------------------- waiting
    def holds(self, job: JobRecord) -> bool:
        """Whether a queued job waits for its run (not made yet, and not for long yet)."""
        if job.spec.tracking is None:
            return False
        deadline = self.awaiting.get(job.id)
        return deadline is not None and time.monotonic() < deadline

    def waiting_text(self, job: JobRecord) -> str | None:
        deadline = self.awaiting.get(job.id)
        if deadline is None or job.spec.tracking is None:
            return None
        left = max(0.0, deadline - time.monotonic())
        uri = job.spec.tracking.mlflow_uri
        error = self.healths.error(job.owner.uid, uri)
        why = f"; the store: {error}" if error else ""
        return (  # shown to anyone who lists the job: the URI redacted
            f"waiting for its MLflow run to be made in {redact_secrets(uri)} (at most "
            f"{left:.0f} s more, then it starts without MLFLOW_RUN_ID){why}"
        )

    # --------------------------------------------------------------- launching
    def launch(
        self, job: JobRecord, placement: Placement, attempt: int
    ) -> tuple[dict[str, str], str | None]:
        """The variables a tracked job's attempt gets, and what to note in its events when its
        run is not made yet. Tells its run (and its parent) where it runs."""
        tracking = job.spec.tracking
        if tracking is None:
            return {}, None
        self.awaiting.pop(job.id, None)
        env = {
            "MLFLOW_TRACKING_URI": tracking.mlflow_uri,
            "MLFLOW_EXPERIMENT_NAME": tracking.experiment,
        }
        key = self.by_job.get(job.id)
        run = self.runs.get(key) if key else None
        note = None
        if run is not None and run.run_id is not None:
            env["MLFLOW_RUN_ID"] = run.run_id
        else:
            error = self.healths.error(job.owner.uid, tracking.mlflow_uri)
            why = f" (the store: {error})" if error else ""
            note = (
                f"started without MLFLOW_RUN_ID: its MLflow run was not made within "
                f"{self.run_wait_s:g} s{why}. gpudesk's run gets its metrics when the store "
                "answers; an mlflow.start_run() of the job's own makes a run of its own"
            )
        if run is None:
            return env, note
        monitor = self.telemetry.monitor
        models = {g.index: g.name for g in monitor.inventory}
        where = content.placement_values(placement, models, monitor.simulated)
        tags = dict(where)
        tags["gpudesk.attempts"] = str(attempt)
        if monitor.simulated:
            tags["gpudesk.simulated"] = "true"
        # Params cannot change in MLflow: the first attempt's placement is the params, every
        # attempt's is in the tags.
        params = where if attempt == 1 else {}
        self._send(run, messages.LogToRun(run.uri, run.key, params=params, tags=tags))
        self._send(run, messages.SetStatus(run.uri, run.key, "RUNNING"))
        parent = self.runs.get(run.create.parent) if run.create.parent else None
        if parent is not None and not parent.running:
            parent.running = True
            self._send(parent, messages.SetStatus(parent.uri, parent.key, "RUNNING"))
        return env, note

    # ------------------------------------------------------------------ samples
    def sample(self, view: Snapshot) -> None:
        """One telemetry view: a metric point set for each running tracked job."""
        if not self.by_job or not view.jobs:
            return
        gpus = {g.index: g for g in view.gpus}
        ts_ms = int(view.taken_at * 1000)
        for job_view in view.jobs:
            key = self.by_job.get(job_view.id)
            run = self.runs.get(key) if key else None
            if run is None or run.final_ops:
                continue
            points = content.sample_points(job_view, gpus, ts_ms, run.step)
            run.step += 1
            if points:
                self._send(run, messages.LogToRun(run.uri, run.key, tuple(points)), True)

    # ------------------------------------------------------------------- ends
    def _finish(self, job: JobRecord) -> None:
        """A tracked job ended: its totals, results and status, then its sweep's if that was
        the last of it."""
        key = self.by_job.get(job.id)
        run = self.runs.get(key) if key else None
        if run is None or run.final_ops:
            return
        now = time.time()
        ts_ms = int(now * 1000)
        summary = self.telemetry.job_usage([job.id], self.attempt_numbers()).get(job.id)
        gpu_s = self.store.allocations([job.id], now).get(job.id, (None, None))[1]
        points = content.total_points(summary, gpu_s, ts_ms, run.step)
        text = self._log_tail(job)
        points += content.result_points(text, ts_ms)
        tags = {"gpudesk.state": job.state.value, "gpudesk.attempts": str(job.attempts)}
        if job.reason:
            tags["gpudesk.reason"] = content.param_value(safe_text(job.reason))
        ended = int((job.ended_at or now) * 1000)
        run.final_ops = [
            messages.LogToRun(run.uri, run.key, tuple(points), tags=tags),
            messages.SetStatus(run.uri, run.key, content.STATUS_OF[job.state], ended, ack=True),
        ]
        for op in run.final_ops:
            self._send(run, op)
        if run.create.parent:
            if job.state is JobState.SUCCEEDED:
                self._roll_up(run.create.parent, job, run.key, text)
            self._finish_sweep(job, run.create.parent)

    def _log_tail(self, job: JobRecord) -> str:
        """The end of the job's last attempt's log: its owner's file only (as the `log` request
        reads them), read on the loop, never waiting on a lock the job holds (gpudesk.joblog)."""
        if not job.attempts:
            return ""
        path = self.home.attempt_dir(job.id, job.attempts) / runner.LOG_FILE
        try:
            owner_uid = runner.log_owner_uid(job.owner)
            return joblog.tail(path, TAIL_BYTES, owner_uid, wait=False).decode("utf-8", "replace")
        except OSError:
            return ""

    def _roll_up(self, parent_key: str, job: JobRecord, key: str | None, text: str) -> None:
        """A sweep's child succeeded (`key`: its run's; None: none, its sweep ends): its
        sweep's parent run gets the best child so far (`rollup`). The first time in this
        engine's life, the children that succeeded before (an engine restart) are read first,
        from their logs, so the best and its steps go on from where they were."""
        parent, tracking = self.runs.get(parent_key), job.spec.tracking
        if parent is None or tracking is None:
            return
        objective = (tracking.objective, tracking.goal)
        before = self.rollups.current(parent_key)
        if not self.rollups.started(parent_key):
            for sibling in self._siblings(job, parent.uid):
                if sibling.id != job.id and sibling.state is JobState.SUCCEEDED:
                    found = metrics_of(last_result(self._log_tail(sibling)))
                    child = (sibling.id, sibling.name, content.job_key(self.station, sibling.id))
                    self.rollups.child_ended(parent_key, objective, child, found)
        if key is not None:
            found = metrics_of(last_result(text))
            self.rollups.child_ended(parent_key, objective, (job.id, job.name, key), found)
        after = self.rollups.current(parent_key)
        if after is not None and (
            before is None or (before.job, before.value) != (after.job, after.value)
        ):
            self._tell_best(parent, after)

    def _siblings(self, job: JobRecord, uid: int) -> list[JobRecord]:
        """The tracked jobs of a sweep: its owner's only (anyone may name a group,
        content.sweep_key)."""
        return [
            j
            for j in self.store.jobs(group=job.spec.group, owner_uid=uid)
            if j.spec.sweep == job.spec.sweep and j.spec.tracking is not None
        ]

    def _tell_best(self, parent: TrackedRun, told: BestChild) -> None:
        child = self.runs.get(told.key)
        run_id = child.run_id if child is not None else None
        if run_id is None and child is None:
            row = self.store.tracking_run(told.key)
            run_id = row.run_id if row else None
        point = messages.MetricPoint(
            BEST_PREFIX + told.metric, told.value, int(time.time() * 1000), told.step
        )
        self._send(
            parent, messages.LogToRun(parent.uri, parent.key, (point,), tags=told.tags(run_id))
        )

    def _finish_sweep(self, job: JobRecord, parent_key: str) -> None:
        parent = self.runs.get(parent_key)
        waiting = self.open_children.get(parent_key, set())
        waiting.discard(job.id)
        if parent is None or parent.final_ops or waiting:
            return
        self.open_children.pop(parent_key, None)
        siblings = self._siblings(job, parent.uid)
        if not all(j.state.terminal for j in siblings):
            return
        if not self.rollups.started(parent_key):  # none succeeded in this engine's life
            self._roll_up(parent_key, job, None, "")
        self.rollups.close(parent_key)
        states = {j.state for j in siblings}
        status = (
            "FAILED"
            if JobState.FAILED in states
            else "KILLED"
            if JobState.CANCELLED in states
            else "FINISHED"
        )
        ended = max((j.ended_at or 0.0) for j in siblings) or time.time()
        parent.final_ops = [
            messages.SetStatus(parent.uri, parent.key, status, int(ended * 1000), ack=True)
        ]
        self._send(parent, parent.final_ops[0])

    # ------------------------------------------------------------------- views
    def job_view(self, job: JobRecord, whole_uri: bool) -> JobRunView | None:
        """What `show` says of a tracked job's run; its URI redacted unless `whole_uri` (the
        viewer is its owner or an admin)."""
        tracking = job.spec.tracking
        if tracking is None:
            return None
        key = self.by_job.get(job.id)
        run = self.runs.get(key) if key else None
        run_id = run.run_id if run else None
        if run is None:
            row = self.store.tracking_runs_of([job.id]).get(job.id)
            run_id = row.run_id if row else None
        return JobRunView(
            mlflow_uri=tracking.mlflow_uri if whole_uri else redact_secrets(tracking.mlflow_uri),
            experiment=tracking.experiment,
            run_id=run_id,
            error=self.healths.error(job.owner.uid, tracking.mlflow_uri),
        )
