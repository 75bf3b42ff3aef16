"""Preemption on a full station, with the job's cooperation (Gandiva's suspend/resume, Slurm's
`--signal` + requeue): which running preemptible job, if any, gives way to a waiting one. Pure:
the engine (gpudesk.engine.preempting) and the simulator ask the same function.

The rule, for a waiting GPU job W and a running job V marked preemptible:

- **Who may ask.** W has a higher priority than V, or W is *starving* (later jobs started ahead
  of it `MAX_OVERTAKES` times, as collocation counts it) and V's priority is not above W's. A
  job is never preempted for one of lower priority.
- **Gain.** The time W is spared waiting: `wait = min(V's remaining time, the soonest any GPU
  drains by itself)`, less V's grace period (W waits for V to checkpoint and leave):
  `gain = wait - grace_V`. V's remaining time is its command family's history estimate
  (`Remaining.measured_s`), never its own progress lines (its owner writes
  them and would gain from understating them); where unknown, the time it has run already
  (assumption: for the heavy-tailed run times of shared clusters a job that has run t is as
  likely as not to run about t more, Harchol-Balter & Downey 1997; it also never calls a job
  that just started "nearly done").
- **Loss.** What the preempted work throws away: `loss = grace_V + restart_V`, the time it
  spends checkpointing (at most its grace) plus what resuming costs it (loading the checkpoint,
  warming up). A job that does not checkpoint loses more (all its run since start); marking
  it preemptible is its owner's statement that it does.
- **Preempt** when `gain > loss`, W fits where V was (the policy itself places W on the station
  with V gone), and V is not *protected*: its current attempt has run at least
  `PROTECT_FACTOR × loss_V`, so at most a third of any job's time goes to preemption overhead
  and a job resumed after a preemption is not preempted again at once (no thrashing).
- One victim per waiting job (a job that would need two to fit waits), and one preemption per
  call: the freed GPU is placed by the next pass, as any other.
- A job that can start only once the station changes (an admin leaving MIG mode, a lost GPU
  back: the policy's `change_needed`) never asks: no victim's leaving would start it.

Among the victims that qualify for the first W (in queue order) that has one: the lowest
priority, then the smallest loss, then the longest remaining time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import msgspec

from gpudesk.core.records import JobRecord
from gpudesk.policy.admission import ChangeJudge
from gpudesk.policy.collocation import MAX_OVERTAKES
from gpudesk.policy.policy import PlacementPolicy, StationView
from gpudesk.policy.remaining import trusted_drain_s
from gpudesk.render import duration

# A preempted job's current attempt must have run this many times its preemption loss before it
# may be preempted again (assumption: overhead at most 1/(1+2) of its time).
PROTECT_FACTOR = 2.0
# Waiting jobs weighed per call, at most (each costs a placement of it): a long queue of jobs
# that could ask is not a pass over all of it; the first in the queue's order come first.
MAX_ASKERS = 8


class Preemptible(msgspec.Struct, frozen=True):
    """A running job marked preemptible, as the decision sees it."""

    job_id: int
    priority: int
    run_s: float  # how long its current attempt has run
    remaining_s: float | None  # its estimate (None: unknown)
    grace_s: float  # between its preempt signal and SIGTERM
    restart_s: float  # what resuming from its checkpoint costs it

    @property
    def loss_s(self) -> float:
        return self.grace_s + self.restart_s

    @property
    def expected_left_s(self) -> float:
        """Its remaining time, or (unknown) the time it has run (the module's assumption)."""
        return self.remaining_s if self.remaining_s is not None else self.run_s

    @property
    def protected(self) -> bool:
        return self.run_s < PROTECT_FACTOR * self.loss_s

    def gain_s(self, natural_s: float | None) -> float:
        """The waiting its preemption spares a job that may ask: its expected remaining time,
        or the soonest a GPU drains by itself (`natural_s`) where that is sooner, less the grace
        the asker waits anyway."""
        left = self.expected_left_s
        return (left if natural_s is None else min(natural_s, left)) - self.grace_s

    @property
    def order(self) -> tuple[float, ...]:
        """Which victim goes first: the lowest priority, the smallest loss, the longest left."""
        return (self.priority, self.loss_s, -self.expected_left_s, self.job_id)


class Preemption(msgspec.Struct, frozen=True):
    victim: int  # the job to preempt
    for_job: int  # the waiting job it makes room for
    gain_s: float
    loss_s: float
    reason: str


class Fits(msgspec.Struct, frozen=True):
    """What the rule asks the placement policy (`placed_by`): whether it would start a job on
    a station as given, and whether a job waits for a change to the station that no preemption
    makes (an admin leaving MIG mode, a lost GPU back: `admission.ChangeJudge`)."""

    policy: PlacementPolicy

    def __call__(self, job: JobRecord, station: StationView) -> bool:
        """Whether the policy would start `job` on `station`, alone in the queue."""
        decision = self.policy.place([job], station)
        return any(p.job_id == job.id for p in decision.placements)

    def change_judge(self, station: StationView) -> ChangeJudge:
        """Whether a job can start only once the station changes (the policy's reason, or ""),
        judged once per job shape over one look at `station`."""
        return ChangeJudge(self.policy, station)


def placed_by(policy: PlacementPolicy) -> Fits:
    """What the rule asks `policy` (Fits)."""
    return Fits(policy)


def starving(job: JobRecord, station: StationView, max_overtakes: int = MAX_OVERTAKES) -> bool:
    """Later jobs started ahead of it as often as collocation lets them (a multi-GPU job's
    budget is 0 there: it counts as starving once one has)."""
    return station.overtaken.get(job.id, 0) >= overtake_budget(job, max_overtakes)


def overtake_budget(job: JobRecord, max_overtakes: int = MAX_OVERTAKES) -> int:
    """How often later jobs may start ahead of the job before it counts as starving."""
    return max_overtakes if job.spec.gpus <= 1 else 1


def may_ask(waiting: JobRecord, victim: Preemptible, hungry: bool) -> bool:
    """Whether the rule lets `waiting` (starving or not: `hungry`) preempt `victim`."""
    mine = waiting.spec.priority
    return victim.job_id != waiting.id and (
        victim.priority < mine or (hungry and victim.priority <= mine)
    )


def without(station: StationView, job_id: int) -> StationView:
    """The station as it would be once `job_id` has left its GPUs."""
    states = tuple(
        replace(g, tenants=tuple(t for t in g.tenants if t.job_id != job_id))
        if any(t.job_id == job_id for t in g.tenants)
        else g
        for g in station.gpu_states
    )
    return msgspec.structs.replace(station, gpu_states=states)


# Remaining times the rule believes: those the engine measured (`Remaining.measured_s`, a job's
# family's history whether or not it prints progress), never a job's own progress lines. A
# preemption is decided against a job's owner, and she writes its progress lines: a fake
# `progress 999/1000` would make her job look as good as finished and never give way.


def natural_wait_s(station: StationView) -> float | None:
    """The soonest a GPU is expected to drain by itself, by the remaining times the engine
    measured (`trusted_drain_s`); None: no GPU's time is known so."""
    known = [trusted_drain_s(g.tenants) for g in station.gpu_states if not g.lost]
    return min((k for k in known if k is not None), default=None)


def choose(
    queue: Sequence[JobRecord],
    station: StationView,
    running: Sequence[Preemptible],
    fits: Fits,
    skip: frozenset[int] = frozenset(),
) -> Preemption | None:
    """The preemption the rule (module docstring) calls for, or None. `queue`: the jobs still
    waiting after the pass, in placement order; `running`: the running preemptible jobs;
    `fits`: whether the policy would place a job on a station (`placed_by`); `skip`: waiting
    jobs a preemption already in flight serves, and running jobs already told to stop. At most
    `MAX_ASKERS` waiting jobs that some victim could serve are weighed (each costs the policy a
    placement), the first in the queue's order."""
    natural = natural_wait_s(station)
    paying = []  # (victim, gain): those whose preemption pays whoever asks
    for victim in running:
        if victim.job_id in skip or victim.protected:
            continue
        gain = victim.gain_s(natural)
        if gain > victim.loss_s:
            paying.append((victim, gain))
    if not paying:
        return None
    paying.sort(key=lambda vg: vg[0].order)
    lowest = paying[0][0].priority
    asked = 0
    waits_for_change = fits.change_judge(station)
    for waiting in queue:
        if not waiting.spec.gpus or waiting.id in skip or waiting.held:
            continue
        mine, hungry = waiting.spec.priority, starving(waiting, station)
        if mine <= lowest and not (hungry and mine == lowest):
            continue
        serving = [(v, gain) for v, gain in paying if may_ask(waiting, v, hungry)]
        if not serving:
            continue
        # no victim's leaving starts a job that waits for an admin's change: not an asker, and
        # a queue of them ahead does not use up the askers a job that could start is weighed in
        if waits_for_change(waiting):
            continue
        asked += 1
        for victim, gain in serving:
            if fits(waiting, without(station, victim.job_id)):
                return _preemption(waiting, victim, gain)
        if asked >= MAX_ASKERS:
            return None
    return None


def _preemption(waiting: JobRecord, victim: Preemptible, gain: float) -> Preemption:
    mine = waiting.spec.priority
    if victim.priority < mine:
        why = f"has priority {mine} > {victim.priority}"
    else:
        why = "has waited past its overtake budget"
    return Preemption(
        victim.job_id,
        waiting.id,
        gain,
        victim.loss_s,
        f"preempted for job {waiting.id}, which {why}: it gains {gain:.0f} s of waiting "
        f"against {victim.loss_s:.0f} s this job loses (grace {victim.grace_s:g} s + "
        f"restart {victim.restart_s:g} s)",
    )


def held_back(
    waiting: JobRecord,
    station: StationView,
    running: Sequence[Preemptible],
    fits: Fits,
    leaving: Mapping[int, int] | None = None,
) -> str | None:
    """Why no running preemptible job gives way to `waiting` now, by the rule (module doc), in
    words for `gpudesk show`; None where the question does not arise (a CPU or held job, no
    preemptible job running). `running`: as `choose` takes them; `leaving`: the jobs already
    told to leave, each with the waiting job it leaves for. At most two jobs are named, those
    `choose` would weigh first; a job that may not be preempted for this one is named only
    where no other may be."""
    if not waiting.spec.gpus or waiting.held:
        return None
    if fits.change_judge(station)(waiting):
        return None  # its wait reason says what change it waits for; no preemption helps
    for victim, for_job in (leaving or {}).items():
        if for_job == waiting.id:
            return (
                f"job {victim} (preemptible) is leaving for it: it was sent its signal and "
                "has its grace to save its state"
            )
    if not running:
        return None
    hungry = starving(waiting, station)
    askable = [v for v in running if may_ask(waiting, v, hungry)]
    if not askable:
        return _outranked(waiting, station, running, hungry)
    askable.sort(key=lambda v: v.order)
    natural = natural_wait_s(station)
    parts = [_why_not(waiting, station, v, natural, fits) for v in askable[:2]]
    more = len(askable) - len(parts)
    return "not preempting: " + "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _outranked(
    waiting: JobRecord, station: StationView, running: Sequence[Preemptible], hungry: bool
) -> str:
    """The running preemptible jobs all outrank the waiting one, for the rule."""
    others = [v for v in running if v.job_id != waiting.id]
    named = ", ".join(str(v.job_id) for v in others[:3]) + (" ..." if len(others) > 3 else "")
    one = len(others) == 1
    jobs = f"the preemptible job {named} has" if one else f"the preemptible jobs {named} have"
    mine = waiting.spec.priority
    if hungry:
        return (
            f"no preemption: {jobs} priority above its own ({mine}); having waited past its "
            "overtake budget, it may preempt only jobs of its priority or lower"
        )
    least = min((v.priority for v in others), default=mine)
    return (
        f"no preemption: {jobs} priority {least}{'' if one else ' or more'}, not below its own "
        f"({mine}); a job of equal priority preempts only once later jobs have started ahead "
        f"of it {overtake_budget(waiting)} times (this one: "
        f"{station.overtaken.get(waiting.id, 0)})"
    )


def _why_not(
    waiting: JobRecord,
    station: StationView,
    victim: Preemptible,
    natural: float | None,
    fits: Fits,
) -> str:
    """Why the rule does not preempt `victim` for `waiting` now (the rule lets it ask)."""
    name, loss = f"job {victim.job_id}", victim.loss_s
    costs = f"grace {duration(victim.grace_s)} + restart {duration(victim.restart_s)}"
    if victim.protected:
        return (
            f"{name} is protected: its attempt has run {duration(victim.run_s)} of the "
            f"{duration(PROTECT_FACTOR * loss)} it must run before it may be preempted "
            f"({PROTECT_FACTOR:g} x what preemption costs it: {costs})"
        )
    left = victim.expected_left_s
    if victim.remaining_s is not None:
        basis = f"its remaining time, {duration(left)} by its command family's past runs"
    else:
        basis = f"its remaining time, unknown, taken as the {duration(left)} it has run"
    if natural is not None and natural < left:
        basis = f"a GPU drains by itself in {duration(natural)}, sooner than {basis}"
    gain = victim.gain_s(natural)
    if gain <= loss:
        return (
            f"preempting {name} would spare it {duration(max(0.0, gain))} of waiting ({basis}, "
            f"less {name}'s grace), no more than the {duration(loss)} {name} would lose ({costs})"
        )
    if not fits(waiting, without(station, victim.job_id)):
        return f"even with {name} gone it would not fit"
    return (
        f"preempting {name} pays ({duration(gain)} of waiting spared against {duration(loss)} "
        "lost); one job is preempted per pass, for the first waiting job in the queue it serves"
    )
