"""Whether giving an idle MIG-mode GPU the planner's layout pays, by the interference model.

`auto` repartitions on its own (`[station] mig_repartition = true`) only where this says so. For
each idle MIG-mode GPU, in index order, the planner proposes the layout the waiting queue wants
(`planner.plan_gpu`); this module weighs it against the layout the GPU has:

- **kept**: the queued jobs the current instances would start now, each on the slice placement
  would give it (the smallest that holds its memory and whose share of the SMs covers its SM
  demand, else the fastest), and the model's predicted rate for each (`interference.mig_rate`);
- **carved**: the jobs the planned layout starts, each on the slice the planner made for it (the
  room they leave is carved into spare slices for jobs to come, the plan's `spare`, which
  the payoff does not count: a layout changes only while its GPU is idle);
- the change keeps the GPU unusable for `RECONFIG_S` (draining is not needed: only an idle GPU
  is changed), and a layout serves the queue for at least `HORIZON_S` before the GPU is idle
  again and may be changed again.

The change pays when the carved layout's work over the horizon, less the change time, beats the
kept layout's over the whole horizon, and, where the caller gives a `drain` (the engine does:
`mig_queue_time.layout_drain`), the queue as it is drains no later with the carved layout than
with the kept one, by the simulator's replay of it: a layout can start more jobs now and still
make the queue slower (a heavy job squeezed onto a slice runs at its share of the GPU for hours).
Where the replay says some queued jobs would never start with the kept layout and fewer with the
carved one, the change is made whatever the rates say.
Rates are in "GPUs' worth of work": a job alone on a whole GPU runs at 1. Each GPU claims the
jobs of the layout it keeps or gets, so the next GPU plans for the rest. Held jobs cannot start,
so they are left out here, as the shown plan gives them no slice.

The engine (`MigControl.repartition_for_queue`) and the simulator (`--mig-repartition`) both
call `choose_layouts`: the simulator judges the decision the engine makes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpudesk import render
from gpudesk.core.mig_profiles import memory_slices, table_for_gpu
from gpudesk.core.mig_records import GiProfile
from gpudesk.policy.interference import ModelParams, mig_rate, workload
from gpudesk.policy.mig_planner import (
    GpuMigState,
    MigCommands,
    MigPlan,
    QueuedDemand,
    memory_mib,
    plan_gpu,
)
from gpudesk.policy.slice_choice import SliceOption, best_slice

# Assumption: destroying and creating GPU and compute instances on an idle GPU through
# nvidia-smi keeps it unusable for about this long (no published figure; a few nvidia-smi calls
# of a second or two each, and the telemetry's first sample of the new devices).
RECONFIG_S = 10.0
# Assumption: a layout serves the queue for at least this long before the GPU is idle again:
# training jobs run minutes to hours (the Philly trace's jobs: 3.4 to 112 minutes alone, median
# 24). It matters only where the new layout is faster by a few per cent: with 10 s of change, it
# must be faster by more than 10 / (600 - 10) = 1.7 %.
HORIZON_S = 600.0


@dataclass(frozen=True)
class SliceStart:
    """A queued job a layout starts, on which profile, at what predicted rate."""

    job_id: int
    profile: str
    rate: float


@dataclass(frozen=True)
class QueueDrain:
    """How long the queue as it is takes to drain on a GPU, by the simulator's replay of it
    (SIMULATED), and how many of its jobs never start there (no slice of a layout holds them)."""

    seconds: float
    cannot_run: int = 0

    def slower_than(self, other: QueueDrain) -> bool:
        """More jobs that never start, or as many and a later end."""
        return (self.cannot_run, self.seconds) > (other.cannot_run, other.seconds)

    def text(self) -> str:
        never = f", {self.cannot_run} job(s) never start" if self.cannot_run else ""
        return f"~{render.duration(self.seconds)}{never}"


# How long the queue drains with a layout on a GPU (None: it cannot be predicted there).
DrainFn = Callable[[GpuMigState, tuple[str, ...], Sequence[QueuedDemand]], QueueDrain | None]


@dataclass(frozen=True)
class LayoutPayoff:
    gpu: int
    current: tuple[str, ...]
    planned: tuple[str, ...]
    kept: tuple[SliceStart, ...]  # what the current layout would start now
    carved: tuple[SliceStart, ...]  # what the planned layout starts after the change
    change_s: float = RECONFIG_S
    horizon_s: float = HORIZON_S
    kept_drain: QueueDrain | None = None  # the queue's drain time with the current layout
    carved_drain: QueueDrain | None = None  # ... with the planned one (both or neither)

    @property
    def kept_rate(self) -> float:
        return sum(s.rate for s in self.kept)

    @property
    def carved_rate(self) -> float:
        return sum(s.rate for s in self.carved)

    @property
    def rate_pays(self) -> bool:
        """The carved layout gets more work done over the horizon than the kept one."""
        carved_work = self.carved_rate * max(0.0, self.horizon_s - self.change_s)
        return carved_work > self.kept_rate * self.horizon_s * (1.0 + 1e-9)

    @property
    def slows_the_queue(self) -> bool:
        """The queue as it is drains later with the carved layout (where it was predicted)."""
        if self.kept_drain is None or self.carved_drain is None:
            return False
        return self.carved_drain.slower_than(self.kept_drain)

    @property
    def unblocks_the_queue(self) -> bool:
        """With the current layout some queued jobs never start (no slice holds them, and none
        frees up for them: the GPU changes only while idle), fewer with the carved one."""
        if self.kept_drain is None or self.carved_drain is None:
            return False
        return self.carved_drain.cannot_run < self.kept_drain.cannot_run

    @property
    def worth(self) -> bool:
        return self.unblocks_the_queue or (self.rate_pays and not self.slows_the_queue)

    @property
    def claimed(self) -> tuple[int, ...]:
        """The queued jobs this GPU's chosen layout starts."""
        return tuple(s.job_id for s in (self.carved if self.worth else self.kept))

    def summary(self) -> str:
        def jobs(starts: Sequence[SliceStart]) -> str:
            return ", ".join(str(s.job_id) for s in starts) or "none"

        verdict = "pays" if self.worth else "does not pay"
        drains = ""
        if self.kept_drain is not None and self.carved_drain is not None:
            drains = (
                f"; the queue drains in {self.carved_drain.text()} with it against "
                f"{self.kept_drain.text()} as it is (SIMULATED)"
            )
        return (
            f"GPU {self.gpu}: {', '.join(self.current) or 'no instances'} -> "
            f"{', '.join(self.planned)}: the queue's predicted work rate "
            f"{self.kept_rate:.2f} (jobs {jobs(self.kept)}) -> {self.carved_rate:.2f} "
            f"(jobs {jobs(self.carved)}) after ~{self.change_s:.0f} s of change (assumed), "
            f"over {self.horizon_s / 60:.0f} min{drains}: it {verdict}"
        )


@dataclass(frozen=True)
class LayoutChoice:
    """An idle MIG-mode GPU's plan and its payoff; `payoff.planned` is the layout it would get
    (the plan's slices for the queue, then spare ones for jobs to come: `MigPlan.spare`)."""

    plan: MigPlan
    payoff: LayoutPayoff


def _memory_slices(gpu: GpuMigState, profile: GiProfile) -> int:
    return memory_slices(profile.short_name, table_for_gpu(gpu.name) or None)


def _rate(gpu: GpuMigState, profile: GiProfile, job: QueuedDemand, params: ModelParams) -> float:
    load = workload(job.sm_pct, job.membw_pct, params)
    return mig_rate(params, load, profile.compute_slices, _memory_slices(gpu, profile))


def kept_starts(
    gpu: GpuMigState, queue: Sequence[QueuedDemand], params: ModelParams
) -> tuple[SliceStart, ...]:
    """The queued jobs the GPU's current (idle) instances would start, each on the slice
    placement would give it (`slice_choice.best_slice`)."""
    by_name = {p.short_name: p for p in gpu.profiles}
    free = [by_name[name] for name in gpu.current if name in by_name]
    starts = []
    for job in queue:
        best = best_slice(
            [
                SliceOption(p, _rate(gpu, p, job, params), p.compute_slices, memory_mib(p))
                for p in free
                if memory_mib(p) >= job.memory_mib
            ],
            workload(job.sm_pct, job.membw_pct, params).sm,
        )
        if best is not None:
            free.remove(best.slice)
            starts.append(SliceStart(job.job_id, best.slice.short_name, best.rate))
    return tuple(starts)


def carved_starts(
    gpu: GpuMigState, plan: MigPlan, queue: Sequence[QueuedDemand], params: ModelParams
) -> tuple[SliceStart, ...]:
    by_id = {p.id: p for p in gpu.profiles}
    jobs = {job.job_id: job for job in queue}
    return tuple(
        SliceStart(s.job_id, s.profile, _rate(gpu, by_id[s.profile_id], jobs[s.job_id], params))
        for s in plan.wanted
    )


def auto_note(mig_repartition: bool, on_its_own: bool, policy: str) -> str:
    """Said after auto's verdict on a plan (`mig_plan`'s `auto`) where auto would not act on it:
    the station does not allow repartitioning, or its policy never repartitions on its own."""
    if not mig_repartition:
        return "; auto changes it only with [station] mig_repartition = true"
    if not on_its_own:
        return f"; the {policy} policy never changes a layout on its own"
    return ""


def auto_said(
    choices: Sequence[LayoutChoice], plans: Sequence[MigPlan], note: str
) -> dict[int, str]:
    """Auto's verdict on each GPU's plan (`mig_plan`'s `auto`), by GPU index, `note` after it.
    Auto weighs the plan shown, but where a GPU before this one keeps its own layout (its
    change does not pay), that GPU claims the jobs its current slices start rather than those
    of its plan, and auto plans this one for the jobs left: a layout other than the one shown,
    which is then said as such rather than passed off as the shown plan's."""
    shown = {plan.gpu: Counter(plan.wanted_profiles) for plan in plans if plan.wanted}
    said = {}
    for c in choices:
        other = shown.get(c.payoff.gpu, Counter(c.payoff.planned)) != Counter(c.payoff.planned)
        why = " (not the layout shown: it plans for the jobs the GPUs before it leave)"
        said[c.payoff.gpu] = c.payoff.summary() + note + why * other
    return said


def choose_layouts(
    gpus: Sequence[GpuMigState],
    queue: Sequence[QueuedDemand],
    params_for: Callable[[str], ModelParams],
    *,
    simulated: bool,
    commands_from: MigCommands,
    change_s: float = RECONFIG_S,
    horizon_s: float = HORIZON_S,
    drain: DrainFn | None = None,
) -> list[LayoutChoice]:
    """Every idle MIG-mode GPU's planned layout with its payoff, in index order; each GPU plans
    for the jobs the GPUs before it did not claim. The caller changes those whose payoff is
    `worth` (and only where the station allows it: that is not checked here). `drain`: the
    queue's predicted drain time with a layout, asked twice (as it is, as planned) where the
    layout would change: a change the replay says slows the queue is not made, and one that
    lets jobs start that would never start on the current layout is made even where the rates
    of the jobs it starts now say no (a GPU is changed only while idle: a layout holding none of
    the waiting jobs' slices would hold them for ever)."""
    left = [job for job in queue if not job.held]
    choices = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        if not (gpu.mig_enabled and gpu.idle and gpu.profiles and left):
            continue
        plan = plan_gpu(
            gpu, left, repartition_allowed=True, simulated=simulated, commands_from=commands_from
        )
        layout = tuple(plan.wanted_profiles) or gpu.current  # the slices, then the spare ones
        params = params_for(gpu.name)
        kept = kept_starts(gpu, left, params)
        if Counter(layout) == Counter(gpu.current):
            carved = kept  # the layout stays as it is
        else:
            carved = carved_starts(gpu, plan, left, params)
        payoff = LayoutPayoff(gpu.index, gpu.current, layout, kept, carved, change_s, horizon_s)
        if drain is not None and carved is not kept:
            kept_drain, carved_drain = drain(gpu, gpu.current, left), drain(gpu, layout, left)
            if kept_drain is not None and carved_drain is not None:
                payoff = replace(payoff, kept_drain=kept_drain, carved_drain=carved_drain)
        choices.append(LayoutChoice(plan, payoff))
        claimed = set(payoff.claimed)
        left = [job for job in left if job.job_id not in claimed]
    return choices
