"""Scheduling: the station as the placement policy sees it, asking the policy where queued jobs
go whenever something changed, and starting them there. Under `auto` with `[station]
mig_repartition = true`, idle MIG-mode GPUs first get the layout the queue wants where the
interference model says the change pays (gpudesk.engine.repartition.payoff)."""

from __future__ import annotations

import logging
import time

from gpudesk.engine.attempts import Attempts
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.jobs import JobState
from gpudesk.engine.learning import StationLearning
from gpudesk.engine.mig.nvidia_smi import MigError
from gpudesk.engine.mps.watch import MpsWatch
from gpudesk.engine.placement.demand import Demand
from gpudesk.engine.placement.gpu_states import gpu_states
from gpudesk.engine.placement.policies import make_policy
from gpudesk.engine.placement.policy import Decision, PlacementPolicy, StationView
from gpudesk.engine.placement.queue import JobQueue
from gpudesk.engine.placement.schedule_pass import schedule_pass
from gpudesk.engine.repartition.control import MigControl
from gpudesk.engine.repartition.planner import QueuedDemand
from gpudesk.engine.state import CurrentStation, PlacementDue
from gpudesk.engine.store.database import Store
from gpudesk.engine.store.records import JobRecord
from gpudesk.engine.telemetry_sink import TelemetrySink

log = logging.getLogger("gpudesk.engine")

# The idle MIG-mode GPUs (index, layout) and the queued jobs the last repartition check weighed:
# the same again gets the same answer, so nvidia-smi is not asked again.
_Weighed = tuple[tuple[tuple[int, tuple[str, ...]], ...], tuple[int, ...]]


def mig_candidates(queue: JobQueue, attempts: Attempts) -> list[QueuedDemand]:
    """The queued single-GPU jobs a MIG slice could take, in placement order, held ones
    included (hold a sweep, repartition for it, release it). A job that must run alone
    (after an out-of-memory death) is left to whole GPUs."""
    queued = []
    for job in queue.ordered():
        if job.spec.gpus != 1:
            continue
        demand = attempts.demand(job)
        if not demand.exclusive:
            queued.append(
                QueuedDemand(
                    job.id, job.name, demand.memory_mib, demand.sm_pct, job.held, demand.membw_pct
                )
            )
    return queued


class Scheduler:
    def __init__(
        self,
        station: CurrentStation,
        store: Store,
        queue: JobQueue,
        attempts: Attempts,
        telemetry: TelemetrySink,
        mps: MpsWatch,
        events: EventPublisher,
        due: PlacementDue,
        cores: int,
        learning: StationLearning,
        mig: MigControl,
    ) -> None:
        self.station = station
        self.store = store
        self.queue = queue
        self.attempts = attempts
        self.telemetry = telemetry
        self.mps = mps
        self.events = events
        self.due = due
        self.cores = cores
        self.learning = learning  # the interference model, learned on this station
        self.mig = mig
        self.weighed: _Weighed | None = None  # what the last repartition check looked at
        self.policy: PlacementPolicy = make_policy(station.config.policy)
        self.retry_at: float | None = None  # when to retry after a failed step
        self.overtaken: dict[int, int] = {}  # queued job id -> later jobs started before it

    def station_view(self) -> StationView:
        live = list(self.attempts)
        monitor = self.telemetry.monitor
        return StationView(
            config=self.station.config,
            cores=self.cores,
            busy_slots=frozenset(a.slot for a in live if not a.gpus),
            backend=monitor.backend.name,
            gpu_states=gpu_states(
                monitor,
                [a.running() for a in live],
                self.telemetry.lost_gpus,
                self.mps.usable,
            ),
            gpu_problem=None if monitor.opened else monitor.open_problem,
            simulated=monitor.simulated,
            overtaken=self.overtaken,
            demands=self._demands_beyond_hints(),
            interference=self.learning.model,
        )

    def _demands_beyond_hints(self) -> dict[int, Demand]:
        """Queued jobs whose demand is not just their own hints: raised after an OOM, or
        completed by what earlier runs measured. The policy derives every other job's demand
        from its hints itself, so a long queue costs nothing here."""
        history = self.attempts.history
        return {
            job.id: self.attempts.demand(job)
            for job in self.queue.placeable()
            if job.spec.gpus
            and (
                job.demand or (history and (job.spec.memory_gb is None or job.spec.sm_pct is None))
            )
        }

    def explain_wait(self, job: JobRecord) -> str:
        return self.policy.explain_wait(job, self.queue.placeable(), self.station_view())

    def retry_in(self, seconds: float) -> None:
        """A loop step failed: schedule again after `seconds` even if nothing changes."""
        self.retry_at = time.monotonic() + seconds

    def schedule_if_due(self) -> None:
        if self.due.pending or (self.retry_at is not None and time.monotonic() >= self.retry_at):
            self.retry_at = None
            self.schedule()

    def schedule(self) -> None:
        self.due.pending = False
        if not self.queue:
            return
        view = self.station_view()
        schedule_pass(
            self.policy.place(self._placeable(), view),
            self._relayable(view),
            commit=self._commit,
            repartition=lambda relayable: self.repartition(relayable, view),
            place_again=lambda: self.policy.place(self._placeable(), self.station_view()),
        )

    def _placeable(self) -> list[JobRecord]:
        jobs = self.queue.placeable()
        monitor = self.telemetry.monitor
        if monitor.inventory and monitor.latest is None:
            # The GPUs are known but not read yet (the engine or its telemetry just started):
            # a MIG GPU would look whole and memory in use would be missed. GPU jobs wait for
            # the first sample, which schedules again.
            jobs = [job for job in jobs if not job.spec.gpus]
        return jobs

    def _commit(self, decision: Decision) -> None:
        for job_id, count in decision.overtaken.items():
            self.overtaken[job_id] = self.overtaken.get(job_id, 0) + count
        for rejection in decision.rejections:
            self.queue.remove(rejection.job_id)
            self.store.finish_queued(rejection.job_id, JobState.FAILED, rejection.reason)
            self.events.job(rejection.job_id, rejection.reason)
        for placement in decision.placements:
            job = self.queue.remove(placement.job_id)
            assert job is not None, f"the policy placed job {placement.job_id}, not queued"
            self.overtaken.pop(job.id, None)
            self.attempts.start(job, placement)

    def _relayable(self, view: StationView) -> set[int]:
        """The idle MIG-mode GPUs `auto` (or `mig`) may give a new layout now, under `[station]
        mig_repartition = true`."""
        if not self.station.config.repartitions_on_its_own:
            return set()
        return {g.index for g in view.gpu_states if g.mig_enabled and g.idle and not g.lost}

    def repartition(self, relayable: set[int], view: StationView) -> bool:
        """`auto` (or `mig`) with `[station] mig_repartition = true`: give each of the idle
        MIG-mode GPUs `relayable` (`_relayable(view)`) the layout the queue wants where the model
        says the change pays. True when one changed. `view` may be from before the pass started
        the placements elsewhere: those left these GPUs as they were.
        A failure (nvidia-smi, another user's process on the GPU) is an event, and the same
        GPUs and queue are not tried again until something changes."""
        idle = [g for g in view.gpu_states if g.index in relayable]
        queue = [q for q in mig_candidates(self.queue, self.attempts) if not q.held]
        if not idle or not queue:
            return False
        weighed: _Weighed = (
            tuple((g.index, tuple(sorted(s.profile for s in g.mig_slices))) for g in idle),
            tuple(q.job_id for q in queue),
        )
        if weighed == self.weighed:
            return False
        self.weighed = weighed
        try:
            applied = self.mig.repartition_for_queue(queue)
        except MigError as exc:
            message = f"MIG repartition for the queue not done: {exc}"
            log.warning(message)
            self.store.add_event("mig", message)
            return False
        return bool(applied)
