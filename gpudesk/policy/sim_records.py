"""What a simulation keeps and reports: each job's run (`SimRun`, made by `new_run`) and the
stretches of it under one set of co-tenants (`Segment`), each attempt on the station
(`Occupancy`), and the result of the whole run (`SimResult`).
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import Demand
from gpudesk.policy.policy import Placement
from gpudesk.policy.trace import TraceJob
from gpudesk.units import J_PER_KWH, MIB_PER_GB, S_PER_HOUR

if TYPE_CHECKING:
    from gpudesk.policy.simulator import Simulation


@dataclass
class Segment:
    """A stretch of a job's run under one set of co-tenants (what learning may observe)."""

    key: tuple[Any, ...]
    since: float
    rate: float


@dataclass
class SimRun:
    """One trace job through a simulation: its record and demand, its attempts, and while it
    runs its placement and progress."""

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
    # until then it makes no steady progress and takes no share of its GPU: its start-up, a
    # checkpoint's restore, a checkpoint's save (sim_preemption)
    blocked_until: float = 0.0
    work_done: float = 0.0  # seconds of exclusive-speed steady work (past its start-ups)
    limit_mib: float | None = None  # the memory it may use (MPS limit, MIG slice)
    peak_at: float = 0.0  # when it reaches its peak memory
    segment: Segment | None = None
    # preemption (sim_preemption): when it leaves, checkpoint saved; what resuming costs next
    leaves_at: float | None = None
    preempted_for: int | None = None
    restore_s: float = 0.0

    @property
    def running(self) -> bool:
        return self.placement is not None

    @property
    def placed(self) -> Placement:
        """The placement of a running job (the simulator only asks while it runs)."""
        assert self.placement is not None, f"job {self.job.id} is not running"
        return self.placement


def new_run(job: TraceJob, estimator: str) -> SimRun:
    """A trace job's run as it arrives: its record, and the demand the policy is told (the
    estimator's guess, as a hint; under "measured", its true peak, as history)."""
    if estimator == "measured":
        guess, source, memory_gb = job.peak_memory_mib, "history", None
    else:
        guess = job.estimates.get(estimator, job.peak_memory_mib)
        source, memory_gb = "hint", max(guess, 1.0) / MIB_PER_GB
    spec = JobSpec(
        name=job.name,
        command=("simulated", str(job.id)),
        gpus=job.gpus,
        memory_gb=memory_gb,
        sm_pct=job.told_sm_pct,  # its hint: the truth's `sm_pct` is the simulated GPU's
        priority=job.priority,
        preemptible=job.preemptible,
    )
    record = JobRecord.queued(job.id, spec, job.arrival_s)
    demand = Demand(max(guess, 1.0), job.told_sm_pct, source, membw_pct=job.membw_pct)
    return SimRun(job, record, demand, job.arrival_s)


@dataclass(frozen=True)
class Occupancy:
    """One attempt of a job on the simulated station: which GPUs it held, how, and when (the
    timeline `gpudesk simulate --plot` draws). An attempt that died of an out-of-memory error
    ends with `ended = "oom"`, one preempted with "preempted"; the one that finished with
    "finished"."""

    job_id: int
    gpus: tuple[int, ...]
    mode: str  # the placement's mode: exclusive, naive (time-sliced), mps, mig
    start_s: float
    end_s: float
    ended: str  # "finished", "oom" or "preempted"
    mig_profile: str | None = None  # the MIG slice's profile, e.g. 3g.20gb


# How a job ran, per job (`--json`): alone on a whole GPU, beside tenants under MPS, beside
# tenants time-sliced (an MPS client beside a non-MPS context is time-sliced too), on a MIG slice,
# on several whole GPUs, or preempted at least once to let another run (sim_preemption).
PLACEMENT_CLASSES = ("alone", "shared-mps", "shared-naive", "mig", "exclusive-multi", "preempted")


@dataclass(frozen=True)
class JobPlacement:
    """How one job's last attempt ran (the one that finished, unless the job was lost)."""

    job_id: int
    name: str
    placement_class: str  # one of PLACEMENT_CLASSES
    mode: str  # the placement's mode: exclusive, naive, mps, mig
    gpus: tuple[int, ...]
    attempts: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.job_id,
            "name": self.name,
            "class": self.placement_class,
            "mode": self.mode,
            "gpus": list(self.gpus),
            "attempts": self.attempts,
        }


def placement_class(attempt: Occupancy, others: list[Occupancy]) -> str:
    """The class of one attempt, given the attempts on its GPU that may overlap it (any
    others, and those that do not overlap it, are ignored)."""
    if len(attempt.gpus) > 1:
        return "exclusive-multi"
    if attempt.mode == "mig":
        return "mig"
    beside = [
        o
        for o in others
        if o is not attempt
        and o.mode != "mig"
        and attempt.gpus[0] in o.gpus
        and o.start_s < attempt.end_s
        and attempt.start_s < o.end_s
    ]
    if not beside or attempt.mode == "exclusive":
        return "alone"
    if attempt.mode == "mps" and all(o.mode == "mps" for o in beside):
        return "shared-mps"
    return "shared-naive"


def job_placements(runs: list[SimRun], occupancies: list[Occupancy]) -> list[JobPlacement]:
    """Each job that ran at least once, classed by its last attempt ("preempted" where any
    attempt of it was)."""
    last: dict[int, Occupancy] = {}
    on_gpu: dict[int, list[Occupancy]] = {}
    preempted = {o.job_id for o in occupancies if o.ended == "preempted"}
    for o in occupancies:  # in the order they ended
        last[o.job_id] = o
        for gpu in o.gpus:
            on_gpu.setdefault(gpu, []).append(o)
    classed = [
        a
        for job_id, a in last.items()
        if job_id not in preempted and len(a.gpus) == 1 and a.mode != "mig"
    ]
    near = _overlapping(on_gpu, classed)
    out = []
    for run in runs:
        attempt = last.get(run.job.id)
        if attempt is None:
            continue
        out.append(
            JobPlacement(
                run.job.id,
                run.job.name,
                "preempted"
                if run.job.id in preempted
                else placement_class(attempt, near.get(id(attempt), [])),
                attempt.mode,
                attempt.gpus,
                run.attempts,
            )
        )
    return out


def _overlapping(
    on_gpu: dict[int, list[Occupancy]], attempts: list[Occupancy]
) -> dict[int, list[Occupancy]]:
    """For each attempt (by `id`), the attempts on its first GPU whose time may overlap its
    own: a superset of those `placement_class` keeps, found without scanning the GPU's whole
    history for each (which made a long replay's result quadratic in its length). An attempt
    [s, e) overlaps o where o.start < e and s < o.end: either o ended within (s, e] (a range
    of the GPU's attempts sorted by their end), or o ended after e having started before it
    (the attempts alive at e, swept in order of e)."""
    near: dict[int, list[Occupancy]] = {}
    by_gpu: dict[int, list[Occupancy]] = {}
    for attempt in attempts:
        by_gpu.setdefault(attempt.gpus[0], []).append(attempt)
    for gpu, asked in by_gpu.items():
        by_end = sorted(on_gpu[gpu], key=lambda o: o.end_s)
        ends = [o.end_s for o in by_end]
        by_start = sorted(range(len(by_end)), key=lambda i: by_end[i].start_s)
        alive: dict[int, Occupancy] = {}  # started before e, ending after it
        started = ended = 0
        for attempt in sorted(asked, key=lambda a: a.end_s):
            e = attempt.end_s
            while started < len(by_start) and by_end[by_start[started]].start_s < e:
                i = by_start[started]
                if by_end[i].end_s > e:
                    alive[i] = by_end[i]
                started += 1
            while ended < len(ends) and ends[ended] <= e:
                alive.pop(ended, None)
                ended += 1
            within = by_end[bisect_right(ends, attempt.start_s) : bisect_right(ends, e)]
            near[id(attempt)] = within + list(alive.values())
    return near


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
    # Why this run is no mode the station as given can run (None: it can): forced `mig` on GPUs
    # not in MIG mode, or whole-GPU placements on a GPU in MIG mode. "Best forced mode" skips it.
    not_runnable: str | None = None
    placement_classes: dict[str, int] = field(default_factory=dict)  # jobs by PLACEMENT_CLASSES
    job_placements: list[JobPlacement] = field(default_factory=list)
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
            elif key == "job_placements":
                value = [p.to_dict() for p in value]
            out[key] = value
        return out


def sim_result(sim: Simulation) -> SimResult:
    """The figures of a finished simulation."""
    done = [r for r in sim.runs if r.finished_at is not None]
    jct = [r.finished_at - r.job.arrival_s for r in done]  # type: ignore[operator]
    waits = [r.first_start - r.job.arrival_s for r in done]  # type: ignore[operator]
    ordered = sorted(jct)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)] if ordered else 0.0
    decisions = sorted(sim.decision_ms)
    p99 = (
        decisions[min(len(decisions) - 1, math.ceil(0.99 * len(decisions)) - 1)]
        if decisions
        else 0.0
    )
    impossible = [r for r in sim.runs if r.impossible is not None]
    lost = [r for r in sim.runs if r.lost]
    placements = job_placements(sim.runs, sim.occupancies)
    classes = dict.fromkeys(PLACEMENT_CLASSES, 0)
    for p in placements:
        classes[p.placement_class] += 1
    return SimResult(
        policy=sim.policy_name,
        estimator=sim.estimator,
        station=sim.station,
        jobs=len(sim.runs),
        makespan_s=sim.now,
        mean_jct_s=statistics.fmean(jct) if jct else 0.0,
        p95_jct_s=p95,
        mean_wait_s=statistics.fmean(waits) if waits else 0.0,
        gpu_busy_hours=sim.busy_s / S_PER_HOUR,
        energy_kwh=sim.energy_j / J_PER_KWH,
        oom_crashes=sim.ooms,
        oom_recovered=sim.recovered,
        lost=len(lost),
        decisions=len(sim.decision_ms),
        decision_p99_ms=p99,
        modes=dict(sorted(sim.modes.items())),
        impossible=len(impossible),
        impossible_jobs=[
            {"id": r.job.id, "name": r.job.name, "reason": r.impossible} for r in impossible
        ],
        lost_jobs=[
            {"id": r.job.id, "name": r.job.name, "reason": sim.lost_why.get(r.job.id, "")}
            for r in lost
        ],
        repartitions=sim.repartitions,
        observations=sim.observations,
        mig_violations=sim.mig_violations,
        learned_params=sim.learner.params(sim.model.name).to_dict(),
        not_runnable=not_runnable(sim),
        placement_classes=classes,
        job_placements=placements,
        occupancies=list(sim.occupancies),
    )


def not_runnable(sim: Simulation) -> str | None:
    """Why this run is no mode the station as given can run, or None. Forced `mig` carves every
    GPU not given a layout into MIG mode for free and at once (`mig_dynamic`); the engine never
    switches a GPU into MIG mode (its `--mig-repartition` only re-carves GPUs already in it), so
    forced `mig` is runnable only where every GPU is in MIG mode as given (`--mig`). A whole-GPU
    placement on a GPU in MIG mode cannot happen on real hardware."""
    if sim.policy_name == "mig":
        whole = sorted(set(range(sim.gpu_count)) - sim.fixed)
        if whole:
            listed = ", ".join(str(g) for g in whole)
            return f"GPU(s) {listed} not in MIG mode as given; forced mig switched them for free"
    if sim.mig_violations:
        return f"{sim.mig_violations} whole-GPU placement(s) on a GPU in MIG mode"
    return None
