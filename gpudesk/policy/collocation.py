"""Collocation-aware placement: which GPU each job goes to, and how it shares it.

Modes: `exclusive` (a GPU to itself), `naive` (time-slicing with the GPU's other processes),
`mps` (a client of the GPU's MPS server, with a pinned-memory limit and an active-thread share)
and `mig` (a MIG slice of a fitting profile). The policies here are pure functions of the queue
and a `StationView`, so the live engine and `gpudesk simulate` run the same code.

`SharingPolicy` is gpudesk's own. In `auto` mode, per job and per GPU:
- a job that would saturate a GPU takes an idle one; a lighter job first fills the gaps on busy
  GPUs, keeping idle GPUs for heavy jobs;
- collocation only where memory fits with a margin (need + 2 GiB free after a 512 MiB reserve,
  counting both what tenants reserved and what the GPU measures; a tenant's reservation is its
  estimate until its real peak is known) and the interference model predicts the station
  gains work per second there (the job's rate less what its tenants lose; a heavy job never
  beside a heavy tenant); among those GPUs, the one that gains the most (ties: the most memory
  left);
- MPS where the GPU's MPS server is usable, else naive time-slicing (admitted by kernel-active
  time, which is what time-slicing shares out). Per job, time-slicing beside the MPS server's
  clients instead, where that gains the station more (a bandwidth-bound pair). Sharing is
  scored with the mechanism's costs at the top of their plausible range, which narrows as the
  station measures them (the robust rule, `InterferenceModel.pessimistic`): a job shares only
  where the station gains even there. A MIG slice where the GPU
  is in MIG mode; whole idle GPUs for multi-GPU jobs and after an out-of-memory death. An MPS
  client may grow into the memory its co-tenants left free (all of it, alone), never into theirs.
Jobs go in priority and arrival order. A job that cannot start yet may be overtaken by later
jobs `MAX_OVERTAKES` times (a multi-GPU job not at all); then the least-loaded GPUs it can run
on (never a fixed-layout MIG GPU for a job that needs whole GPUs) take no new job until it has
started, while later jobs still start on the others (bounded backfilling), so a large job is
never starved by a stream of small ones. Under `auto` a one-GPU job not yet due leaves to a
multi-GPU job just behind it the idle GPUs it could start on now, which it would otherwise hold
idle (`multi_first`).

The published baseline, CARMA, is `gpudesk.policy.carma`. The station as a pass fills it is
`filled_station`, the pass's own state and look-ahead `placement_pass`, the reasons' words
`placement_reasons`, and which MIG slice a job takes `slice_choice`.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence

import msgspec

from gpudesk.core.mig_profiles import COMPUTE_SLICES, MEMORY_SLICES, memory_slices
from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import (
    DEFAULT_MEMORY_MIB,
    DEFAULT_SM_PCT,
    UNKNOWN_HINT_SHARE,
    Demand,
    from_hints,
    hint_unknown,
    hinted,
    margin_mib,
)
from gpudesk.policy.filled_station import (
    IDLE,
    MIG,
    SHARED,
    Choice,
    FilledStation,
    Frontier,
    Host,
)
from gpudesk.policy.full_slice import full_slice_choice
from gpudesk.policy.hint_correction import CORRECTED_SOURCE
from gpudesk.policy.interference import ModelParams, Workload, mig_rate, workload
from gpudesk.policy.multi_first import held_behind
from gpudesk.policy.placement_pass import Lookahead, Pass, Shape
from gpudesk.policy.placement_reasons import (
    collocated_reason,
    foreign_reason,
    idle_share_reason,
    sliced_reason,
    unknown_reason,
)
from gpudesk.policy.policy import (
    RESERVE_MIB,
    Decision,
    GpuState,
    MigSlice,
    Rejection,
    StationView,
    cpu_placement,
    cpu_wait,
    gpu_job_impossible,
)
from gpudesk.policy.queue_classes import walk
from gpudesk.policy.slice_choice import SliceOption, best_slice
from gpudesk.policy.station_fit import (
    AsIs,
    Ask,
    MigRules,
    mig_table,
    room_once_drained,
    wait_for_change,
)
from gpudesk.policy.tail_join import at_tail, tail_join
from gpudesk.policy.wait_words import waiting_text
from gpudesk.units import MIB_PER_GB, gib

SATURATED_SM_PCT = 80.0  # CARMA: a GPU this busy over the window takes no new tenant
CARMA_WINDOW_S = 30.0  # CARMA judges a GPU over 30 one-second samples
MAX_OVERTAKES = 8  # later jobs may start ahead of a waiting job this many times
KEPT_IDLE_VALUE = 1e-3  # an idle GPU the look-ahead keeps: last resort for a job ahead
ALTERNATIVES_KEPT = 6  # how many weighed placements a decision records

MODES = ("exclusive", "naive", "mps", "mig", "auto")


def demand_of(job: JobRecord, station: StationView, hints_as_given: bool = False) -> Demand:
    """The job's demand, its memory figure marked unknown where it is (`with_unknown`).
    `hints_as_given`: a hint the station corrected by its family (hint_correction) is taken as
    the user gave it (CARMA, as published)."""
    known = station.demands.get(job.id)
    if hints_as_given and known is not None and known.source == CORRECTED_SOURCE:
        known = None
    demand = known if known is not None else from_hints(job.spec.memory_gb, job.spec.sm_pct)
    return with_unknown(demand, largest_gpu_mib(station))


def largest_gpu_mib(station: StationView) -> float:
    """The largest GPU's memory, lost ones included (one may come back)."""
    return max((g.memory_total_mib for g in station.gpu_states), default=0.0)


def with_unknown(demand: Demand, largest_mib: float) -> Demand:
    """`demand`, marked unknown where its memory figure is (demand.hint_unknown): a hint is a
    hint, never a reason to refuse a job."""
    why = hint_unknown(demand.memory_mib, demand.source, largest_mib, largest_mib - RESERVE_MIB)
    return msgspec.structs.replace(demand, unknown=why) if why and why != demand.unknown else demand


def given_room(demand: Demand, choice: Choice) -> Demand:
    """The demand a placement records, which its GPU counts as reserved until the job's peak
    is measured (demand.reservation): where its figure is unknown, all the room it was given
    (others are not packed into room it may grow into)."""
    if not demand.unknown or choice.free_mib <= 0:
        return demand
    return msgspec.structs.replace(demand, memory_mib=choice.free_mib)


class SharingPolicy:
    """gpudesk's policy; `mode` forces one sharing mechanism, or "auto" picks per job."""

    def __init__(self, mode: str = "auto", max_overtakes: int = MAX_OVERTAKES) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown sharing mode {mode!r}; known: {', '.join(MODES)}")
        self.mode = mode
        self.name = mode
        self.max_overtakes = max_overtakes
        self.kept_free_mib = RESERVE_MIB
        self.hints_as_given = False  # a corrected hint is used (CARMA: the hint as given)
        # in the `mig` mode every one-GPU job runs on a slice
        self.rules = MigRules(slices_only=mode == "mig")

    # ---------------------------------------------------------------- placing
    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision:
        run = Pass(
            FilledStation({g.index: g for g in station.gpu_states}),
            station,
            Lookahead(queue, station),
            AsIs(self.rules, station),
        )
        plan, no_room, as_is = run.plan, run.no_room, run.as_is
        cpu_slots: list[str] | None = None  # the free CPU slots, once a CPU job is met
        largest = largest_gpu_mib(station)
        # Jobs whose memory figure is certainly usable skip the full check (a long queue is
        # mostly such jobs): below what the largest GPU offers alone and below the share where
        # a hint is taken as unknown.
        plain = min(largest - RESERVE_MIB, UNKNOWN_HINT_SHARE * largest)
        demands = station.demands
        # One-GPU jobs with hints alone, certainly usable, placed as they are (most of a long
        # queue: this loop is the policy's hot path) skip the full check (`_judge`): no Demand
        # object until the job may fit, and their frontiers (the same objects as in `no_room`,
        # which `_weigh` adds to) by owner, found without a shape tuple.
        hinted_only = self.mode != "exclusive" and bool(station.gpu_states)
        frontiers: dict[int, Frontier] = {}
        # the last hot-path job's owner and frontier, until a job is weighed (it may add one)
        last_uid: int | None = None
        frontier: Frontier | None = None
        seeking = True  # no job waits for GPUs yet (`run.waiting`, set once a pass)
        # A job its frontier dominates leaves the rest of its class nothing to do in this pass
        # (`queue_classes`): `drop`, where the queue knows its classes, skips them.
        jobs, drop = walk(queue)
        for position, job in jobs:
            spec = job.spec
            gpus = spec.gpus
            if not gpus:
                if cpu_slots is None:
                    cpu_slots = station.free_slots
                if cpu_slots:
                    plan.placements.append(cpu_placement(job, cpu_slots.pop(0), station))
                continue
            known = demands.get(job.id)
            if known is None and gpus == 1 and hinted_only:
                memory = spec.memory_gb  # `demand.hinted` without a call (the same arithmetic)
                memory = DEFAULT_MEMORY_MIB if memory is None else memory * MIB_PER_GB
                if memory < plain:
                    sm = spec.sm_pct
                    if sm is None:
                        sm = DEFAULT_SM_PCT
                    uid = job.owner.uid
                    if uid != last_uid:  # most jobs are the last one's owner's
                        frontier = frontiers.get(uid)
                        if frontier is None:
                            frontier = no_room.get((1, False, False, False, uid))
                            if frontier is not None:
                                frontiers[uid] = frontier
                        last_uid = uid
                    # Frontier.dominates, inline (a call a job is a good part of the cost)
                    if (
                        frontier is not None
                        and (point := bisect_right(frontier.memory, memory) - 1) >= 0
                        and frontier.sm[point] <= sm
                    ):
                        if seeking and as_is(1, False, memory):
                            run.waiting, seeking = job, False
                        if drop is not None:
                            drop()
                        continue
                    demand = from_hints(spec.memory_gb, spec.sm_pct)
                    shape = (1, False, False, False, uid)
                    self._weigh(run, job, position, demand, shape, (memory, sm))
                    seeking, last_uid = run.waiting is None, None  # (its frontier may be new)
                    continue
            if self._judge(run, job, position, known, plain) and drop is not None:
                drop()
            seeking, last_uid = run.waiting is None, None
        held = {} if run.reserved_for is None else dict.fromkeys(run.reserved, run.reserved_for)
        return Decision(plan.placements, run.rejections, run.overtaken, held)

    def _judge(
        self, run: Pass, job: JobRecord, position: int, known: Demand | None, plain: float
    ) -> bool:
        """A GPU job off `place`'s hot path: rejected if it can never run here, skipped where
        its shape's frontier says it finds no room (True), else weighed. `known`: the station's
        demand for it; `plain`: below this a memory figure is certainly usable."""
        station, spec, gpus = run.station, job.spec, job.spec.gpus
        if known is None:
            memory, sm = hinted(spec.memory_gb, spec.sm_pct)
            exclusive = banded = history = False
        else:
            memory, sm, exclusive = known.memory_mib, known.sm_pct, known.exclusive
            banded, history = known.membw_pct is not None, known.source == "history"
        # A job placed on whole GPUs is judged by its memory alone (`_whole_gpus`): its
        # frontier point has no SM, so any job of its shape needing as much is dominated.
        whole = self._whole(gpus, exclusive)
        demand: Demand | None = None
        if not (gpus <= len(station.gpu_states) and memory < plain):
            largest = largest_gpu_mib(station)
            demand = with_unknown(known or from_hints(spec.memory_gb, spec.sm_pct), largest)
            measured = demand.source == "after OOM"
            impossible = gpu_job_impossible(gpus, memory, station, RESERVE_MIB, measured)
            if impossible:
                run.rejections.append(Rejection(job.id, f"the job {impossible}"))
                return False
            memory = demand.admit_mib
            shape = (gpus, exclusive, history, bool(demand.unknown), job.owner.uid)
        else:
            shape = (gpus, exclusive, history, False, job.owner.uid)
        frontier = run.no_room.get(shape)
        if frontier is not None and not banded and frontier.dominates(memory, 0.0 if whole else sm):
            if run.waiting is None and run.as_is(gpus, whole, memory):
                run.waiting = job
            return True
        if demand is None:
            demand = known or from_hints(spec.memory_gb, spec.sm_pct)
        self._weigh(run, job, position, demand, shape, (memory, 0.0 if whole else sm))
        return False

    def _weigh(
        self,
        run: Pass,
        job: JobRecord,
        position: int,
        demand: Demand,
        shape: Shape,
        point: tuple[float, float],
    ) -> None:
        """The job judged in full, at `position` in the queue: placed where `choose` says, or
        left waiting, its (memory, SM) `point` then on its shape's no-room frontier."""
        waiting = run.waiting
        if waiting is not None and not run.reserved and self.due(run, waiting):
            # Its turn: the GPUs that will free up first take nothing new until it starts.
            run.reserved = self.reserve(waiting, run.station, run.plan.gpus.values())
            run.reserved_for = waiting.id
        held: frozenset[int] = frozenset()
        if self.robust and job.spec.gpus == 1 and not self.due(run, job):
            held = held_behind(
                run, position, lambda m: self.ask(m, demand_of(m, run.station, self.hints_as_given))
            )
        choice = self.choose(
            job,
            demand,
            run.plan,
            run.station,
            exclude=run.reserved | held if held else run.reserved,
            behind=functools.partial(run.lookahead.behind, position),
            queued_after=len(run.lookahead.queue) - position - 1,
        )
        if choice is None:
            whole = self._whole(job.spec.gpus, demand.exclusive)
            if waiting is None and run.as_is(job.spec.gpus, whole, demand.admit_mib):
                # the first job that could start once GPUs drain: the one GPUs may be held
                # for (a job that first needs an admin's change could not use them)
                run.waiting = job
            # the frontier knows memory and SM only, and holds for every job of the shape:
            # not where GPUs were kept from this one for a multi-GPU job (a due one may take them)
            if demand.membw_pct is None and not held:
                run.no_room.setdefault(shape, Frontier()).add(*point)
            return
        run.plan.take(job, given_room(demand, choice), choice, run.station)
        if waiting is not None:
            run.overtaken[waiting.id] = run.overtaken.get(waiting.id, 0) + 1

    @property
    def robust(self) -> bool:
        """Whether sharing is judged with its costs at the top of their range (the robust
        rule): `auto` only. Forced modes are comparators; CARMA has rules of its own."""
        return self.name == "auto"

    def overtake_budget(self, job: JobRecord) -> int:
        """How often later jobs may start first. A multi-GPU job needs whole idle GPUs, which a
        stream of small jobs never leaves, and every minute it waits costs several GPUs' worth:
        like Slurm's backfill for the top job, its GPUs are held from the first time it waits
        (later jobs still start on the others)."""
        return self.max_overtakes if job.spec.gpus <= 1 else 0

    def _whole(self, gpus: int, exclusive: bool) -> bool:
        """Whether a job needs whole GPUs to itself (`_whole_gpus`) under this policy."""
        return gpus > 1 or exclusive or self.mode == "exclusive"

    def ask(self, job: JobRecord, demand: Demand) -> Ask:
        """What the job needs of the station's GPUs under this policy."""
        whole = self._whole(job.spec.gpus, demand.exclusive)
        return Ask(job.spec.gpus, demand.admit_mib, whole)

    def reserve(
        self, job: JobRecord, station: StationView, gpus: Iterable[GpuState] | None = None
    ) -> set[int]:
        """The GPUs a long-waiting job will get: the least loaded of those it can run on once
        they drain (`gpus`: the station as this pass has filled it). A GPU in MIG mode runs
        jobs on its slices only, so it is never held for a job that needs whole GPUs, and for a
        one-GPU job only where one of its slices (or a profile the engine may carve) holds the
        job's memory: holding any other GPU would keep it idle for nothing while the job still
        waits for the GPUs it can use. None at all where too few could run it
        (station_fit.runs_as_is): it waits for an admin's change, not for GPUs to drain."""
        ask = self.ask(job, demand_of(job, station, self.hints_as_given))
        usable = [
            g
            for g in (station.gpu_states if gpus is None else gpus)
            if room_once_drained(g, ask.whole, self.rules, station, ask.gpus == 1) >= ask.memory_mib
        ]
        # the GPUs that drain first where every candidate's tenants say when they end (their
        # progress or their command family's history), else the least loaded
        by_drain = all(g.drains_in_s is not None for g in usable)
        usable.sort(
            key=lambda g: (
                (g.drains_in_s or 0.0) if by_drain else 0.0,
                g.sm_demand_pct,
                len(g.tenants),
                g.index,
            )
        )
        need = max(1, job.spec.gpus)
        return {g.index for g in usable[:need]} if len(usable) >= need else set()

    def choose(
        self,
        job: JobRecord,
        demand: Demand,
        plan: FilledStation,
        station: StationView,
        exclude: set[int] | frozenset[int] = frozenset(),
        behind: Callable[[], int] = lambda: 0,
        queued_after: int = 0,
    ) -> Choice | None:
        """The best placement for the job now, or None (it waits). Every feasible placement is
        scored by the interference model: the work per second the station gains (the job's
        speed there, minus what it costs the tenants it joins), less, for an idle GPU, what
        it takes from the jobs behind that need one. `queued_after`: how many jobs wait
        behind it (at the queue's tail a job may join where it finishes sooner: tail_join)."""
        hosts = plan.hosts(station, self.mode, job.owner.uid, exclude)
        if self._whole(job.spec.gpus, demand.exclusive):
            return self._whole_gpus(job, demand, [h.gpu for h in hosts])
        options: list[Choice] = []
        # The idle GPUs the jobs just behind will need: taking one of those costs them. A job
        # whose memory is unknown needs one as much as they do: alone it cannot run short.
        keep_idle = False
        if not demand.heavy and not demand.unknown:
            # only a GPU no job has joined is idle (most of a long queue's jobs find none)
            idle_whole = sum([h.idle_whole for h in hosts]) if plan.idle_indices() else 0
            keep_idle = bool(idle_whole) and behind() >= idle_whole
        # placed for the room it gets where its figure is unknown
        admitted = (
            msgspec.structs.replace(demand, memory_mib=demand.admit_mib)
            if demand.unknown
            else demand
        )
        memory = admitted.memory_mib
        margin = margin_mib(demand)
        load: Workload | None = None  # the job's workload under `load_params`
        load_params: ModelParams | None = None  # (one GPU model on most stations)
        option: Choice | None
        for host in hosts:
            kind = host.kind
            if kind == SHARED:
                if memory + margin > host.room_mib:
                    continue
                if host.params is not load_params:
                    load_params = host.params
                    load = workload(demand.sm_pct, demand.membw_pct, load_params)
                assert load is not None
                option = self._shared_option(plan, host, admitted, margin, load, job.owner.uid)
            elif kind == IDLE:
                if memory > host.room_mib:
                    continue
                option = self._idle_option(host, keep_idle, demand)
            elif kind == MIG:
                option = self._mig_option(host.gpu, admitted, job.id, host.params)
            else:
                continue
            if option is not None:
                options.append(option)
        if not options:
            return self._at_tail(job, demand, plan, station, hosts, queued_after)
        if demand.unknown:
            # where the room is largest: alone on an idle GPU, else the most memory left free
            options.sort(key=lambda o: (not o.alone, -o.free_mib, -o.value, o.rank))
        else:
            options.sort(key=lambda o: (-o.value, o.rank))
        best = options[0]
        if best.value <= 0.0:
            # nowhere gains: waiting for a GPU is better than slowing others (but at the tail)
            return self._at_tail(job, demand, plan, station, hosts, queued_after)
        shown = [o.alternative("chosen" if o is best else "") for o in options[:ALTERNATIVES_KEPT]]
        best.alternatives = tuple(shown)
        if best.why is not None:
            best.reason = best.why()
        if demand.unknown:
            best.reason += "; " + unknown_reason(demand, best.free_mib, best.alone)
        return best

    def due(self, run: Pass, job: JobRecord) -> bool:
        """Whether later jobs have overtaken the job as often as they may (this pass too)."""
        overtaken = run.station.overtaken.get(job.id, 0) + run.overtaken.get(job.id, 0)
        return overtaken >= self.overtake_budget(job)

    def _at_tail(
        self,
        job: JobRecord,
        demand: Demand,
        plan: FilledStation,
        station: StationView,
        hosts: Sequence[Host],
        queued_after: int,
    ) -> Choice | None:
        """Where nowhere gains under the robust rule: the job waits, except at the queue's tail
        where joining finishes it (and its tenants) before waiting would (tail_join)."""
        if not self.robust or not at_tail(queued_after, station):
            return None
        choice = tail_join(job, demand, plan, station, hosts)
        if choice is not None and choice.why is not None:
            choice.reason = choice.why()
        return choice

    def _whole_gpus(self, job: JobRecord, demand: Demand, gpus: list[GpuState]) -> Choice | None:
        # A simulated MIG GPU that is idle can be set whole again. A GPU too small for the job
        # is no use to it: a rerun after an OOM needs the largest ones.
        need = demand.admit_mib
        idle = [
            g
            for g in gpus
            if g.idle and g.whole_once_idle and g.memory_total_mib - RESERVE_MIB >= need
        ]
        why = (
            "after an out-of-memory death it runs alone"
            if demand.source == "after OOM"
            else "multi-GPU jobs get whole GPUs"
            if job.spec.gpus > 1
            else "exclusive placement"
        )
        if len(idle) < job.spec.gpus:
            # one GPU's worth alone: a MIG slice with all of a GPU's compute will do
            return full_slice_choice(need, gpus, why) if job.spec.gpus == 1 else None
        chosen = tuple(g.index for g in idle[: job.spec.gpus])
        room = min(g.memory_total_mib for g in idle[: job.spec.gpus]) - RESERVE_MIB
        if demand.unknown:
            why += "; " + unknown_reason(demand, room, True)
        return Choice(
            chosen,
            "exclusive",
            f"GPU {','.join(map(str, chosen))} idle; {why}",
            alone=True,
            free_mib=room,
        )

    def _idle_option(self, host: Host, keep_idle: bool, demand: Demand) -> Choice:
        """The job alone on an idle GPU. Kept for the jobs behind (`keep_idle`): any sharing
        placement that gains goes first, but a job with nowhere else to go still takes it (it
        is ahead of them in the queue)."""
        index = host.gpu.index
        where = f"GPU {index} idle" + (" (kept for the heavier jobs queued behind)" * keep_idle)
        # written out only for the option chosen: a pass weighs every idle GPU for every job
        share, mode = host.share, self.mode
        return Choice(
            (index,),
            share,
            where,
            why=lambda: f"{where}; {idle_share_reason(host.gpu, share, demand, mode)}",
            alone=True,
            free_mib=host.room_mib,  # what it may use alone
            value=KEPT_IDLE_VALUE if keep_idle else 1.0,
            rank=(0.0, index),
        )

    def _shared_option(
        self,
        plan: FilledStation,
        host: Host,
        demand: Demand,
        margin: float,
        load: Workload,
        uid: int | None = None,
    ) -> Choice | None:
        """The job beside the GPU's tenants under MPS or time-slicing (its memory fits with
        the margin), if the model predicts the station gains. `uid`: the job's owner (named
        in the reason where another user's MPS server makes it time-slice)."""
        if demand.heavy and host.heavy_tenant:
            return None  # two compute-heavy jobs: no gain (published)
        bounded = demand.membw_pct is None
        if bounded and demand.sm_pct >= host.gainless_sm:
            return None
        robust = self.robust
        # the score depends on the job's workload (its SM and bandwidth under the host's
        # parameters) and the host alone: each host scores each workload once
        key = (demand.sm_pct, demand.membw_pct, robust)
        scored = host.scored.get(key)
        if scored is None:
            scored = host.scored[key] = plan.score(host, load, robust)
        share, value, predicted, under_mps = (
            scored.share,
            scored.value,
            scored.predicted,
            scored.under_mps,
        )
        if predicted is None:
            if bounded:
                host.gainless_sm = min(host.gainless_sm, demand.sm_pct)
            return None
        gpu = host.gpu
        why = functools.partial(
            collocated_reason, gpu, share, demand, predicted, margin, value if robust else None
        )
        if under_mps is not None:
            why = functools.partial(lambda w, mps: f"{w()}; {sliced_reason(mps)}", why, under_mps)
        if host.mps_user is not None and uid is not None:
            why = functools.partial(lambda w, u: foreign_reason(gpu, u, w()), why, uid)
        return Choice(
            (gpu.index,),
            share,
            "",  # written only if this option is chosen (a pass weighs many)
            why=why,
            free_mib=host.room_mib,
            rate=predicted.rate,
            value=value,
            rank=(1.0, -host.room_mib, gpu.index),
        )

    def _mig_option(
        self, gpu: GpuState, demand: Demand, job_id: int, params: ModelParams
    ) -> Choice | None:
        """The best MIG slice for the job on this GPU (`best_slice`), among its free instances
        and, where slices may be carved, the profiles that still fit."""
        need = demand.memory_mib
        job_load = workload(demand.sm_pct, demand.membw_pct, params)
        table = mig_table(gpu)
        fitting: list[SliceOption[MigSlice]] = []
        for mig in gpu.mig_slices:
            if not mig.busy and mig.memory_mib >= need:
                memory = memory_slices(mig.profile, table or None)
                rate = mig_rate(params, job_load, mig.compute_slices, memory)
                fitting.append(SliceOption(mig, rate, mig.compute_slices, mig.memory_mib))
        if gpu.mig_dynamic:
            used_compute = sum(s.compute_slices for s in gpu.mig_slices)
            used_memory = sum(memory_slices(s.profile, table or None) for s in gpu.mig_slices)
            for profile in table:
                if (
                    profile.memory_mib >= need
                    and used_compute + profile.compute_slices <= COMPUTE_SLICES
                    and used_memory + profile.memory_slices <= MEMORY_SLICES
                ):
                    carved = MigSlice(
                        f"gpu{gpu.index}/{profile.name}/job{job_id}",
                        profile.name,
                        profile.memory_mib,
                        profile.compute_slices,
                    )
                    rate = mig_rate(params, job_load, profile.compute_slices, profile.memory_slices)
                    fitting.append(
                        SliceOption(carved, rate, carved.compute_slices, carved.memory_mib, True)
                    )
        best = best_slice(fitting, job_load.sm)
        if best is None:
            return None
        rate, mig, carved_new = best.rate, best.slice, best.new
        verb = "new MIG" if carved_new else "MIG"
        return Choice(
            (gpu.index,),
            "mig",
            f"{verb} {mig.profile} on GPU {gpu.index}: fits {gib(need)}, predicted speed "
            f"{rate:.2f} (isolated: slows nobody)",
            mig,
            free_mib=mig.memory_mib,  # all it may use
            rate=rate,
            value=rate,
            rank=(0.5 if not carved_new else 2.0, mig.compute_slices, gpu.index),
        )

    # ----------------------------------------------------------- explaining
    def change_needed(self, job: JobRecord, station: StationView) -> str:
        """station_fit's reason when the job can start only once the station changes (an admin
        leaving MIG mode, a lost GPU back); "" when it can start as the GPUs are set up."""
        if not job.spec.gpus or station.gpu_problem:
            return ""
        ask = self.ask(job, demand_of(job, station, self.hints_as_given))
        return wait_for_change(ask, self.rules, station, self.name)

    def explain_wait(self, job: JobRecord, queue: Sequence[JobRecord], station: StationView) -> str:
        if not job.spec.gpus:
            return cpu_wait(job, queue, station)
        if station.gpu_problem:
            return f"waiting: the GPUs cannot be read ({station.gpu_problem})"
        change = self.change_needed(job, station)
        if change:
            return change
        demand = demand_of(job, station, self.hints_as_given)
        return waiting_text(job, queue, station, demand, self.robust, station.held)
