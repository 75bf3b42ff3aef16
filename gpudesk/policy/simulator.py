"""`gpudesk simulate`: replay a job trace on a simulated station through the engine's own
placement policies, with the interference model (`interference.py`) as the ground truth.

The simulator is event-driven. Between two events every running job progresses at the rate the
interference model gives it with the TRUTH parameters (exclusive 1.0; MPS and naive time-slicing
by its co-tenants' SM and bandwidth demand; a MIG slice by its share of the SMs and of the DRAM
bandwidth; an MPS thread cap stretches its kernels). The policy sees the same model through a
`Learner` whose prior is the published defaults (or, for a run that should know it, the truth),
and, with learning on, the learner is fed what the engine would measure: each job's rate over
every stretch of at least `OBSERVE_AFTER_S` seconds in which its co-tenants stayed the same.
A job whose true peak memory exceeds what it was given dies with an out-of-memory error when it
reaches that peak and goes back to the queue with the policy's recovery (a raised estimate, an
exclusive GPU). Power follows the work each GPU does, between the model's idle and busy draw,
for every GPU until the last job ends. docs/simulator.md has the assumptions.

Here are the replay's loop and the engine's scheduling pass; its pieces are beside it: the
station and its MIG slices (`sim_station`), the true rates (`sim_rates`), what the learner is
fed (`sim_learning`), the next event and the time up to it (`sim_clock`), memory and OOM
deaths (`sim_oom`), MIG repartitioning (`sim_repartition`), preemption (`sim_preemption`), the
queue and its demands (`sim_queue`) and its order (`sim_order`), the station as the policy sees
it (`sim_view`), the runs and the result (`sim_records`) and the lower bounds (`sim_bounds`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.policy.hint_correction import HintRatios
from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    InterferenceModel,
    Learner,
    ModelParams,
)
from gpudesk.policy.policies import make_policy
from gpudesk.policy.policy import Decision, MigSlice, Placement, StationView
from gpudesk.policy.queueing_form import TruthForm
from gpudesk.policy.schedule_pass import schedule_pass
from gpudesk.policy.sim_clock import SAMPLE_WINDOW_S, advance, next_event_at
from gpudesk.policy.sim_learning import OBSERVE_AFTER_S, close_segment, track_segments
from gpudesk.policy.sim_oom import MAX_ATTEMPTS, MAX_RAMP_S, RAMP_S, crash_out_of_memory, peak_at
from gpudesk.policy.sim_order import FamilyRunTimes
from gpudesk.policy.sim_preemption import leave_due, preempt_if_due
from gpudesk.policy.sim_queue import SimQueue
from gpudesk.policy.sim_rates import true_rates
from gpudesk.policy.sim_records import Occupancy, SimResult, SimRun, new_run, sim_result
from gpudesk.policy.sim_repartition import relayable, repartition
from gpudesk.policy.sim_station import (
    carve_fixed,
    fixed_layouts,
    impossible,
    slice_for,
    slice_of,
    station_gpus,
)
from gpudesk.policy.sim_view import learn_hint_ratios, station_view
from gpudesk.policy.trace import (
    DEFAULT_STATION,
    ESTIMATORS,
    GUESSING_ESTIMATORS,
    SM_BY_CLASS,
    SM_BY_MODEL,
    Trace,
    TraceError,
    TraceJob,
    layout_fits,
    load_trace,
    load_truth,
    parse_mig,
    simulated_profiles,
    with_progress_lines,
)
from gpudesk.text import quoted

__all__ = [
    "DEFAULT_STATION",
    "ESTIMATORS",
    "GUESSING_ESTIMATORS",
    "MAX_ATTEMPTS",
    "MAX_RAMP_S",
    "OBSERVE_AFTER_S",
    "RAMP_S",
    "SAMPLE_WINDOW_S",
    "SM_BY_CLASS",
    "SM_BY_MODEL",
    "Occupancy",
    "SimResult",
    "Simulation",
    "Trace",
    "TraceError",
    "TraceJob",
    "layout_fits",
    "load_trace",
    "load_truth",
    "parse_mig",
    "simulate",
    "simulated_profiles",
    "with_progress_lines",
]


# --------------------------------------------------------------------------------- the replay


class Simulation:
    def __init__(
        self,
        trace: Trace,
        *,
        policy: str,
        station: str = DEFAULT_STATION,
        estimator: str = "gpumemnet",
        mps: bool = True,
        truth: ModelParams = DEFAULT_PARAMS,
        policy_params: ModelParams | None = None,
        learn: bool = True,
        mig: Mapping[int, Sequence[str]] | str | None = None,
        mig_repartition: bool = False,
        preempt: bool = True,
        queue_order: str = "submission",
        truth_form: TruthForm | None = None,
    ) -> None:
        self.model, self.gpu_count = station_gpus(station)
        if estimator not in ESTIMATORS:
            known = ", ".join(ESTIMATORS)
            raise ValueError(f"unknown estimator {quoted(estimator)}; known: {known}")
        self.trace, self.station, self.estimator, self.mps = trace, station, estimator, mps
        self.policy_name = policy
        self.policy = make_policy(policy)
        self.config = StationConfig(backend=station, policy=policy, mig_repartition=mig_repartition)
        self._set_up_truth_and_learner(truth, truth_form, policy_params, learn)
        self._set_up_mig(mig)
        self.now = 0.0
        self.hint_ratios = HintRatios()  # sim_view: hints corrected by their family
        self._set_up_runs(trace)
        self._set_up_tallies()
        self.preempt = preempt  # the engine's preemption rule (sim_preemption), on by default
        self.queue_order = queue_order  # "shortest": sim_order.py, as the engine's jct_order
        self.family_times = FamilyRunTimes()

    def _set_up_truth_and_learner(
        self,
        truth: ModelParams,
        truth_form: TruthForm | None,
        policy_params: ModelParams | None,
        learn: bool,
    ) -> None:
        """The truth the replay runs on, and the learner the policy sees it through."""
        self.truth = truth
        # the truth's form for shared GPUs: the product's (None) or the queueing form, in which
        # the members of a group slow each other unequally (queueing_form.py)
        self.truth_form = truth_form
        self.learn = learn
        self.learner = Learner(
            policy_params or DEFAULT_PARAMS, "published" if policy_params is None else "given"
        )
        self.interference = InterferenceModel(self.learner)
        self.observations = 0
        self.ran_alone: set[str] = set()  # families whose steady SM share was measured alone
        self.unmeasured_intervals = 0  # stretches not learned from: a family never ran alone

    def _set_up_mig(self, mig: Mapping[int, Sequence[str]] | str | None) -> None:
        """The station's MIG slices and what becomes of them (repartitions, policy errors)."""
        # MIG: each model's own table; GPUs given a layout are fixed, the rest carved on demand
        # under --policy mig (sim_station).
        self.table = simulated_profiles(self.model.name)
        self.mig_layouts = fixed_layouts(self, mig)
        self.fixed: set[int] = set()
        self.slices: dict[int, list[MigSlice]] = {i: [] for i in range(self.gpu_count)}
        self.slice_serial = 0
        carve_fixed(self, self.mig_layouts)
        self.reconfig_until: dict[int, float] = {}
        self.repartitions = 0
        self.mig_violations = 0

    def _set_up_runs(self, trace: Trace) -> None:
        """Every trace job's run, those that can run here pending in arrival order, and the
        queue and the station empty."""
        self.runs = [new_run(job, self.estimator) for job in trace.jobs]
        self.run_of = {r.record.id: r for r in self.runs}  # by job id, for StationView
        for run in self.runs:
            run.impossible = impossible(self, run.job)
        # in arrival order (a deque: a long trace's arrivals are taken from its front)
        self.pending = deque(r for r in self.runs if r.impossible is None)
        # in the engine's order, with each job's demand as the policy is told it (sim_queue)
        self.queue = SimQueue(self.hint_ratios)
        self.running: list[SimRun] = []
        self.overtaken: dict[int, int] = {}
        self.placed_at: dict[int, float] = {}

    def _set_up_tallies(self) -> None:
        """What the replay counts and measures as it goes, for its result."""
        self.sm_history: dict[int, list[tuple[float, float]]] = {
            i: [] for i in range(self.gpu_count)
        }
        self.energy_j = 0.0
        self.busy_s = 0.0
        self.ooms = 0
        self.recovered = 0
        self.decision_ms: list[float] = []
        self.modes: dict[str, int] = {}
        self.lost_why: dict[int, str] = {}
        self.occupancies: list[Occupancy] = []
        self.preemptions = 0

    # ------------------------------------------------------------ the model
    def tenants_on(self, gpu: int) -> list[SimRun]:
        return [r for r in self.running if r.placement and gpu in r.placement.gpus]

    def rate(self, run: SimRun) -> float:
        """A running job's true rate now (sim_rates)."""
        return true_rates(self)[run.job.id]

    # --------------------------------------------------------------- events
    def run(self) -> SimResult:
        self._arrive()
        self._schedule()
        while self.pending or self.queue or self.running:
            rates = true_rates(self)
            track_segments(self, rates)
            at = next_event_at(self, rates)
            if at is None:
                for r in self.queue:
                    r.lost = True
                    self.lost_why[r.job.id] = "the policy never placed it, even on an empty station"
                self.queue.clear()
                break
            step = max(0.0, at - self.now)
            advance(self, step, rates)
            self._finish_and_crash()
            self._arrive()
            self._schedule()
        return self._result()

    def _finish_and_crash(self) -> None:
        leave_due(self)
        for run in list(self.running):
            if run.work_done >= run.job.steady_s - 1e-6:
                self.stop(run)
                run.finished_at = self.now
                self.family_times.finished(run, self.now - run.started_at)
                if run.attempts > 1:
                    self.recovered += 1
        crash_out_of_memory(self)

    def stop(self, run: SimRun, ended: str = "finished") -> None:
        """The job leaves its GPUs: "finished", "oom" or "preempted" (sim_preemption)."""
        placement = run.placed
        mig = slice_of(self, run) if placement.mode == "mig" else None
        self.occupancies.append(
            Occupancy(
                run.job.id,
                tuple(placement.gpus),
                placement.mode,
                run.started_at,
                self.now,
                ended,
                mig.profile if mig is not None else None,
            )
        )
        gpu = placement.gpus[0]
        for other in self.tenants_on(gpu):  # its stretch and its co-tenants' end here
            close_segment(self, other)
        self.running.remove(run)
        if placement.mig_slice is not None and gpu not in self.fixed:
            self.slices[gpu] = [s for s in self.slices[gpu] if s.key != placement.mig_slice]
        run.placement = None

    def _arrive(self) -> None:
        while self.pending and self.pending[0].job.arrival_s <= self.now + 1e-9:
            self.queue.add(self.pending.popleft())

    # ------------------------------------------------------------ placement
    def view(self) -> StationView:
        return station_view(self)

    def _schedule(self) -> None:
        """The engine's scheduling pass (`schedule_pass`, as engine.scheduler runs it)."""
        learn_hint_ratios(self)  # as the engine does, whether or not any job waits
        if not self.queue:
            return
        schedule_pass(
            self._place(self.view()),
            relayable(self),
            commit=self._commit,
            repartition=lambda gpus: repartition(self, gpus),
            place_again=lambda: self._place(self.view()) if self.queue else Decision(),
        )
        if self.preempt:
            preempt_if_due(self)

    def _place(self, view: StationView) -> Decision:
        started = time.perf_counter()
        records: Sequence[JobRecord]
        if self.queue_order == "shortest":
            records = self.family_times.ordered(self.queue.runs, self.now)
        else:
            # by class (queue_classes): the policy's pass over a long queue visits it so
            records = self.queue.classed()
        decision = self.policy.place(records, view)
        self.decision_ms.append((time.perf_counter() - started) * 1000)
        return decision

    def _commit(self, decision: Decision) -> None:
        for job_id, count in decision.overtaken.items():
            self.overtaken[job_id] = self.overtaken.get(job_id, 0) + count
        by_id = self.queue.by_id
        # the jobs placed, as the queue was before any rejection below
        placed = [(p, by_id[p.job_id]) for p in decision.placements if p.job_id in by_id]
        for rejection in decision.rejections:
            run = by_id.get(rejection.job_id)
            if run is None:
                continue
            run.lost = True
            self.lost_why[run.job.id] = f"rejected by the policy: {rejection.reason}"
            self.queue.remove(run)
        placements = [p for p, _ in placed]
        # A GPU in MIG mode runs work only on its MIG devices: a whole-GPU placement on a
        # fixed-layout GPU (never `mig_dynamic`) is a policy error the simulator counts (and
        # still plays out).
        self.mig_violations += sum(
            1 for p in placements if p.mode != "mig" and self.fixed.intersection(p.gpus)
        )
        for placement, run in placed:
            self._start(run, placement)

    def _start(self, run: SimRun, placement: Placement) -> None:
        self.queue.remove(run)
        self.overtaken.pop(run.record.id, None)
        run.placement, run.started_at, run.attempts = placement, self.now, run.attempts + 1
        # Each attempt starts up again (the trace's `startup_s`: no share of the GPU, at
        # wall-clock speed), then a resumed job restores its checkpoint (sim_preemption): no
        # steady work is done, and none slows its tenants, until both are over.
        run.blocked_until = self.now + run.job.startup_s + run.restore_s
        run.restore_s = 0.0
        if run.first_start is None:
            run.first_start = self.now
        run.peak_at = peak_at(run)  # sim_oom
        run.limit_mib = None
        if placement.mode == "mps" and placement.mps_memory_limit_mib:
            run.limit_mib = float(placement.mps_memory_limit_mib)
        if placement.mode == "mig" and placement.mig_slice:
            run.limit_mib = slice_for(self, placement).memory_mib
        self.modes[placement.mode] = self.modes.get(placement.mode, 0) + 1
        for index in placement.gpus:
            self.placed_at[index] = self.now
        self.running.append(run)

    # --------------------------------------------------------------- results
    def _result(self) -> SimResult:
        return sim_result(self)


def simulate(trace: Trace, policies: Sequence[str], **options: Any) -> list[SimResult]:
    return [Simulation(trace, policy=p, **options).run() for p in policies]
