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
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpudesk.core.backend_names import check_backend_name, parse_sim_name
from gpudesk.core.gpu_models import STATIONS, GpuModel
from gpudesk.core.jobs import JobSpec
from gpudesk.core.mig_profiles import (
    COMPUTE_SLICES,
    MEMORY_SLICES,
    MigProfile,
    compute_slices,
    find_profile,
    nominal_memory_mib,
    short_name,
    table_for_gpu,
)
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.examples import bundled
from gpudesk.policy.demand import PEAK_SETTLED_S, Demand, reservation
from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    InterferenceModel,
    Learner,
    ModelParams,
    Observation,
    Workload,
    load_params_file,
    mig_rate,
    shared_rates,
    workload,
)
from gpudesk.policy.mig_payoff import RECONFIG_S, choose_layouts
from gpudesk.policy.mig_planner import GpuMigState, PlansOnly, QueuedDemand
from gpudesk.policy.mig_planner import simulated_profiles as planner_profiles
from gpudesk.policy.policies import make_policy
from gpudesk.policy.policy import (
    RESERVE_MIB,
    Decision,
    GpuState,
    MigSlice,
    Placement,
    StationView,
    Tenant,
)
from gpudesk.policy.schedule_pass import schedule_pass
from gpudesk.units import J_PER_KWH, MIB_PER_GB, MIB_PER_GIB, S_PER_HOUR

# SM activity of a job running alone, by the trace's class, where the trace gives no `sm_pct`;
# DLRM is the published ~5 %. The class figures are ASSUMPTIONS (no per-job SM figure is
# published for the trace); a user knows roughly this much about a job and gives it as the
# `sm_pct` hint. docs/simulator.md says what they do to the results.
SM_BY_CLASS = {"light": 10.0, "medium": 30.0, "heavy": 70.0}
SM_BY_MODEL = {"DLRM": 5.0}
GUESSING_ESTIMATORS = ("gpumemnet", "horus", "faketensor")
# "measured": each job's true peak, as the engine's history of earlier runs of the same command
# would give it (Demand source "history").
ESTIMATORS = (*GUESSING_ESTIMATORS, "measured")
MAX_ATTEMPTS = 4  # a job that dies this often is lost

RAMP_S = 60.0  # a job reaches its peak memory over its first epoch: 10 % of its run,
MAX_RAMP_S = 600.0  # at least a minute and at most ten
SAMPLE_WINDOW_S = 30.0  # what "recent SM activity" averages over, for the policy
# Assumption: the engine needs about a minute of a job's progress lines (or NVML samples) under
# one set of co-tenants to measure its rate there; shorter stretches teach it nothing.
OBSERVE_AFTER_S = 60.0
DEFAULT_STATION = "sim:dgx-station-a100"


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
    membw_pct: float | None = None  # DRAM bandwidth share alone, where the trace gives it
    model: str = ""


@dataclass(frozen=True)
class Trace:
    name: str
    station: str
    jobs: tuple[TraceJob, ...]


def _percent(raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    number = float(value)
    if not 0.0 <= number <= 100.0:
        raise ValueError(f"{key} must be 0..100, found {value!r}")
    return number


def load_trace(path: str | Path) -> Trace:
    # Installed from a wheel, `traces/carma-philly-t1.json` (or `carma-philly-t1`) names the
    # bundled copy when no such file is here.
    path = bundled(path, "traces") or path
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
            if not isinstance(raw, dict):
                raise TypeError("a job is an object")
            cls = str(raw.get("class", "medium"))
            model = str(raw.get("model") or "")
            sm_pct = _percent(raw, "sm_pct")
            jobs.append(
                TraceJob(
                    id=int(raw.get("id", i + 1)),
                    name=str(raw.get("task") or model or f"job{i + 1}"),
                    arrival_s=float(raw["arrival_s"]),
                    gpus=int(raw.get("gpus", 1)),
                    exclusive_s=float(raw["exclusive_minutes"]) * 60.0,
                    peak_memory_mib=float(raw["peak_memory_mb"]),
                    sm_pct=sm_pct
                    if sm_pct is not None
                    else SM_BY_MODEL.get(model, SM_BY_CLASS.get(cls, 50.0)),
                    job_class=cls,
                    estimates={
                        e: float(raw[f"estimate_{e}_mb"])
                        for e in GUESSING_ESTIMATORS
                        if raw.get(f"estimate_{e}_mb") is not None
                    },
                    membw_pct=_percent(raw, "membw_pct"),
                    model=model,
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"{path}: jobs[{i}]: missing or bad field ({exc})") from None
        job = jobs[-1]
        if job.gpus < 1 or job.exclusive_s <= 0 or not math.isfinite(job.exclusive_s):
            raise TraceError(f"{path}: jobs[{i}]: gpus and exclusive_minutes must be positive")
        if job.peak_memory_mib < 0 or not math.isfinite(job.peak_memory_mib):
            raise TraceError(f"{path}: jobs[{i}]: peak_memory_mb must be a size")
    jobs.sort(key=lambda j: (j.arrival_s, j.id))
    return Trace(str(data.get("name", Path(path).stem)), str(data.get("station", "")), tuple(jobs))


# --------------------------------------------------------------------- truth and MIG layouts
def load_truth(path: str | Path) -> ModelParams:
    """The simulated ground truth (`--truth FILE`): the parameters it names, the rest the
    defaults. Raises ValueError."""
    return load_params_file(path, "--truth")


def simulated_profiles(gpu_name: str) -> tuple[MigProfile, ...]:
    """The MIG profiles a simulated GPU of this model offers (its own table)."""
    return tuple(p for p in table_for_gpu(gpu_name) if p.simulated)


def layout_fits(profiles: Sequence[MigProfile]) -> bool:
    """Whether these instances fit one GPU together: 7 compute slices, and each at one of its
    profile's placements over the 8 memory slices, none overlapping (larger ones first, as the
    driver places them)."""
    if sum(p.compute_slices for p in profiles) > COMPUTE_SLICES:
        return False
    ordered = sorted(profiles, key=lambda p: (-p.memory_slices, -p.compute_slices))

    def fit(i: int, used: tuple[Any, ...]) -> bool:
        if i == len(ordered):
            return True
        return any(
            not any(spot.overlaps(u) for u in used) and fit(i + 1, (*used, spot))
            for spot in ordered[i].placements
        )

    return fit(0, ())


def parse_mig(text: str, gpu_name: str, gpu_count: int) -> dict[int, tuple[str, ...]]:
    """`--mig 3=3g.20gb,2g.10gb,1g.5gb,1g.5gb` -> {3: (...)}: items without `=` continue the
    last GPU; `3=` alone puts GPU 3 in MIG mode with no instances yet. Raises ValueError."""
    table = simulated_profiles(gpu_name)
    if not table:
        raise ValueError(f"--mig: a simulated {gpu_name} has no MIG profiles")
    offered = ", ".join(p.name for p in table)
    layouts: dict[int, list[str]] = {}
    current: int | None = None
    for raw in text.split(","):
        item = raw.strip()
        if "=" in item:
            gpu_text, _, item = (part.strip() for part in item.partition("="))
            try:
                current = int(gpu_text)
            except ValueError:
                raise ValueError(
                    f"--mig: {gpu_text!r} is not a GPU index (GPU=PROFILE,...)"
                ) from None
            if not 0 <= current < gpu_count:
                raise ValueError(
                    f"--mig: GPU {current} does not exist; the station has GPUs 0..{gpu_count - 1}"
                )
            if current in layouts:
                raise ValueError(f"--mig: GPU {current} is given twice")
            layouts[current] = []
            if not item:
                continue
        elif current is None:
            raise ValueError(
                f"--mig: start with a GPU index, e.g. 0=3g.20gb,2g.10gb (got {text!r})"
            )
        if not item:
            raise ValueError(f"--mig: an empty profile name in {text!r}")
        profile = find_profile(item, table)
        if profile is None:
            raise ValueError(
                f"--mig: unknown MIG profile {item!r} for a {gpu_name}; it offers: {offered}"
            )
        layouts[current].append(profile.name)
    for gpu, names in layouts.items():
        if not layout_fits([_must_find(n, table) for n in names]):
            raise ValueError(
                f"--mig: the layout {','.join(names)} does not fit GPU {gpu} (a {gpu_name} has "
                f"{COMPUTE_SLICES} compute and {MEMORY_SLICES} memory slices, and each profile "
                f"sits only at its own placements)"
            )
    return {gpu: tuple(names) for gpu, names in sorted(layouts.items())}


def _must_find(name: str, table: tuple[MigProfile, ...]) -> MigProfile:
    profile = find_profile(name, table)
    assert profile is not None, name
    return profile


# --------------------------------------------------------------------------------- the replay
@dataclass
class _Segment:
    """A stretch of a job's run under one set of co-tenants (what learning may observe)."""

    key: tuple[Any, ...]
    since: float
    rate: float


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
    impossible: str | None = None  # why it can never run on this station
    # while running
    placement: Placement | None = None
    started_at: float = 0.0
    blocked_until: float = 0.0  # its GPU is being re-carved until then
    work_done: float = 0.0  # seconds of exclusive-speed work
    limit_mib: float | None = None  # the memory it may use (MPS limit, MIG slice)
    peak_at: float = 0.0  # when it reaches its peak memory
    segment: _Segment | None = None

    @property
    def running(self) -> bool:
        return self.placement is not None

    @property
    def placed(self) -> Placement:
        """The placement of a running job (the simulator only asks while it runs)."""
        assert self.placement is not None, f"job {self.job.id} is not running"
        return self.placement


@dataclass(frozen=True)
class Occupancy:
    """One attempt of a job on the simulated station: which GPUs it held, how, and when (the
    timeline `gpudesk simulate --plot` draws). An attempt that died of an out-of-memory error
    ends with `ended = "oom"`; the one that finished with "finished"."""

    job_id: int
    gpus: tuple[int, ...]
    mode: str  # the placement's mode: exclusive, naive (time-sliced), mps, mig
    start_s: float
    end_s: float
    ended: str  # "finished" or "oom"
    mig_profile: str | None = None  # the MIG slice's profile, e.g. 3g.20gb


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
    impossible: int = 0  # jobs that can never run on this station (never placed)
    impossible_jobs: list[dict[str, Any]] = field(default_factory=list)
    lost_jobs: list[dict[str, Any]] = field(default_factory=list)
    repartitions: int = 0  # re-carves of a MIG GPU whose layout changed
    observations: int = 0  # rates fed to the learner
    mig_violations: int = 0  # whole-GPU placements on a GPU in MIG mode (a policy error)
    learned_params: dict[str, float] = field(default_factory=dict)  # the policy's, at the end
    # Every attempt, in the order they ended: for the timeline plot. Left out of `to_dict` (the
    # `--json` report), where one row per attempt would drown the figures it compares.
    occupancies: list[Occupancy] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in vars(self).items():
            if key == "occupancies":
                continue
            if isinstance(value, float):
                value = round(value, 3)
            elif key == "learned_params":
                value = {k: round(v, 4) for k, v in value.items()}
            out[key] = value
        return out


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
        self.config = StationConfig(backend=station, policy=policy, mig_repartition=mig_repartition)
        self.truth = truth
        self.learn = learn
        self.learner = Learner(
            policy_params or DEFAULT_PARAMS, "published" if policy_params is None else "given"
        )
        self.interference = InterferenceModel(self.learner)
        self.observations = 0
        # MIG: each model's own table; GPUs given a layout are fixed, the rest carved on demand
        # under --policy mig.
        self.table = simulated_profiles(self.model.name)
        layouts = parse_mig(mig, self.model.name, self.gpu_count) if isinstance(mig, str) else mig
        self.mig_layouts = {g: tuple(n) for g, n in (layouts or {}).items()}
        self.fixed: set[int] = set()
        self.slices: dict[int, list[MigSlice]] = {i: [] for i in range(self.gpu_count)}
        self._slice_serial = 0
        for gpu, names in (layouts or {}).items():
            if not 0 <= gpu < self.gpu_count:
                raise ValueError(f"--mig: GPU {gpu} does not exist on {station}")
            self.fixed.add(gpu)
            self.slices[gpu] = [self._new_slice(gpu, name) for name in names]
        self.reconfig_until: dict[int, float] = {}
        self.repartitions = 0
        self.mig_violations = 0
        self.now = 0.0
        self.runs = [self._new_run(job) for job in trace.jobs]
        for run in self.runs:
            run.impossible = self._impossible(run.job)
        self.pending = [r for r in self.runs if r.impossible is None]  # in arrival order
        self.queue: list[_Run] = []
        self.running: list[_Run] = []
        self.overtaken: dict[int, int] = {}
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
        self.lost_why: dict[int, str] = {}
        self.occupancies: list[Occupancy] = []

    def _new_run(self, job: TraceJob) -> _Run:
        if self.estimator == "measured":
            guess, source, memory_gb = job.peak_memory_mib, "history", None
        else:
            guess = job.estimates.get(self.estimator, job.peak_memory_mib)
            source, memory_gb = "hint", max(guess, 1.0) / MIB_PER_GB
        spec = JobSpec(
            name=job.name,
            command=("simulated", str(job.id)),
            gpus=job.gpus,
            memory_gb=memory_gb,
            sm_pct=job.sm_pct,
        )
        record = JobRecord.queued(job.id, spec, job.arrival_s)
        demand = Demand(max(guess, 1.0), job.sm_pct, source, membw_pct=job.membw_pct)
        return _Run(job, record, demand, job.arrival_s)

    def _impossible(self, job: TraceJob) -> str | None:
        """Why the job can never run here, judged on the truth (the policy never knows it)."""
        if job.gpus > self.gpu_count:
            return f"asks for {job.gpus} GPUs; {self.station} has {self.gpu_count}"
        if job.peak_memory_mib > self.model.memory_total_mib:
            return (
                f"needs {job.peak_memory_mib / MIB_PER_GIB:.1f} GiB at its peak; a "
                f"{self.model.name} has {self.model.memory_total_mib / MIB_PER_GIB:.1f} GiB"
            )
        return None

    def _new_slice(self, gpu: int, name: str, key: str | None = None) -> MigSlice:
        profile = find_profile(name, self.table)
        if key is None:
            self._slice_serial += 1
            key = f"MIG-SIM-{gpu}-{self._slice_serial}"
        if profile is not None:
            return MigSlice(key, profile.name, profile.memory_mib, profile.compute_slices)
        return MigSlice(key, short_name(name), nominal_memory_mib(name), compute_slices(name))

    def _slice_shape(self, mig: MigSlice) -> tuple[int, int]:
        """(compute slices, memory slices) of a slice, from this model's table."""
        profile = find_profile(mig.profile, self.table)
        if profile is not None:
            return profile.compute_slices, profile.memory_slices
        # a profile this model does not have (a policy that carves another model's table):
        # its memory's share of the GPU, in whole memory slices
        share = mig.memory_mib / self.model.memory_total_mib
        return mig.compute_slices, max(1, min(MEMORY_SLICES, math.ceil(share * MEMORY_SLICES)))

    # ------------------------------------------------------------ the model
    def _tenants(self, gpu: int) -> list[_Run]:
        return [r for r in self.running if r.placement and gpu in r.placement.gpus]

    def _workload(self, run: _Run, params: ModelParams) -> Workload:
        work = workload(run.job.sm_pct, run.job.membw_pct, params)
        placement = run.placement
        if placement is not None and placement.mode == "mps" and placement.mps_thread_pct:
            work = replace(work, thread_cap=placement.mps_thread_pct / 100.0)
        return work

    def _mig_slice(self, run: _Run) -> MigSlice | None:
        key = run.placed.mig_slice
        gpu = run.placed.gpus[0]
        return next((s for s in self.slices[gpu] if s.key == key), None)

    def _rates(self) -> dict[int, float]:
        """Every running job's true rate now (seconds of exclusive work per second)."""
        rates: dict[int, float] = {}
        shared: dict[int, list[_Run]] = {}
        for run in self.running:
            placement = run.placed
            if run.blocked_until > self.now:
                rates[run.job.id] = 0.0
            elif placement.mode == "exclusive" or len(placement.gpus) > 1:
                rates[run.job.id] = 1.0
            elif placement.mode == "mig":
                mig = self._mig_slice(run)
                compute, memory = self._slice_shape(mig) if mig else (COMPUTE_SLICES, MEMORY_SLICES)
                rates[run.job.id] = mig_rate(
                    self.truth, self._workload(run, self.truth), compute, memory
                )
            else:
                shared.setdefault(placement.gpus[0], []).append(run)
        for group in shared.values():
            tenants = [self._workload(r, self.truth) for r in group]
            # time-sliced unless all are MPS clients (an MPS server beside other contexts is
            # time-sliced too)
            mode = "mps" if all(r.placed.mode == "mps" for r in group) else "naive"
            values = shared_rates(self.truth, mode, tenants)
            rates.update({r.job.id: v for r, v in zip(group, values, strict=True)})
        return rates

    def rate(self, run: _Run) -> float:
        """A running job's true rate now."""
        return self._rates()[run.job.id]

    def _gpu_activity(self, gpu: int, rates: dict[int, float]) -> float:
        """SM activity (0..1) the GPU shows: the work its tenants get done."""
        return min(1.0, sum(t.job.sm_pct / 100.0 * rates[t.job.id] for t in self._tenants(gpu)))

    def _power(self, activity: float, tenants: int) -> float:
        m = self.model
        if not tenants:
            return m.idle_w
        return m.idle_w + (m.busy_w - m.idle_w) * (activity**0.9 + 0.03)

    # ------------------------------------------------------------ learning
    def _segment_key(self, run: _Run) -> tuple[Any, ...]:
        placement = run.placed
        if placement.mode in ("mig", "exclusive") or len(placement.gpus) > 1:
            others: tuple[int, ...] = ()
        else:
            others = tuple(
                sorted(
                    t.job.id
                    for t in self._tenants(placement.gpus[0])
                    if t is not run and t.placed.mode not in ("mig", "exclusive")
                )
            )
        blocked = any(t.blocked_until > self.now for t in self._tenants(placement.gpus[0]))
        return (placement.mode, placement.mig_slice, others, blocked)

    def _track_segments(self, rates: dict[int, float]) -> None:
        for run in self.running:
            key = self._segment_key(run)
            if run.segment is None or run.segment.key != key:
                self._close_segment(run)
                run.segment = _Segment(key, self.now, rates[run.job.id])

    def _close_segment(self, run: _Run) -> None:
        segment, run.segment = run.segment, None
        if segment is None or not self.learn or self.now - segment.since < OBSERVE_AFTER_S:
            return
        mode, _slice, others, blocked = segment.key
        if blocked or mode == "exclusive" or len(run.placed.gpus) > 1:
            return
        # What the engine knows of each job: its hints, completed by its current parameters.
        params = self.learner.params(self.model.name)
        job = self._workload(run, params)
        by_id = {r.job.id: r for r in self.running}
        if mode == "mig":
            mig = self._mig_slice(run)
            if mig is None:
                return
            compute, memory = self._slice_shape(mig)
            obs = Observation("mig", job, (), segment.rate, compute, memory)
        else:
            if any(o not in by_id for o in others):
                return
            obs = Observation(
                mode, job, tuple(self._workload(by_id[o], params) for o in others), segment.rate
            )
        self.learner.observe(self.model.name, obs, at=self.now)
        self.observations += 1

    # --------------------------------------------------------------- events
    def run(self) -> SimResult:
        self._arrive()
        self._schedule()
        while self.pending or self.queue or self.running:
            rates = self._rates()
            self._track_segments(rates)
            candidates = [r.job.arrival_s for r in self.pending[:1]]
            for r in self.running:
                if r.blocked_until > self.now:
                    candidates.append(r.blocked_until)
                    continue
                candidates.append(self.now + (r.job.exclusive_s - r.work_done) / rates[r.job.id])
                if r.peak_at > self.now:
                    candidates.append(r.peak_at)
                elif r.peak_at + PEAK_SETTLED_S > self.now:
                    candidates.append(r.peak_at + PEAK_SETTLED_S)  # its reservation is corrected
            candidates.extend(t for t in self.reconfig_until.values() if t > self.now)
            if not candidates:
                for r in self.queue:
                    r.lost = True
                    self.lost_why[r.job.id] = "the policy never placed it, even on an empty station"
                self.queue.clear()
                break
            step = max(0.0, min(candidates) - self.now)
            self._advance(step, rates)
            self._finish_and_crash()
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

    def _finish_and_crash(self) -> None:
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
        if run.placed.mode == "mig":
            return False
        for gpu in run.placed.gpus:
            on_gpu = [t for t in self._tenants(gpu) if t.placed.mode != "mig"]
            in_use = sum(t.job.peak_memory_mib if t.peak_at <= self.now else 0.0 for t in on_gpu)
            if in_use > self.model.memory_total_mib:
                return True
        return False

    def _crash(self, run: _Run) -> None:
        self.ooms += 1
        observed = min(run.job.peak_memory_mib, run.limit_mib or self.model.memory_total_mib)
        self._stop(run, "oom")
        if run.attempts >= MAX_ATTEMPTS:
            run.lost = True
            self.lost_why[run.job.id] = f"out of memory {run.attempts} times"
            return
        # Capped where the engine caps it (attempts.py): at what the GPU offers a job alone,
        # so a job that died sharing is retried alone rather than lost as "too big".
        run.demand = run.demand.after_oom(observed, self.model.memory_total_mib - RESERVE_MIB)
        run.work_done = 0.0
        self.queue.append(run)
        self.queue.sort(key=lambda r: r.record.id)

    def _stop(self, run: _Run, ended: str = "finished") -> None:
        placement = run.placed
        gpu = placement.gpus[0]
        mig = self._mig_slice(run) if placement.mode == "mig" else None
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
        for other in self._tenants(gpu):  # its stretch and its co-tenants' end here
            self._close_segment(other)
        self.running.remove(run)
        if placement.mig_slice is not None and gpu not in self.fixed:
            self.slices[gpu] = [s for s in self.slices[gpu] if s.key != placement.mig_slice]
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
            on_gpu = self._tenants(gpu)
            for t in on_gpu:
                elapsed = max(0.0, self.now - max(t.started_at, t.blocked_until))
                ramp = max(1e-6, t.peak_at - max(t.started_at, t.blocked_until))
                used = t.job.peak_memory_mib * min(1.0, elapsed / ramp)
                measured += used
                # Its memory stops growing at its peak; the engine's rule takes it from there.
                reserved = reservation(
                    t.demand.memory_mib,
                    used,
                    self.now - t.peak_at if t.peak_at <= self.now else 0.0,
                )
                tenants.append(
                    Tenant(
                        t.job.id,
                        t.placed.mode,
                        reserved,
                        t.job.sm_pct,
                        t.placed.mig_slice,
                        membw_pct=t.job.membw_pct,
                        thread_pct=t.placed.mps_thread_pct,
                    )
                )
            history = self.sm_history[gpu]
            window = statistics.fmean(v for _, v in history) if history else 0.0
            if gpu in self.fixed:
                mig_enabled, dynamic = True, False
                busy_keys = {t.placed.mig_slice for t in on_gpu}
                # a layout being changed (--mig-repartition) is unusable until it is made
                unusable = any(t.placed.mode == "exclusive" for t in on_gpu) or (
                    self.reconfig_until.get(gpu, 0.0) > self.now
                )
                slices = tuple(
                    replace(s, busy=unusable or s.key in busy_keys) for s in self.slices[gpu]
                )
            elif self.policy_name == "mig":
                mig_enabled, dynamic = True, True
                slices = tuple(replace(s, busy=True) for s in self.slices[gpu])
            else:
                mig_enabled, dynamic, slices = False, False, ()
            states.append(
                GpuState(
                    index=gpu,
                    uuid=f"GPU-SIM-{gpu}",
                    memory_total_mib=self.model.memory_total_mib,
                    model=self.model.name,
                    memory_used_mib=measured,
                    sm_activity_pct=window,
                    tenants=tuple(tenants),
                    mps_usable=self.mps,
                    mig_enabled=mig_enabled,
                    mig_slices=slices,
                    mig_dynamic=dynamic,
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
            interference=self.interference,
        )

    def _relayable(self) -> set[int]:
        """The idle fixed-layout GPUs that may get a new layout now (`--mig-repartition`,
        under `auto` and `mig`, as in the engine)."""
        if not self.config.repartitions_on_its_own:
            return set()
        return {
            gpu
            for gpu in self.fixed
            if not self._tenants(gpu) and self.reconfig_until.get(gpu, 0.0) <= self.now
        }

    def _repartition(self, relayable: set[int]) -> bool:
        """The engine's own check (policy.mig_payoff.choose_layouts) on these GPUs; a GPU whose
        layout changes is unusable for `RECONFIG_S`. True when one changed."""
        ready = sorted(relayable)
        queue = [
            QueuedDemand(
                r.record.id,
                r.record.name,
                r.demand.memory_mib,
                r.demand.sm_pct,
                membw_pct=r.demand.membw_pct,
            )
            for r in self.queue
            if r.record.spec.gpus == 1 and not r.demand.exclusive
        ]
        if not queue:
            return False
        states = []
        for gpu in ready:
            profiles, placements = planner_profiles(self.model, gpu)
            current = tuple(s.profile for s in self.slices[gpu])
            states.append(
                GpuMigState(
                    gpu,
                    self.model.name,
                    "enabled",
                    profiles,
                    placements,
                    current,
                    has_gpu_instances=bool(current),
                    has_compute_instances=bool(current),
                )
            )
        changed = False
        for choice in choose_layouts(
            states,
            queue,
            self.interference.params,
            simulated=True,
            commands_from=PlansOnly(),  # the simulator shows no command lines
        ):
            if choice.payoff.worth:
                gpu = choice.plan.gpu
                self.slices[gpu] = [self._new_slice(gpu, name) for name in choice.payoff.planned]
                self.reconfig_until[gpu] = self.now + RECONFIG_S
                self.repartitions += 1
                changed = True
        return changed

    def _schedule(self) -> None:
        """The engine's scheduling pass (`schedule_pass`, as engine.scheduler runs it)."""
        if not self.queue:
            return
        schedule_pass(
            self._place(self.view()),
            self._relayable(),
            commit=self._commit,
            repartition=self._repartition,
            place_again=lambda: self._place(self.view()) if self.queue else Decision(),
        )

    def _place(self, view: StationView) -> Decision:
        started = time.perf_counter()
        decision = self.policy.place([r.record for r in self.queue], view)
        self.decision_ms.append((time.perf_counter() - started) * 1000)
        return decision

    def _commit(self, decision: Decision) -> None:
        for job_id, count in decision.overtaken.items():
            self.overtaken[job_id] = self.overtaken.get(job_id, 0) + count
        by_id = {r.record.id: r for r in self.queue}
        for rejection in decision.rejections:
            run = by_id.get(rejection.job_id)
            if run is None:
                continue
            run.lost = True
            self.lost_why[run.job.id] = f"rejected by the policy: {rejection.reason}"
            self.queue.remove(run)
        placements = [p for p in decision.placements if p.job_id in by_id]
        # A GPU in MIG mode runs work only on its MIG devices: a whole-GPU placement on a
        # fixed-layout GPU (never `mig_dynamic`) is a policy error the simulator counts (and
        # still plays out).
        self.mig_violations += sum(
            1 for p in placements if p.mode != "mig" and self.fixed.intersection(p.gpus)
        )
        for placement in placements:
            self._start(by_id[placement.job_id], placement)

    def _start(self, run: _Run, placement: Placement) -> None:
        self.queue.remove(run)
        self.overtaken.pop(run.record.id, None)
        run.placement, run.started_at, run.attempts = placement, self.now, run.attempts + 1
        run.blocked_until = self.now
        if run.first_start is None:
            run.first_start = self.now
        run.peak_at = run.blocked_until + min(
            MAX_RAMP_S, max(RAMP_S, 0.1 * run.job.exclusive_s), run.job.exclusive_s / 2
        )
        run.limit_mib = None
        if placement.mode == "mps" and placement.mps_memory_limit_mib:
            run.limit_mib = float(placement.mps_memory_limit_mib)
        gpu = placement.gpus[0]
        if placement.mode == "mig" and placement.mig_slice:
            mig = next((s for s in self.slices[gpu] if s.key == placement.mig_slice), None)
            if mig is None:  # carved on demand
                mig = self._new_slice(gpu, placement.slot.split("/", 1)[1], placement.mig_slice)
                self.slices[gpu].append(mig)
            run.limit_mib = mig.memory_mib
        self.modes[placement.mode] = self.modes.get(placement.mode, 0) + 1
        for index in placement.gpus:
            self.placed_at[index] = self.now
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
        impossible = [r for r in self.runs if r.impossible is not None]
        lost = [r for r in self.runs if r.lost]
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
            lost=len(lost),
            decisions=len(self.decision_ms),
            decision_p99_ms=p99,
            modes=dict(sorted(self.modes.items())),
            impossible=len(impossible),
            impossible_jobs=[
                {"id": r.job.id, "name": r.job.name, "reason": r.impossible} for r in impossible
            ],
            lost_jobs=[
                {"id": r.job.id, "name": r.job.name, "reason": self.lost_why.get(r.job.id, "")}
                for r in lost
            ],
            repartitions=self.repartitions,
            observations=self.observations,
            mig_violations=self.mig_violations,
            learned_params=self.learner.params(self.model.name).to_dict(),
            occupancies=list(self.occupancies),
        )


def simulate(trace: Trace, policies: Sequence[str], **options: Any) -> list[SimResult]:
    return [Simulation(trace, policy=p, **options).run() for p in policies]
