"""`gpudesk simulate`: replay a job trace on a simulated station through the engine's own
placement policies, under the interference model written down in docs/simulator.md.

The simulator is event-driven. Between two events every running job progresses at a rate that
depends on who shares its GPU and how (exclusive 1.0; MPS and naive time-slicing slow each
tenant once their combined demand exceeds the GPU, naive more than MPS, plus a small per-tenant
cost; a MIG slice runs at its share of the SMs). A job whose true peak memory exceeds what it was
given dies with an out-of-memory error when it reaches that peak and goes back to the queue with
the policy's recovery (a raised estimate, an exclusive GPU). Power follows the work each GPU does,
between the model's idle and busy draw, for every GPU until the last job ends.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudesk.engine.jobs import JobSpec, JobState
from gpudesk.engine.mig.profiles import CARVED_PROFILES, COMPUTE_SLICES
from gpudesk.engine.placement.demand import PEAK_SETTLED_S, Demand, reservation
from gpudesk.engine.placement.policy import (
    GpuState,
    MigSlice,
    Placement,
    StationView,
    Tenant,
    make_policy,
)
from gpudesk.engine.station import StationConfig
from gpudesk.engine.store.records import JobRecord
from gpudesk.engine.telemetry.backend import check_backend_name, parse_sim_name
from gpudesk.engine.telemetry.sim import STATIONS, GpuModel
from gpudesk.units import J_PER_KWH, MIB_PER_GB, S_PER_HOUR

# SM activity of a job running alone, by the trace's class; DLRM is the published ~5 %. The class
# values are calibrated so that CARMA's own rules reproduce its published result on this trace
# (about 0.65x the exclusive makespan, 15 % less energy): see docs/simulator.md. A user knows
# roughly this much about a job and gives it as the `sm_pct` hint.
SM_BY_CLASS = {"light": 10.0, "medium": 30.0, "heavy": 70.0}
SM_BY_MODEL = {"DLRM": 5.0}
ESTIMATORS = ("gpumemnet", "horus", "faketensor")
MAX_ATTEMPTS = 4  # a job that dies this often is lost

# The interference model (docs/simulator.md).
MPS_TENANT_COST = 0.04  # each co-tenant under MPS costs a job this much (DLRM + ResNet152: ~5 %)
CONTENTION = 0.28  # beyond a full GPU, each unit of excess demand costs this (2 x ResNet152: ~1x)
NAIVE_TENANT_COST = 0.10  # time-slicing switches whole contexts: dearer than MPS
KERNEL_ACTIVE_FLOOR = 0.2  # naive slicing is paced by kernel-active time: SM activity + this
RAMP_S = 60.0  # a job reaches its peak memory over its first epoch: 10 % of its run,
MAX_RAMP_S = 600.0  # at least a minute and at most ten
SAMPLE_WINDOW_S = 30.0  # what "recent SM activity" averages over, for the policy


class TraceError(ValueError):
    pass


@dataclass(frozen=True)
class TraceJob:
    id: int
    name: str
    arrival_s: float
    gpus: int
    exclusive_s: float
    peak_memory_mib: float
    sm_pct: float
    job_class: str
    estimates: dict[str, float]


@dataclass(frozen=True)
class Trace:
    name: str
    station: str
    jobs: tuple[TraceJob, ...]


def load_trace(path: str | Path) -> Trace:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise TraceError(f"cannot read the trace {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path} is not a JSON trace: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise TraceError(f'{path}: expected an object with a non-empty "jobs" list')
    jobs = []
    for i, raw in enumerate(data["jobs"]):
        try:
            cls = str(raw.get("class", "medium"))
            jobs.append(
                TraceJob(
                    id=int(raw.get("id", i + 1)),
                    name=str(raw.get("task") or raw.get("model") or f"job{i + 1}"),
                    arrival_s=float(raw["arrival_s"]),
                    gpus=int(raw.get("gpus", 1)),
                    exclusive_s=float(raw["exclusive_minutes"]) * 60.0,
                    peak_memory_mib=float(raw["peak_memory_mb"]),
                    sm_pct=SM_BY_MODEL.get(str(raw.get("model")), SM_BY_CLASS.get(cls, 50.0)),
                    job_class=cls,
                    estimates={
                        e: float(raw[f"estimate_{e}_mb"])
                        for e in ESTIMATORS
                        if raw.get(f"estimate_{e}_mb") is not None
                    },
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"{path}: jobs[{i}]: missing or bad field ({exc})") from None
        if jobs[-1].gpus < 1 or jobs[-1].exclusive_s <= 0:
            raise TraceError(f"{path}: jobs[{i}]: gpus and exclusive_minutes must be positive")
    jobs.sort(key=lambda j: (j.arrival_s, j.id))
    return Trace(str(data.get("name", Path(path).stem)), str(data.get("station", "")), tuple(jobs))


@dataclass
class _Run:
    job: TraceJob
    record: JobRecord
    demand: Demand
    queued_at: float
    attempts: int = 0
    first_start: float | None = None
    finished_at: float | None = None
    lost: bool = False
    # while running
    placement: Placement | None = None
    started_at: float = 0.0
    work_done: float = 0.0  # seconds of exclusive-speed work
    limit_mib: float | None = None  # the memory it may use (MPS limit, MIG slice)
    peak_at: float = 0.0  # when it reaches its peak memory

    @property
    def running(self) -> bool:
        return self.placement is not None

    @property
    def placed(self) -> Placement:
        """The placement of a running job (the simulator only asks while it runs)."""
        assert self.placement is not None, f"job {self.job.id} is not running"
        return self.placement


@dataclass
class SimResult:
    policy: str
    estimator: str
    station: str
    jobs: int
    makespan_s: float
    mean_jct_s: float
    p95_jct_s: float
    mean_wait_s: float
    gpu_busy_hours: float
    energy_kwh: float
    oom_crashes: int
    oom_recovered: int
    lost: int
    decisions: int
    decision_p99_ms: float
    modes: dict[str, int] = field(default_factory=dict)  # placements by mode

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in vars(self).items()}


class Simulation:
    def __init__(
        self,
        trace: Trace,
        *,
        policy: str,
        station: str = "sim:dgx-station-a100",
        estimator: str = "gpumemnet",
        mps: bool = True,
    ) -> None:
        check_backend_name(station)
        if not station.startswith("sim:"):
            raise ValueError(f"simulate needs a simulated station (sim:...), not {station!r}")
        model_name, count = parse_sim_name(station)
        self.model: GpuModel = STATIONS[model_name][0]
        self.gpu_count = count or STATIONS[model_name][1]
        if estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator {estimator!r}; known: {', '.join(ESTIMATORS)}")
        self.trace, self.station, self.estimator, self.mps = trace, station, estimator, mps
        self.policy_name = policy
        self.policy = make_policy(policy)
        self.config = StationConfig(backend=station, policy=policy)
        self.now = 0.0
        self.runs = [self._new_run(job) for job in trace.jobs]
        self.pending = list(self.runs)  # not yet arrived, in arrival order
        self.queue: list[_Run] = []
        self.running: list[_Run] = []
        self.overtaken: dict[int, int] = {}
        self.mig: dict[int, list[MigSlice]] = {i: [] for i in range(self.gpu_count)}
        self.placed_at: dict[int, float] = {}
        self.sm_history: dict[int, list[tuple[float, float]]] = {
            i: [] for i in range(self.gpu_count)
        }
        self.energy_j = 0.0
        self.busy_s = 0.0
        self.ooms = 0
        self.recovered = 0
        self.decision_ms: list[float] = []
        self.modes: dict[str, int] = {}

    def _new_run(self, job: TraceJob) -> _Run:
        guess = job.estimates.get(self.estimator, job.peak_memory_mib)
        spec = JobSpec(
            name=job.name,
            command=("simulated",),
            gpus=job.gpus,
            memory_gb=max(guess, 1.0) / MIB_PER_GB,
            sm_pct=job.sm_pct,
        )
        record = JobRecord(
            id=job.id,
            spec=spec,
            state=JobState.QUEUED,
            submitted_at=job.arrival_s,
            started_at=None,
            ended_at=None,
            attempts=0,
            exit_code=None,
            reason=None,
            cancel_requested=False,
        )
        return _Run(job, record, Demand(max(guess, 1.0), job.sm_pct, "hint"), job.arrival_s)

    # ------------------------------------------------------------ the model
    def _tenants(self, gpu: int) -> list[_Run]:
        return [r for r in self.running if r.placement and gpu in r.placement.gpus]

    def rate(self, run: _Run) -> float:
        placement = run.placement
        assert placement is not None
        if placement.mode == "mig":
            mig = next(s for s in self.mig[placement.gpus[0]] if s.key == placement.mig_slice)
            return min(
                1.0, (mig.compute_slices / COMPUTE_SLICES) / max(run.job.sm_pct / 100.0, 1e-6)
            )
        if placement.mode == "exclusive" or len(placement.gpus) > 1:
            return 1.0
        tenants = [t for t in self._tenants(placement.gpus[0]) if t.placed.mode != "mig"]
        n = len(tenants)
        if n <= 1:
            return 1.0
        if placement.mode == "mps":
            load = sum(t.job.sm_pct / 100.0 for t in tenants)
            cost = MPS_TENANT_COST
        else:
            load = sum(min(1.0, t.job.sm_pct / 100.0 + KERNEL_ACTIVE_FLOOR) for t in tenants)
            cost = NAIVE_TENANT_COST
        contention = max(0.1, 1.0 - CONTENTION * max(0.0, load - 1.0))
        return min(1.0, 1.0 / load) * max(0.1, 1.0 - cost * (n - 1)) * contention

    def _gpu_activity(self, gpu: int, rates: dict[int, float]) -> float:
        """SM activity (0..1) the GPU shows: the work its tenants get done."""
        return min(1.0, sum(t.job.sm_pct / 100.0 * rates[t.job.id] for t in self._tenants(gpu)))

    def _power(self, activity: float, tenants: int) -> float:
        m = self.model
        if not tenants:
            return m.idle_w
        return m.idle_w + (m.busy_w - m.idle_w) * (activity**0.9 + 0.03)

    # --------------------------------------------------------------- events
    def run(self) -> SimResult:
        self._arrive()
        self._schedule()
        while self.pending or self.queue or self.running:
            rates = {r.job.id: self.rate(r) for r in self.running}
            candidates = [r.arrival_s for r in (p.job for p in self.pending[:1])]
            for r in self.running:
                candidates.append(self.now + (r.job.exclusive_s - r.work_done) / rates[r.job.id])
                if r.peak_at > self.now:
                    candidates.append(r.peak_at)
                elif r.peak_at + PEAK_SETTLED_S > self.now:
                    candidates.append(r.peak_at + PEAK_SETTLED_S)  # its reservation is corrected
            if not candidates:
                stuck = ", ".join(r.job.name for r in self.queue)
                raise RuntimeError(f"the policy cannot place {stuck} on an empty station")
            step = max(0.0, min(candidates) - self.now)
            self._advance(step, rates)
            self._finish_and_crash(rates)
            self._arrive()
            self._schedule()
        return self._result()

    def _advance(self, step: float, rates: dict[int, float]) -> None:
        for gpu in range(self.gpu_count):
            tenants = self._tenants(gpu)
            activity = self._gpu_activity(gpu, rates)
            self.energy_j += self._power(activity, len(tenants)) * step
            if tenants:
                self.busy_s += step
            history = self.sm_history[gpu]
            history.append((self.now + step, activity * 100.0))
            while history and history[0][0] < self.now + step - SAMPLE_WINDOW_S:
                history.pop(0)
        for run in self.running:
            run.work_done += rates[run.job.id] * step
        self.now += step

    def _finish_and_crash(self, rates: dict[int, float]) -> None:
        for run in list(self.running):
            if run.work_done >= run.job.exclusive_s - 1e-6:
                self._stop(run)
                run.finished_at = self.now
                if run.attempts > 1:
                    self.recovered += 1
        for run in list(self.running):
            if abs(run.peak_at - self.now) < 1e-6 and self._out_of_memory(run):
                self._crash(run)

    def _out_of_memory(self, run: _Run) -> bool:
        peak = run.job.peak_memory_mib
        if run.limit_mib is not None and peak > run.limit_mib:
            return True
        gpu = run.placed.gpus[0]
        on_gpu = [t for t in self._tenants(gpu) if t.placed.mode != "mig"]
        if run.placed.mode == "mig":
            return False
        in_use = sum(t.job.peak_memory_mib if t.peak_at <= self.now else 0.0 for t in on_gpu)
        return in_use > self.model.memory_total_mib

    def _crash(self, run: _Run) -> None:
        self.ooms += 1
        observed = min(run.job.peak_memory_mib, run.limit_mib or self.model.memory_total_mib)
        self._stop(run)
        if run.attempts >= MAX_ATTEMPTS:
            run.lost = True
            return
        run.demand = run.demand.after_oom(observed)
        run.work_done = 0.0
        self.queue.append(run)
        self.queue.sort(key=lambda r: r.record.id)

    def _stop(self, run: _Run) -> None:
        placement = run.placement
        self.running.remove(run)
        if placement is not None and placement.mig_slice is not None:
            gpu = placement.gpus[0]
            self.mig[gpu] = [s for s in self.mig[gpu] if s.key != placement.mig_slice]
        run.placement = None

    def _arrive(self) -> None:
        while self.pending and self.pending[0].job.arrival_s <= self.now + 1e-9:
            self.queue.append(self.pending.pop(0))
        self.queue.sort(key=lambda r: r.record.id)

    # ------------------------------------------------------------ placement
    def view(self) -> StationView:
        states = []
        for gpu in range(self.gpu_count):
            tenants = []
            measured = 0.0
            for t in self._tenants(gpu):
                elapsed = self.now - t.started_at
                ramp = max(1e-6, t.peak_at - t.started_at)
                used = t.job.peak_memory_mib * min(1.0, elapsed / ramp)
                measured += used
                # Its memory stops growing at its peak; the engine's rule takes it from there.
                reserved = reservation(
                    t.demand.memory_mib,
                    used,
                    self.now - t.peak_at if t.peak_at <= self.now else 0.0,
                )
                tenants.append(
                    Tenant(t.job.id, t.placed.mode, reserved, t.job.sm_pct, t.placed.mig_slice)
                )
            history = self.sm_history[gpu]
            window = statistics.fmean(v for _, v in history) if history else 0.0
            states.append(
                GpuState(
                    index=gpu,
                    uuid=f"GPU-SIM-{gpu}",
                    memory_total_mib=self.model.memory_total_mib,
                    memory_used_mib=measured,
                    sm_activity_pct=window,
                    tenants=tuple(tenants),
                    mps_usable=self.mps,
                    mig_enabled=self.policy_name == "mig",
                    mig_slices=tuple(self.mig[gpu]),
                    mig_dynamic=True,
                    placed_s_ago=self.now - self.placed_at[gpu] if gpu in self.placed_at else None,
                )
            )
        return StationView(
            config=self.config,
            cores=64,
            backend=self.station,
            simulated=True,
            gpu_states=tuple(states),
            demands={r.record.id: r.demand for r in self.queue},
            overtaken=self.overtaken,
        )

    def _schedule(self) -> None:
        if not self.queue:
            return
        started = time.perf_counter()
        decision = self.policy.place([r.record for r in self.queue], self.view())
        self.decision_ms.append((time.perf_counter() - started) * 1000)
        for job_id, count in decision.overtaken.items():
            self.overtaken[job_id] = self.overtaken.get(job_id, 0) + count
        by_id = {r.record.id: r for r in self.queue}
        for rejection in decision.rejections:
            run = by_id[rejection.job_id]
            run.lost = True
            self.queue.remove(run)
        for placement in decision.placements:
            self._start(by_id[placement.job_id], placement)

    def _start(self, run: _Run, placement: Placement) -> None:
        self.queue.remove(run)
        self.overtaken.pop(run.record.id, None)
        run.placement, run.started_at, run.attempts = placement, self.now, run.attempts + 1
        if run.first_start is None:
            run.first_start = self.now
        run.peak_at = self.now + min(
            MAX_RAMP_S, max(RAMP_S, 0.1 * run.job.exclusive_s), run.job.exclusive_s / 2
        )
        run.limit_mib = None
        if placement.mode == "mps" and placement.mps_memory_limit_mib:
            run.limit_mib = float(placement.mps_memory_limit_mib)
        if placement.mode == "mig" and placement.mig_slice:
            gpu = placement.gpus[0]
            profile = placement.slot.split("/", 1)[1]
            carved = next(p for p in CARVED_PROFILES if p.name == profile)
            compute, memory = carved.compute_slices, carved.memory_mib
            self.mig[gpu].append(MigSlice(placement.mig_slice, profile, memory, compute, busy=True))
            run.limit_mib = memory
        self.modes[placement.mode] = self.modes.get(placement.mode, 0) + 1
        for gpu in placement.gpus:
            self.placed_at[gpu] = self.now
        self.running.append(run)

    # --------------------------------------------------------------- results
    def _result(self) -> SimResult:
        done = [r for r in self.runs if r.finished_at is not None]
        jct = [r.finished_at - r.job.arrival_s for r in done]  # type: ignore[operator]
        waits = [r.first_start - r.job.arrival_s for r in done]  # type: ignore[operator]
        ordered = sorted(jct)
        p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)] if ordered else 0.0
        decisions = sorted(self.decision_ms)
        p99 = (
            decisions[min(len(decisions) - 1, math.ceil(0.99 * len(decisions)) - 1)]
            if decisions
            else 0.0
        )
        return SimResult(
            policy=self.policy_name,
            estimator=self.estimator,
            station=self.station,
            jobs=len(self.runs),
            makespan_s=self.now,
            mean_jct_s=statistics.fmean(jct) if jct else 0.0,
            p95_jct_s=p95,
            mean_wait_s=statistics.fmean(waits) if waits else 0.0,
            gpu_busy_hours=self.busy_s / S_PER_HOUR,
            energy_kwh=self.energy_j / J_PER_KWH,
            oom_crashes=self.ooms,
            oom_recovered=self.recovered,
            lost=sum(1 for r in self.runs if r.lost),
            decisions=len(self.decision_ms),
            decision_p99_ms=p99,
            modes=dict(sorted(self.modes.items())),
        )


def simulate(trace: Trace, policies: Sequence[str], **options: Any) -> list[SimResult]:
    return [Simulation(trace, policy=p, **options).run() for p in policies]
