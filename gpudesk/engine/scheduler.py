"""Scheduling: the station as the placement policy sees it, asking the policy where queued jobs
go whenever something changed, and starting them there. Under `auto` with `[station]
mig_repartition = true`, idle MIG-mode GPUs first get the layout the queue wants where the
interference model says the change pays (gpudesk.policy.mig_payoff)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import msgspec

from gpudesk.core.job_changes import hold_code
from gpudesk.core.jobs import JobState
from gpudesk.core.mig_layout import MigError
from gpudesk.core.records import JobRecord
from gpudesk.engine import dependencies
from gpudesk.engine.activity import EngineActivity
from gpudesk.engine.attempts import Attempts
from gpudesk.engine.drain import Drain
from gpudesk.engine.events import EventPublisher
from gpudesk.engine.fair_usage import FairUsage
from gpudesk.engine.learning import StationLearning
from gpudesk.engine.offloop import SLICE_JOBS
from gpudesk.engine.preempting import RECHECK_S, Preempting
from gpudesk.engine.services.tracking.tracker import Tracking
from gpudesk.engine.state import CurrentStation, PlacementDue
from gpudesk.engine.station.mps_watch import MpsWatch
from gpudesk.engine.station.repartition.control import MigControl
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.policy import dependencies as job_dependencies
from gpudesk.policy import job_gates
from gpudesk.policy.demand import Demand
from gpudesk.policy.fairshare import (
    FairShare,
    fair_key,
    fair_order,
    fair_share_wait,
    pool_heads,
    several_users,
)
from gpudesk.policy.gpu_states import gpu_states
from gpudesk.policy.jct_order import shortest_first
from gpudesk.policy.mig_planner import any_whole_gpu, mig_candidates
from gpudesk.policy.policies import make_policy
from gpudesk.policy.policy import Decision, PlacementPolicy, Rejection, StationView
from gpudesk.policy.queue import JobQueue
from gpudesk.policy.schedule_pass import schedule_pass
from gpudesk.policy.user_limits import gpu_limit_refusal

# How long usage_by_user's answer is kept while no attempt starts or ends: what running attempts
# accrue in that time (1/60 GPU-h per GPU) cannot reorder users whose usage differs by more.
# Working it out costs what changed since the last time (fair_usage); remembering it spares
# even that to the placement passes and the desks' refreshes in between.
USAGE_REFRESH_S = 60.0


class _KeptUsage(msgspec.Struct, frozen=True):
    attempts: tuple[int, frozenset[int]]  # the newest attempt id and the running ones then
    share: FairShare
    at: float
    usage: dict[int, float]


log = logging.getLogger("gpudesk.engine")

# The idle MIG-mode GPUs (index, layout) and the queued jobs the last repartition check weighed:
# the same again gets the same answer, so nvidia-smi is not asked again.
_Weighed = tuple[tuple[tuple[int, tuple[str, ...]], ...], tuple[int, ...]]


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
        tracking: Tracking,
        activity: EngineActivity | None = None,
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
        self.tracking = tracking  # a tracked job waits (briefly) for its MLflow run
        self.activity = activity if activity is not None else EngineActivity()
        self._usage: _KeptUsage | None = None  # usage_by_user's last answer
        self.fair_usage = FairUsage(store, lambda: self.fair_share)
        self.weighed: _Weighed | None = None  # what the last repartition check looked at
        self.policy: PlacementPolicy = make_policy(station.config.policy)
        self.retry_at: float | None = None  # when to retry after a failed step
        self.overtaken: dict[int, int] = {}  # queued job id -> later jobs started before it
        self.held: dict[int, int] = {}  # GPU index -> the job the last pass held it for
        self.preempting = Preempting(attempts, store, events, learning)
        self.drain = Drain(store)  # drained: nothing new starts (engine/drain.py)
        self.next_begin: float | None = None  # the next queued job's begin time (wall clock)
        self.fails_left = SLICE_JOBS  # jobs this pass may still end (settle_dependencies, `_fail`)
        self.cut_short: set[int] = set()  # a round of cancels' rest (`settle_dependencies`)

    def station_view(self, queued_demands: bool = True) -> StationView:
        """The station as the policy sees it. Without `queued_demands` the queued jobs'
        demands are left out (`demands` empty): what judging a submit needs, without a pass
        over a long queue."""
        live = list(self.attempts)
        monitor = self.telemetry.monitor
        return StationView(
            config=self.station.config,
            cores=self.cores,
            busy_slots=frozenset(a.slot for a in live if not a.gpus),
            backend=monitor.backend.name,
            gpu_states=gpu_states(
                monitor,
                [a.running(self.learning.remaining(a)) for a in live],
                self.telemetry.lost_gpus,
                self.mps.usable,
            ),
            gpu_problem=None if monitor.opened else monitor.open_problem,
            simulated=monitor.simulated,
            overtaken=self.overtaken,
            held=self.held,
            demands=self._demands_beyond_hints() if queued_demands else {},
            interference=self.learning.model,
            gpus_read=monitor.latest is not None,
            run_time_of=self.attempts.demands.typical_run_s,  # measured, never claimed
        )

    def _demands_beyond_hints(self) -> dict[int, Demand]:
        """Queued jobs whose demand is not just their own hints: raised after an OOM,
        completed by what earlier runs measured, or a hint corrected by its family. The policy
        derives every other job's demand from its hints itself, so a long queue costs nothing
        here."""
        demands = self.attempts.demands
        history = demands.known
        return {
            job.id: demands.of(job)
            for job in self.queue.placeable()
            if job.spec.gpus
            and (
                job.demand
                or (history and (job.spec.memory_gb is None or job.spec.sm_pct is None))
                or demands.corrects(job)
            )
        }

    def explain_wait(self, job: JobRecord) -> str:
        """Why a queued job waits: a per-user limit, else the policy's words, after where fair
        share put it when several users' jobs wait."""
        dependency = self.queue.blocked.get(job.id)
        if dependency is not None:
            return job_dependencies.waiting_text(dependency)
        if ending := self.queue.ending(job.id):  # can never start: its cancel or failure is due
            return ending
        drained = self.drain.explain()
        if drained:
            return drained
        now = time.time()
        if job_gates.begins_later(job, now):
            return job_gates.begin_text(job, now)
        throttle = self._throttle()
        if throttle.at_limit(job):
            return throttle.text(job)
        run_wait = self.tracking.waiting_text(job) if self.tracking.holds(job) else None
        if run_wait:
            return run_wait
        over = self._over_gpu_limit(job, self.running_gpus_by_user())
        if over:
            return f"waiting: {over}"
        queue = self.queue.waiting(self.queue.placeable())
        view = self.station_view()
        text = self.policy.explain_wait(job, queue, view)
        held_back = self.preempting.explain(job, view, self.policy)
        if held_back:
            text = f"{text}; {held_back}"
        if not several_users(queue):
            return text
        return fair_share_wait(job, queue, self.usage_by_user(), self.fair_share, text)

    def wait_codes(self, job_ids: Iterable[int]) -> dict[int, str]:
        """Why each of these queued jobs waits, as a short code in squeue's NODELIST(REASON)
        words (explain_wait says it at length): JobHeldUser (JobHeldClient: held while its
        submission arrives in parts), Dependency, BadConstraints (placement fails it next turn),
        TrackingRun (its MLflow run is being made), QOSMaxGRESPerUser (the owner's running jobs
        hold the GPUs [station] max_running_gpus_per_user allows), Resources (the next of its
        pool, GPU or CPU, to start: it waits for room), Priority (a job placement takes first
        waits too). Jobs not in the station's queue are left out. One pass over the queue for
        all, stopping early when one user's jobs wait: a listing page asks for up to 100."""
        wanted = {job_id: job for job_id in job_ids if (job := self.queue.get(job_id)) is not None}
        if not wanted:
            return {}
        held = self.running_gpus_by_user()
        limited = self.station.config.max_running_gpus_per_user is not None
        blocked, doomed, failing = self.queue.blocked, self.queue.doomed, self.queue.failing
        drained = self.drain.active
        now, throttle = time.time(), self._throttle()

        def blocker(job: JobRecord) -> str | None:
            if job.held:
                return hold_code(job)
            if job.id in blocked or job.id in doomed:
                return "Dependency"
            if job.id in failing:
                return "BadConstraints"  # placement fails it on a later turn
            if drained:
                return "Drained"
            if job_gates.begins_later(job, now):
                return job_gates.BEGIN_TIME
            if throttle.at_limit(job):
                return job_gates.ARRAY_LIMIT
            if job.spec.tracking is not None and self.tracking.holds(job):
                return "TrackingRun"
            if limited and self._over_gpu_limit(job, held):
                return "QOSMaxGRESPerUser"
            return None

        codes = {job_id: code for job_id, job in wanted.items() if (code := blocker(job))}
        if len(codes) == len(wanted):
            return codes
        # The head of each pool (GPU jobs, CPU jobs) in placement order (fair share's when
        # several users' jobs wait): it waits for room, the others behind it too.
        mixed = several_users(self.queue.ordered_iter())
        usage = self.usage_by_user() if mixed else {}
        heads = pool_heads(
            self.queue.ordered_iter(), lambda job: blocker(job) is not None, usage, mixed
        )
        for job_id, job in wanted.items():
            if job_id not in codes:
                head = heads.get(bool(job.spec.gpus))
                codes[job_id] = "Resources" if head is None or head == job_id else "Priority"
        return codes

    # ------------------------------------------------------- fair share, limits
    @property
    def fair_share(self) -> FairShare:
        config = self.station.config
        return FairShare(config.fairshare_half_life_h, config.fairshare_cpu_weight)

    def usage_by_user(self) -> dict[int, float]:
        """Each user's decayed usage in GPU-hour equivalents (placement.fairshare). Worked out
        again when an attempt started or ended, the weights changed, or USAGE_REFRESH_S passed;
        else remembered: both `status` (each refresh of every desk) and each placement pass
        while several users wait ask for it."""
        now = time.time()
        share = self.fair_share
        # Attempts that started (a newer id) or ended (the running set shrank) since: an end
        # alone never brings back an earlier pair, so the pair changes with every start and end.
        running = frozenset(a.attempt.id for a in self.attempts)
        attempts = (self.store.newest_attempt_id(), running)
        kept = self._usage
        if (
            kept is None
            or kept.attempts != attempts
            or kept.share != share
            or now - kept.at >= USAGE_REFRESH_S
            or self.fair_usage.building  # what it answered lacked the oldest attempts
        ):
            usage = self.fair_usage.usage_by_user(now)
            kept = self._usage = _KeptUsage(attempts, share, now, usage)
        return kept.usage

    def running_gpus_by_user(self) -> dict[int, int]:
        """GPUs each user's running attempts hold (a MIG slice or a shared GPU counts as one)."""
        held: dict[int, int] = {}
        for live in self.attempts:
            if live.gpus:
                held[live.uid] = held.get(live.uid, 0) + len(live.gpus)
        return held

    def _over_gpu_limit(self, job: JobRecord, held: dict[int, int]) -> str:
        """Why the job may not start under `[station] max_running_gpus_per_user`, or ""."""
        return gpu_limit_refusal(job, held, self.station.config.max_running_gpus_per_user)

    def _throttle(self) -> job_gates.ArrayThrottle:
        return job_gates.ArrayThrottle(
            self.queue.ordered_iter(),
            lambda: dependencies.jobs_by_id(
                self.store, {a.attempt.job_id for a in self.attempts}
            ).values(),
        )

    def _within_limits(self, decision: Decision) -> Decision:
        """The decision without the placements that would take a user past `[station]
        max_running_gpus_per_user` (the policy places a pass's jobs without knowing owners)
        or run more of an array than its throttle. Those jobs stay queued and another pass
        comes, which leaves them out before the policy sees them (`_placeable`): each pass
        starts at least one job of every user it trims."""
        throttled = self._throttle().trim(
            decision, {p.job_id: j for p in decision.placements if (j := self.queue.get(p.job_id))}
        )
        if throttled is not decision:
            decision = throttled
            self.due.mark()
        if self.station.config.max_running_gpus_per_user is None:
            return decision
        held = self.running_gpus_by_user()
        kept = []
        for placement in decision.placements:
            job = self.queue.get(placement.job_id)
            if job is not None and self._over_gpu_limit(job, held):
                continue
            if job is not None and job.spec.gpus:
                held[job.owner.uid] = held.get(job.owner.uid, 0) + job.spec.gpus
            kept.append(placement)
        if len(kept) == len(decision.placements):
            return decision
        self.due.mark()
        return Decision(kept, decision.rejections, decision.overtaken)

    def retry_in(self, seconds: float) -> None:
        """A loop step failed: schedule again after `seconds` even if nothing changes."""
        self.retry_at = time.monotonic() + seconds

    def poll_timeout(self, timeout: float) -> float:
        """How long the loop may sleep: until a failed step's retry, or the next queued job's
        begin time (the loop wakes for it, never polling)."""
        if self.retry_at is not None:
            timeout = min(timeout, max(0.0, self.retry_at - time.monotonic()))
        if self.next_begin is not None:
            timeout = min(timeout, max(0.0, self.next_begin - time.time()))
        return timeout

    def schedule_if_due(self) -> None:
        if (
            self.due.pending
            or (self.retry_at is not None and time.monotonic() >= self.retry_at)
            or (self.next_begin is not None and time.time() >= self.next_begin)
        ):
            self.retry_at = None
            self.schedule()

    def schedule(self) -> None:
        self.due.pending = False
        self.next_begin = job_gates.next_begin(self.queue.ordered_iter(), time.time())
        if not self.queue:
            return
        # One budget for the turn's cancels and failures alike: the loop is held by jobs ended,
        # whichever the reason, so a turn ends at most SLICE_JOBS, not a slice of each.
        self.fails_left = SLICE_JOBS
        self.settle_dependencies()
        if self.drain.active:  # undrain marks placement due
            return
        self.queue.failing = {}  # this pass's failures past its slice (`_fail`)
        view = self.station_view()
        schedule_pass(
            self._within_limits(self._decide(self._placeable(), view)),
            self._relayable(view),
            commit=self._commit,
            repartition=lambda relayable: self.repartition(relayable, view),
            place_again=lambda: self._within_limits(
                self._decide(self._placeable(), self.station_view())
            ),
        )
        self._preempt_if_due()

    def _preempt_if_due(self) -> None:
        """A full station: may a running preemptible job give way to a waiting one
        (engine/preempting.py)? Asked again every RECHECK_S while one runs and a GPU job waits.
        Cheap while no preemptible job runs: nothing is asked of the queue or the view then."""
        if not self.queue or not self.preempting.candidates():
            return
        waiting = self.queue.waiting(self._placeable())
        if not any(j.spec.gpus for j in waiting):
            return
        if self.preempting.consider(waiting, self.station_view(), self.policy):
            self.retry_in(RECHECK_S)

    def _decide(self, jobs: list[JobRecord], view: StationView) -> Decision:
        """The policy's decision for `jobs`, its time counted (gpudesk_placement_decision_seconds):
        the policy call alone, not building the view or starting what it placed."""
        started = time.perf_counter()
        decision = self.policy.place(jobs, view)
        self.activity.decided(time.perf_counter() - started)
        self.held = decision.held
        return decision

    def settle_dependencies(self) -> None:
        """Find the queued jobs still waiting for the jobs they run after, and cancel those
        that never can start (and, in turn, the jobs waiting for them): as many as `fails_left`
        in one transaction, the rest on the next turns, placement due, and kept from placement
        till then (`queue.doomed`). Before, a commit each: 500 held the loop 70-195 ms."""
        while True:
            waiting = [job for job in self.queue.ordered() if job.spec.dependencies]
            known = dependencies.dependencies_of(self.store, waiting)
            found = job_dependencies.settle(waiting, known)
            ending = found.cancels(self.cut_short)
            cancelling = ending[: self.fails_left]
            if cancelling:
                self.store.finish_queued(cancelling, JobState.CANCELLED)
            self.cut_short = {job_id for job_id, _ in ending[len(cancelling) :]}
            self.fails_left -= len(cancelling)
            self._ended(cancelling)
            self.queue.blocked = found.blocked
            ended = {job_id for job_id, _ in cancelling}
            self.queue.doomed = {job_id: why for job_id, why in found.never if job_id not in ended}
            if self.cut_short:
                self.due.mark()  # the next turn, once every client is answered
            if not cancelling or self.cut_short:
                return

    def _placeable(self) -> list[JobRecord]:
        jobs = [job for job in self.queue.placeable() if not self.tracking.holds(job)]
        throttle = self._throttle()
        if throttle.limits:
            jobs = [job for job in jobs if not throttle.at_limit(job)]
        monitor = self.telemetry.monitor
        if monitor.inventory and monitor.latest is None:
            # The GPUs are known but not read yet (the engine or its telemetry just started):
            # a MIG GPU would look whole and memory in use would be missed. GPU jobs wait for
            # the first sample, which schedules again.
            jobs = [job for job in jobs if not job.spec.gpus]
        if self.station.config.max_running_gpus_per_user is not None:
            held = self.running_gpus_by_user()
            jobs = [job for job in jobs if not self._over_gpu_limit(job, held)]
        mixed = several_users(jobs)
        usage = self.usage_by_user() if mixed else {}
        if mixed:
            jobs = fair_order(jobs, usage)
        if self.station.config.queue_order == "shortest":
            now = time.time()
            jobs = shortest_first(
                jobs,
                self.attempts.demands.typical_run_s,  # measured by the engine, never claimed
                lambda job: now - job.submitted_at,
                lambda job: fair_key(job, usage)[:2] if mixed else (-job.spec.priority,),
            )
        return jobs

    def _commit(self, decision: Decision) -> None:
        for job_id, count in decision.overtaken.items():
            self.overtaken[job_id] = self.overtaken.get(job_id, 0) + count
        self._fail(decision.rejections)
        for placement in decision.placements:
            queued = self.queue.get(placement.job_id)
            if queued is not None and self.tracking.prepare(queued):
                continue  # it waits for its MLflow run, made now; placed again once it is
            job = self.queue.remove(placement.job_id)
            assert job is not None, f"the policy placed job {placement.job_id}, not queued"
            self.overtaken.pop(job.id, None)
            self.attempts.start(job, placement)
            self.activity.placed(placement.mode)

    def _fail(self, rejections: list[Rejection]) -> None:
        """Fail the jobs the policy says can never run here, SLICE_JOBS a pass in one transaction,
        the rest in later passes a turn apart (a commit each held the loop 60-120 ms for 500)."""
        failing = rejections[: self.fails_left]
        self.fails_left -= len(failing)
        if len(failing) < len(rejections):
            self.due.mark()  # the next turn, once every client is answered
            self.queue.failing.update((r.job_id, r.reason) for r in rejections[len(failing) :])
        if failing:
            ended = [(r.job_id, r.reason) for r in failing]
            self.store.finish_queued(ended, JobState.FAILED)
            self._ended(ended)

    def _ended(self, ended: list[tuple[int, str]]) -> None:
        """Jobs just ended in the queue, each (id, why): out of it, and subscribers told, their
        records read in one query a slice, not a SELECT each (bench/queue_ends.py)."""
        records = dependencies.jobs_by_id(self.store, [job_id for job_id, _ in ended])
        for job_id, reason in ended:
            self.queue.remove(job_id)
            self.events.job(job_id, reason, records.get(job_id))

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
        whole = any_whole_gpu(view.gpu_states)
        # for jobs that may start: not held, waiting on or doomed by another job, or failing
        may = {job.id for job in self.queue.waiting(self.queue.placeable())}
        queue = [
            q for q in mig_candidates(self.queue, self.attempts.demands, whole) if q.job_id in may
        ]
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
